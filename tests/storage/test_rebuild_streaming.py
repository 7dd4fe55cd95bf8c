"""A projection rebuild reads its replay in batches, on SQLite and PostgreSQL.

psycopg's default (client-side) cursor reads a whole result into memory before handing
over its first row: a rebuild replaying an aggregate type's events needed memory for all
of them.  Its replay now fetches a fixed number of events at a time (a server-side cursor
on PostgreSQL), with the same report and rows as before."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import attrs
import psycopg
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok
from kumiko_typed import _streams as streams

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)
#: Small, so that a few events make several batches and streams cross their edges.
BATCH = 4


class RsCounter(Entity):
    __tablename__ = "rs_counter"
    name: Mapped[str] = mapped_column(sa.String(50))
    count: Mapped[int]


COUNTERS: sa.Table = RsCounter.__table__  # type: ignore[assignment]


@attrs.frozen
class Open:
    name: str


@attrs.frozen
class Bump:
    id: uuid.UUID
    by: int


@attrs.frozen
class Bumped:
    by: int


def _app(app_on: AppOn, fail_at: list[int] | None = None) -> tuple[App, dict[str, Any]]:
    """The App; its projector raises on a bump by a number in ``fail_at`` (a changed
    projector's bug, which the test may fix)."""
    f: Feature[Any] = Feature("rs")
    f.entity(RsCounter)
    f.event(Bumped, name="bumped")

    @f.projector(RsCounter, Bumped)
    def bumped(row: RsCounter, event: Bumped) -> None:
        if fail_at and event.by in fail_at:
            raise ValueError("a changed projector's bug")
        row.count += event.by

    h = {
        "open": f.write_handler(
            "open",
            f.pipeline(Open)
            .create("c", RsCounter, data=lambda c: RsCounter(name=c.payload.name, count=0))
            .return_(lambda c: ok(c.steps["c"].id)),
        ),
        "bump": f.write_handler(
            "bump",
            f.pipeline(Bump)
            .append_event(RsCounter, id=lambda c: c.payload.id, event=lambda c: Bumped(c.payload.by))
            .return_(lambda c: ok(None)),
        ),
    }
    return app_on([f], clock=lambda: T0), h


@attrs.define
class Replay:
    """How the rebuild's SELECT of events was run and read."""

    options: list[dict[str, Any]] = attrs.Factory(list)
    server_side: list[bool] = attrs.Factory(list)
    fetches: list[int] = attrs.Factory(list)  # rows per fetch from its cursor


class _Counting:
    def __init__(self, cursor: Any, fetches: list[int]) -> None:
        self._cursor, self._fetches = cursor, fetches

    def _seen(self, rows: list[Any]) -> list[Any]:
        self._fetches.append(len(rows))
        return rows

    def fetchone(self) -> Any:
        row = self._cursor.fetchone()
        return row if row is None else self._seen([row])[0]

    def fetchmany(self, *args: Any) -> Any:
        return self._seen(self._cursor.fetchmany(*args))

    def fetchall(self) -> Any:
        return self._seen(self._cursor.fetchall())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


@contextmanager
def replay_of(engine: sa.Engine) -> Iterator[Replay]:
    seen = Replay()

    def wrap(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        head = " ".join(statement.split())
        if head.startswith("SELECT") and "FROM kumiko_events" in head and "ORDER BY" in head:
            seen.options.append(dict(context.execution_options))
            seen.server_side.append(isinstance(cursor, psycopg.ServerCursor))
            context.cursor = _Counting(cursor, seen.fetches)

    sa.event.listen(engine, "after_cursor_execute", wrap)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "after_cursor_execute", wrap)


def _counts(app: App) -> dict[uuid.UUID, int]:
    with app.engine.connect() as conn:
        return {row.id: row.count for row in conn.execute(sa.select(COUNTERS.c.id, COUNTERS.c.count))}


def _fill(app: App, h: dict[str, Any], user: User, bumps: int) -> list[uuid.UUID]:
    """Three counters of ``user``'s, bumped in turn ``bumps`` times (by 1, 2, ...)."""
    ids = [ok_data(app.dispatch(h["open"], Open(f"c{i}"), user=user)) for i in range(3)]
    for n in range(bumps):
        ok_data(app.dispatch(h["bump"], Bump(ids[n % 3], n + 1), user=user))
    return ids


def test_a_rebuild_reads_its_events_in_batches_and_rebuilds_the_same_rows(
    app_on: AppOn, make_user: Callable[..., User], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "_REPLAY_BATCH", BATCH)
    app, h = _app(app_on)
    alice, bob = make_user(), make_user()
    a = _fill(app, h, alice, bumps=11)  # 14 events of alice's
    b = _fill(app, h, bob, bumps=2)  # and 5 of another tenant's, not replayed for her
    built = _counts(app)
    assert [built[i] for i in a] == [1 + 4 + 7 + 10, 2 + 5 + 8 + 11, 3 + 6 + 9]
    with app.engine.begin() as conn:  # a row drifted, one lost
        conn.execute(sa.update(COUNTERS).where(COUNTERS.c.id == a[0]).values(count=99))
        conn.execute(sa.delete(COUNTERS).where(COUNTERS.c.id == a[2]))

    with replay_of(app.engine) as checked:
        verified = ok_data(app.rebuild_projection(RsCounter, user=alice, verify=True))
    assert (verified.streams, dict(verified.changed), verified.missing, verified.extra) == (
        3,
        {a[0]: ("count",)},
        (a[2],),
        (),
    )
    with replay_of(app.engine) as repaired:
        ok_data(app.rebuild_projection(RsCounter, user=alice))
    assert _counts(app) == built  # as the steps wrote them, bob's untouched

    for replay in (checked, repaired):
        assert [o.get("yield_per") for o in replay.options] == [BATCH]
        # The old code's psycopg cursor read all 14 at once; now PostgreSQL's stay there.
        assert replay.server_side == [db_url.startswith("postgresql")]
        assert sum(replay.fetches) == 14 and max(replay.fetches) <= BATCH, replay.fetches

    root = make_user("sysadmin")
    with replay_of(app.engine) as every:
        everyone = ok_data(app.rebuild_projection(RsCounter, user=root, tenant="all", verify=True))
    assert (everyone.streams, everyone.matches) == (6, True)
    assert sum(every.fetches) == 19 and max(every.fetches) <= BATCH, every.fetches
    assert set(b) <= set(_counts(app))


def test_a_projector_that_fails_in_a_later_batch_fails_the_rebuild_and_writes_nothing(
    app_on: AppOn, make_user: Callable[..., User], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "_REPLAY_BATCH", BATCH)
    app, h = _app(app_on)
    alice = make_user()
    a = _fill(app, h, alice, bumps=11)
    with app.engine.begin() as conn:
        conn.execute(sa.update(COUNTERS).where(COUNTERS.c.id == a[0]).values(count=99))

    bug = [10]  # the last stream's last bump: in the 4th batch of 4
    broken, _ = _app(app_on, bug)
    refused = failure_of(broken.rebuild_projection(RsCounter, user=alice), "internal_error")
    assert "raised ProjectorFailed: the projector" in refused.message
    assert "for Bumped raised ValueError" in refused.message
    assert "SELECT" not in refused.message and "kumiko_events" not in refused.message
    assert _counts(app)[a[0]] == 99  # nothing written
    bug.clear()  # fixed: the same App's next rebuild runs (the failed one's cursor was closed)
    report = ok_data(broken.rebuild_projection(RsCounter, user=alice))
    assert (report.streams, dict(report.changed)) == (3, {a[0]: ("count",)})
    assert _counts(app)[a[0]] == 1 + 4 + 7 + 10
