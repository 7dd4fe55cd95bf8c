"""Appending to and reading the event store.

Positions must commit in order: a consumer that tails ``kumiko_events`` by position
and has seen position 12 must never later find an 11 that committed after it.  On
PostgreSQL, sequence values are handed out at insert time but become visible at
commit, so appends are serialized with a transaction-scoped advisory lock taken
before the insert and held to commit — positions are then assigned in commit order.
SQLite serializes writers anyway (``BEGIN IMMEDIATE``).

Holding that order is also what lets an aggregate write skip re-reading its row: every
aggregate write takes it first, so an entity the transaction loaded *after* taking it
cannot have been changed by anyone else since (``loaded_under_lock``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import attrs
from sqlalchemy import func, insert, select, text
from sqlalchemy.orm import Session

from ._notify import CHANNEL
from ._tables import events

__all__ = [
    "APPEND_LOCK",
    "EventRow",
    "append",
    "last_position",
    "loaded_under_lock",
    "lock_append_order",
    "read_after",
]

#: The advisory lock key of the append order ("kumiko" in ASCII).
APPEND_LOCK: Final = 0x6B756D696B6F
#: Also queues the NOTIFY that wakes listening workers when the transaction commits
#: (dropped if it rolls back): one round trip for both.
_TAKE_LOCK: Final = text("SELECT pg_advisory_xact_lock(:key), pg_notify(:channel, '')")
#: ``session.info`` key: the (sub)transaction that took the append lock.
_LOCK_HOLDER: Final = "kumiko_append_locked"
#: ``session.info`` key: identity keys of the entities loaded before the lock was taken.
_LOADED_BEFORE: Final = "kumiko_loaded_before_lock"
#: Built once; each append passes its row as parameters.
_INSERT_EVENT: Final = insert(events)
_LAST_POSITION: Final = select(func.coalesce(func.max(events.c.position), 0))


@attrs.frozen
class EventRow:
    """One row of ``kumiko_events`` as stored (the payload not yet read into its class)."""

    position: int
    event_id: uuid.UUID
    stream_id: uuid.UUID
    aggregate_type: str
    stream_version: int
    type: str
    payload: Mapping[str, Any]
    schema_version: int
    headers: Mapping[str, Any]
    tenant_id: uuid.UUID
    user_id: uuid.UUID | None
    correlation_id: uuid.UUID | None
    occurred_at: datetime


def lock_append_order(session: Session) -> None:
    """Take the append lock (and queue the workers' NOTIFY), once per transaction.

    A lock taken inside a savepoint is released if that savepoint rolls back (a failed
    ``call_feature``, workflow segment or retry attempt), and the transaction may go on
    appending.  So the lock counts as held only while the (sub)transaction that took it
    is still open around the current one; otherwise it is taken again (a no-op wait when
    a released savepoint passed it on to its parent).

    SQLite needs no statement (``BEGIN IMMEDIATE`` took its write lock), but the taking
    is recorded all the same, for ``loaded_under_lock``."""
    info = session.info
    if not session.in_transaction():
        session.begin()  # the one the lock is recorded for and the writes run in
    current = session.get_nested_transaction() or session.get_transaction()
    holder = info.get(_LOCK_HOLDER)
    enclosing = current
    while enclosing is not None:
        if enclosing is holder:
            return
        enclosing = enclosing.parent
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_TAKE_LOCK, {"key": APPEND_LOCK, "channel": CHANNEL})
    info[_LOCK_HOLDER] = current
    info[_LOADED_BEFORE] = frozenset(session.identity_map.keys())


def loaded_under_lock(session: Session, key: object) -> bool:
    """Whether the entity with identity ``key`` was loaded while this transaction held
    the append lock — its row is then still what the database has.  The caller has just
    called ``lock_append_order``.  Entities loaded before, or while a lock taken in a
    since rolled-back savepoint was lost, are in the set recorded at the (re)taking."""
    before = session.info.get(_LOADED_BEFORE)
    return before is not None and key not in before


def append(
    session: Session,
    *,
    stream_id: uuid.UUID,
    aggregate_type: str,
    stream_version: int,
    type: str,
    payload: Mapping[str, Any],
    tenant_id: uuid.UUID,
    user_id: uuid.UUID | None,
    correlation_id: uuid.UUID | None,
    occurred_at: datetime,
    headers: Mapping[str, Any] | None = None,
    schema_version: int = 1,
) -> uuid.UUID:
    """Insert one event; a (stream, version) clash raises ``IntegrityError`` to the caller.

    The lock taken here also queued the NOTIFY, in a (sub)transaction still open
    around this insert, so a commit of the event wakes the workers."""
    lock_append_order(session)
    event_id = uuid.uuid4()
    session.execute(
        _INSERT_EVENT,
        {
            "event_id": event_id,
            "stream_id": stream_id,
            "aggregate_type": aggregate_type,
            "stream_version": stream_version,
            "type": type,
            "payload": dict(payload),
            "schema_version": schema_version,
            "headers": dict(headers or {}),
            "tenant_id": tenant_id,
            "user_id": user_id,
            "correlation_id": correlation_id,
            "occurred_at": occurred_at,
        },
    )
    return event_id


def last_position(session: Session) -> int:
    """The position of the last event this transaction sees: every event committed so far
    (and its own appends).  Positions commit in order, so any event that commits later
    has a higher one — a cut no concurrent commit can slip under."""
    position: int = session.execute(_LAST_POSITION).scalar_one()
    return position


def read_after(session: Session, position: int, limit: int = 1000) -> Sequence[EventRow]:
    """Events after ``position`` in position order (the consumers' cursor read)."""
    rows = session.execute(select(events).where(events.c.position > position).order_by(events.c.position).limit(limit))
    return [EventRow(**row._mapping) for row in rows]


def read_streams(
    session: Session, aggregate_type: str, *, stream_id: uuid.UUID | None = None, tenant_id: uuid.UUID | None = None
) -> Iterator[EventRow]:
    """The events of one aggregate type's streams (of one stream, of one tenant), each
    stream's in version order: what ``read_stream`` and a projection rebuild replay."""
    stmt = select(events).where(events.c.aggregate_type == aggregate_type)
    if stream_id is not None:
        stmt = stmt.where(events.c.stream_id == stream_id)
    if tenant_id is not None:
        stmt = stmt.where(events.c.tenant_id == tenant_id)
    for row in session.execute(stmt.order_by(events.c.stream_id, events.c.stream_version)):
        yield EventRow(**row._mapping)
