"""The write the handler and write-scaling benches time, three ways: a kumiko-typed
``get_one -> compute -> update`` handler, and what a competent engineer writes by hand
with SQLAlchemy Core or with the raw driver (sqlite3 / psycopg).

Every side persists the same per call: one event row in ``kumiko_events`` (type
``counter.updated``, payload ``{"changes": {"count": n}}``, the next stream version) and
the counter row's new ``count``, ``version`` and ``updated_at``.  The hand-written sides
send the minimal SQL, in one transaction, with optimistic locking and no other lock::

    SELECT count, version FROM bench_counter WHERE id = ? AND tenant_id = ?
    INSERT INTO kumiko_events (...) VALUES (...)
    UPDATE bench_counter SET count = ?, version = ?, updated_at = ? WHERE id = ? AND version = ?
    -- rowcount 0: ROLLBACK, version_conflict; else COMMIT

(on SQLite the transaction starts with ``BEGIN IMMEDIATE``, as the App's engine does, so
a read-decide-write never fails to upgrade its lock).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, fail, ok
from kumiko_typed._tables import events


class Counter(Entity):
    """The aggregate every side bumps (one row per writer)."""

    __tablename__ = "bench_counter"
    count: Mapped[int] = mapped_column(default=0)


@attrs.frozen
class Bump:
    id: uuid.UUID
    delta: int


@attrs.frozen
class NewCounter:
    start: int = 0


feature = Feature("bench")
feature.entity(Counter)

create_counter = feature.write_handler(
    "counter:create",
    feature.pipeline(NewCounter)
    .create("counter", Counter, data=lambda c: Counter(count=c.payload.start))
    .return_(lambda c: ok(c.steps["counter"].id)),
)

bump = feature.write_handler(
    "counter:bump",
    feature.pipeline(Bump)
    .get_one("counter", lambda c: sa.select(Counter).where(Counter.id == c.payload.id))
    .compute("count", lambda c: c.steps["counter"].count + c.payload.delta)
    .update(
        "saved",
        Counter,
        id=lambda c: c.payload.id,
        changes=lambda c: {"count": c.steps["count"]},
        version=lambda c: c.steps["counter"].version,
    )
    .return_(lambda c: ok(c.steps["count"])),
)

Side = Callable[[Bump, User], "Ok[int] | Failure"]
EVENT_TYPE = "counter.updated"
AGGREGATE = "counter"


def new_counter(app: App, user: User) -> uuid.UUID:
    made = app.dispatch(create_counter, NewCounter(), user=user)
    assert isinstance(made, Ok), made
    return made.data


def make_kumiko(app: App) -> Side:
    dispatch = app.dispatch

    def kumiko(payload: Bump, user: User) -> Ok[int] | Failure:
        return dispatch(bump, payload, user=user)

    return kumiko


def _conflict(entity_id: uuid.UUID) -> Failure:
    return fail("version_conflict", f"Counter {entity_id} changed concurrently", {"entity_id": str(entity_id)})


def _not_found(entity_id: uuid.UUID) -> Failure:
    return fail("not_found", f"Counter {entity_id} not found", {"entity_id": str(entity_id)})


# --- SQLAlchemy Core ------------------------------------------------------------------------

_T = Counter.__table__
_SELECT = sa.select(_T.c.count, _T.c.version).where(
    _T.c.id == sa.bindparam("row_id"), _T.c.tenant_id == sa.bindparam("tenant")
)
_INSERT = events.insert()
_UPDATE = (
    _T.update()
    .where(_T.c.id == sa.bindparam("row_id"), _T.c.version == sa.bindparam("expected"))
    .values(count=sa.bindparam("new_count"), version=sa.bindparam("new_version"), updated_at=sa.bindparam("now"))
)


class _Conflict(Exception):
    """The UPDATE found another version: roll the transaction back."""


def make_core(engine: sa.Engine) -> Side:
    """The write in SQLAlchemy Core: statements built once, one connection-level transaction."""

    def core(payload: Bump, user: User) -> Ok[int] | Failure:
        now = datetime.now(UTC)
        try:
            return write(payload, user, now)
        except _Conflict:
            return _conflict(payload.id)

    def write(payload: Bump, user: User, now: datetime) -> Ok[int] | Failure:
        with engine.begin() as conn:
            row = conn.execute(_SELECT, {"row_id": payload.id, "tenant": user.tenant_id}).first()
            if row is None:
                return _not_found(payload.id)
            count, version = row[0] + payload.delta, row[1] + 1
            conn.execute(
                _INSERT,
                {
                    "event_id": uuid.uuid4(),
                    "stream_id": payload.id,
                    "aggregate_type": AGGREGATE,
                    "stream_version": version,
                    "type": EVENT_TYPE,
                    "payload": {"changes": {"count": count}},
                    "headers": {},
                    "tenant_id": user.tenant_id,
                    "user_id": user.id,
                    "correlation_id": uuid.uuid4(),
                    "occurred_at": now,
                },
            )
            updated = conn.execute(
                _UPDATE,
                {"row_id": payload.id, "expected": row[1], "new_count": count, "new_version": version, "now": now},
            )
            if updated.rowcount != 1:
                raise _Conflict  # leaving the block rolls back
        return ok(count)

    return core


# --- the raw driver -------------------------------------------------------------------------

_EVENT_COLUMNS = (
    "event_id, stream_id, aggregate_type, stream_version, type, payload, headers, "
    "tenant_id, user_id, correlation_id, occurred_at"
)
_RAW_SELECT = "SELECT count, version FROM bench_counter WHERE id = {p} AND tenant_id = {p}"
_RAW_INSERT = f"INSERT INTO kumiko_events ({_EVENT_COLUMNS}) VALUES ({{ps}})"
_RAW_UPDATE = "UPDATE bench_counter SET count = {p}, version = {p}, updated_at = {p} WHERE id = {p} AND version = {p}"


def make_raw_sqlite(path: str, synchronous: str = "FULL") -> tuple[Side, Callable[[], None]]:
    """sqlite3 with the App's settings (WAL, synchronous=FULL, BEGIN IMMEDIATE), values
    stored as SQLAlchemy stores them (UUIDs as 32 hex digits, times as text)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    select, update = _RAW_SELECT.format(p="?"), _RAW_UPDATE.format(p="?")
    insert = _RAW_INSERT.format(ps=", ".join("?" * 11))
    headers = json.dumps({})

    def raw(payload: Bump, user: User) -> Ok[int] | Failure:
        now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        row_id = payload.id.hex
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(select, (row_id, user.tenant_id.hex)).fetchone()
            if row is None:
                conn.execute("ROLLBACK")
                return _not_found(payload.id)
            count, version = row[0] + payload.delta, row[1] + 1
            conn.execute(
                insert,
                (
                    uuid.uuid4().hex,
                    row_id,
                    AGGREGATE,
                    version,
                    EVENT_TYPE,
                    json.dumps({"changes": {"count": count}}),
                    headers,
                    user.tenant_id.hex,
                    user.id.hex,
                    uuid.uuid4().hex,
                    now,
                ),
            )
            if conn.execute(update, (count, version, now, row_id, row[1])).rowcount != 1:
                conn.execute("ROLLBACK")
                return _conflict(payload.id)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return ok(count)

    return raw, conn.close


