"""Appending to and reading the event store.

Positions must commit in order: a consumer that tails ``kumiko_events`` by position
and has seen position 12 must never later find an 11 that committed after it.  On
PostgreSQL, sequence values are handed out at insert time but become visible at
commit, so appends are serialized with a transaction-scoped advisory lock taken
before the insert and held to commit — positions are then assigned in commit order.
SQLite serializes writers anyway (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import attrs
from sqlalchemy import insert, select, text
from sqlalchemy.orm import Session

from ._notify import CHANNEL
from ._tables import events

#: The advisory lock key of the append order ("kumiko" in ASCII).
APPEND_LOCK: Final = 0x6B756D696B6F
#: Also queues the NOTIFY that wakes listening workers when the transaction commits
#: (dropped if it rolls back): one round trip for both.
_TAKE_LOCK: Final = text("SELECT pg_advisory_xact_lock(:key), pg_notify(:channel, '')")
#: ``session.info`` key: the (sub)transaction that took the append lock.
_LOCK_HOLDER: Final = "kumiko_append_locked"
#: Built once; each append passes its row as parameters.
_INSERT_EVENT: Final = insert(events)


@attrs.frozen
class StoredEvent:
    position: int
    event_id: uuid.UUID
    stream_id: uuid.UUID
    aggregate_type: str
    stream_version: int
    type: str
    payload: Mapping[str, Any]
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
    a released savepoint passed it on to its parent)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    current = session.get_nested_transaction() or session.get_transaction()
    holder = session.info.get(_LOCK_HOLDER)
    enclosing = current
    while enclosing is not None:
        if enclosing is holder:
            return
        enclosing = enclosing.parent
    session.execute(_TAKE_LOCK, {"key": APPEND_LOCK, "channel": CHANNEL})
    session.info[_LOCK_HOLDER] = current


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
            "headers": dict(headers or {}),
            "tenant_id": tenant_id,
            "user_id": user_id,
            "correlation_id": correlation_id,
            "occurred_at": occurred_at,
        },
    )
    return event_id


def read_stream(session: Session, stream_id: uuid.UUID) -> Sequence[StoredEvent]:
    rows = session.execute(select(events).where(events.c.stream_id == stream_id).order_by(events.c.stream_version))
    return [StoredEvent(**row._mapping) for row in rows]


def read_after(session: Session, position: int, limit: int = 1000) -> Sequence[StoredEvent]:
    """Events after ``position`` in position order (the consumers' cursor read)."""
    rows = session.execute(
        select(events).where(events.c.position > position).order_by(events.c.position).limit(limit)
    )
    return [StoredEvent(**row._mapping) for row in rows]