def make_raw_psycopg(url: str) -> tuple[Side, Callable[[], None]]:
    """psycopg 3, one connection, its implicit transaction and server-side prepared statements
    (psycopg prepares a statement after its fifth use)."""
    import psycopg
    from psycopg.types.json import Jsonb

    conn = psycopg.connect(sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False))
    select, update = _RAW_SELECT.format(p="%s"), _RAW_UPDATE.format(p="%s")
    insert = _RAW_INSERT.format(ps=", ".join(["%s"] * 11))
    headers = Jsonb({})

    def raw(payload: Bump, user: User) -> Ok[int] | Failure:
        now = datetime.now(UTC)
        try:
            with conn.cursor() as cur:
                row: Any = cur.execute(select, (payload.id, user.tenant_id)).fetchone()
                if row is None:
                    conn.rollback()
                    return _not_found(payload.id)
                count, version = row[0] + payload.delta, row[1] + 1
                cur.execute(
                    insert,
                    (
                        uuid.uuid4(),
                        payload.id,
                        AGGREGATE,
                        version,
                        EVENT_TYPE,
                        Jsonb({"changes": {"count": count}}),
                        headers,
                        user.tenant_id,
                        user.id,
                        uuid.uuid4(),
                        now,
                    ),
                )
                if cur.execute(update, (count, version, now, payload.id, row[1])).rowcount != 1:
                    conn.rollback()
                    return _conflict(payload.id)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        return ok(count)

    return raw, conn.close


def stored(engine: sa.Engine, counter_id: uuid.UUID) -> tuple[Any, ...]:
    """What the calls left for one counter (events minus ids and times, and the row)."""
    with engine.connect() as conn:
        evs = conn.execute(
            sa.select(events.c.aggregate_type, events.c.stream_version, events.c.type, events.c.payload)
            .where(events.c.stream_id == counter_id, events.c.type == EVENT_TYPE)
            .order_by(events.c.stream_version)
        ).all()
        row = conn.execute(sa.select(_T.c.count, _T.c.version).where(_T.c.id == counter_id)).one()
    return [tuple(e) for e in evs], tuple(row)
