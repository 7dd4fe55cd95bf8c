"""Appending to and reading the event store.

Writers do not wait for each other: positions come from a sequence and become visible
at commit, so a later position may commit before an earlier one.  A consumer that tails
``kumiko_events`` must still never skip an event, so it reads in ``(tx, position)``
order — ``tx`` being the writing transaction's id (``pg_current_xact_id()``, stored by
the column's server default) — and only events whose ``tx`` is below the oldest
transaction still running (``pg_snapshot_xmin``): every such transaction has finished,
so no event can later appear below the consumer's cursor (docs/operations.md, "Event
order without a global lock").  SQLite has one writer at a time (``BEGIN IMMEDIATE``)
and stores ``tx = 0``: the same reads give position order.

Two writers of one aggregate are caught by the unique ``(stream_id, stream_version)``:
the second one's event insert fails, and its write is a ``version_conflict``.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import attrs
from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    Result,
    Select,
    Text,
    and_,
    bindparam,
    cast,
    func,
    insert,
    literal,
    not_,
    null,
    or_,
    select,
    text,
    tuple_,
    type_coerce,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.functions import FunctionElement

from ._cache_keys import keyed_by_identity
from ._connection import connection_of
from ._dml import execute_dml
from ._notify import CHANNEL
from ._tables import events

__all__ = [
    "Cursor",
    "EventHead",
    "EventRow",
    "Frontier",
    "append",
    "frontier",
    "notify_on_commit",
    "read_after",
    "read_heads_after",
    "select_heads",
    "unseen_by",
]

#: A consumer's place in the event store: ``(tx, position)`` of the last event it read.
Cursor = tuple[int, int]

#: Wakes the listening workers when the transaction commits (dropped if it rolls back).
_NOTIFY: Final = text("SELECT pg_notify(:channel, '')")
#: ``session.info`` key: the (sub)transaction that queued the NOTIFY.
_NOTIFIED_IN: Final = "kumiko_notified_in"
#: Built once; each append passes its row as parameters.
_INSERT_EVENT: Final = keyed_by_identity(insert(events))
#: The same insert queueing the workers' NOTIFY in its own round trip (PostgreSQL): the
#: notification belongs to the insert's (sub)transaction and is dropped with it.
_INSERT_EVENT_NOTIFY: Final = insert(events).returning(func.pg_notify(bindparam("kumiko_channel"), ""))
#: The oldest transaction id still running in this statement's snapshot: every event
#: with a lower ``tx`` has committed (and is visible) or rolled back.
_HORIZON: Final = cast(cast(func.pg_snapshot_xmin(func.pg_current_snapshot()), Text), BigInteger)
#: What makes tailing commit-order safe on PostgreSQL (a test switches it off).
_BELOW_RUNNING: ColumnElement[bool] = events.c.tx < _HORIZON
_FRONTIER_PG: Final = select(
    _HORIZON,
    func.coalesce(cast(cast(func.pg_current_xact_id_if_assigned(), Text), BigInteger), -1),
    func.coalesce(func.max(events.c.position), 0),
    cast(func.pg_current_snapshot(), Text),
)
_FRONTIER: Final = select(literal(0), literal(0), func.coalesce(func.max(events.c.position), 0), null())


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
    tx: int = 0

    @property
    def cursor(self) -> Cursor:
        return (self.tx, self.position)


@attrs.frozen
class EventHead:
    """What the workflow feed reads of an event (:func:`select_heads`): its place, type,
    tenant, user, time and payload; not its stream's place, headers or correlation, which
    the feed never reads.  Decoding them, and building each row's mapping, was two thirds
    of the time a feed took to read an event (bench/event_feed.py)."""

    tx: int
    position: int
    event_id: uuid.UUID
    type: str
    tenant_id: uuid.UUID
    user_id: uuid.UUID | None
    occurred_at: datetime
    schema_version: int
    payload: Mapping[str, Any]

    @property
    def cursor(self) -> Cursor:
        return (self.tx, self.position)


#: The columns of :class:`EventHead`, in its order.
_HEAD: Final = tuple(events.c[f.name] for f in attrs.fields(EventHead))


def select_heads() -> Select[Any]:
    """A ``SELECT`` of events as :class:`EventHead` rows (``EventHead(*row)``)."""
    return select(*_HEAD)


@attrs.frozen
class Frontier:
    """What a transaction has seen of the event store, so that an event it has *not*
    seen can be told apart later: one whose writer had not committed when ``snapshot``
    was taken (PostgreSQL; every such ``tx`` is ``>= tx``, the oldest then running),
    except this transaction's own (``own_tx``) up to ``position``.  On SQLite
    (``tx = own_tx = 0``, no snapshot) that is simply ``position > position``."""

    tx: int
    position: int
    own_tx: int
    snapshot: str | None = None


def _postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _notified(session: Session) -> bool:
    """Whether a NOTIFY is queued in the current (sub)transaction or one around it.

    A NOTIFY queued inside a savepoint is dropped if that savepoint rolls back (a failed
    ``call_feature``, workflow segment or retry attempt), and the transaction may go on
    appending.  So it counts as queued only while the (sub)transaction that queued it is
    still open around the current one."""
    current = session.get_nested_transaction() or session.get_transaction()
    holder = session.info.get(_NOTIFIED_IN)
    enclosing = current
    while enclosing is not None:
        if enclosing is holder:
            return True
        enclosing = enclosing.parent
    return False


def _record_notified(session: Session) -> None:
    session.info[_NOTIFIED_IN] = session.get_nested_transaction() or session.get_transaction()


def notify_on_commit(session: Session) -> None:
    """Queue the NOTIFY that wakes the workers, once per (sub)transaction that writes
    something they act on (an outbox row; an event queues it with its insert)."""
    if not _postgres(session):
        return
    if not session.in_transaction():
        session.begin()  # the one the NOTIFY is recorded for and the writes run in
    if not _notified(session):
        session.execute(_NOTIFY, {"channel": CHANNEL})
        _record_notified(session)


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
    """Insert one event; a (stream, version) clash raises ``IntegrityError`` to the caller
    (on PostgreSQL after the other writer of that version has committed).  A commit of
    the event wakes the workers."""
    event_id = uuid.uuid4()
    row = {
        "event_id": event_id,
        "stream_id": stream_id,
        "aggregate_type": aggregate_type,
        "stream_version": stream_version,
        "type": type,
        # Plain dicts for the JSON columns (a dict given is bound as it is: the row is
        # inserted before this returns).
        "payload": payload if payload.__class__ is dict else dict(payload),
        "schema_version": schema_version,
        "headers": headers if headers.__class__ is dict else dict(headers or {}),
        "tenant_id": tenant_id,
        "user_id": user_id,
        "correlation_id": correlation_id,
        "occurred_at": occurred_at,
    }
    # On the session's connection: a Core insert gains nothing from the ORM's execute.
    connection = connection_of(session)
    if connection.dialect.name == "postgresql" and not (session.in_transaction() and _notified(session)):
        row["kumiko_channel"] = CHANNEL
        connection.execute(_INSERT_EVENT_NOTIFY, row).close()
        _record_notified(session)
    else:
        execute_dml(connection, _INSERT_EVENT, row)
    return event_id


def frontier(session: Session) -> Frontier:
    """This transaction's view of the event store (``Frontier``): taken before a run
    suspends in ``wait_for_event``, an event committing after it is one it has not seen."""
    tx, own_tx, position, snapshot = session.execute(_FRONTIER_PG if _postgres(session) else _FRONTIER).one()
    return Frontier(tx, position, own_tx, snapshot)


def unseen_by(wait: Any, event: Any) -> ColumnElement[bool]:
    """SQL: ``event`` is one the transaction that stored ``wait`` had not seen (columns
    or values of ``kumiko_events`` and ``kumiko_workflow_waits``).  ``after_tx`` alone
    would count every event committed since the oldest transaction then running began
    (a long report, another worker's batch) as unseen: one that came minutes before the
    wait would wake it, on PostgreSQL only.  The snapshot tells them apart."""
    snapshot = type_coerce(wait.after_snapshot, Text)
    others = and_(event.tx != wait.own_tx, or_(snapshot.is_(None), not_(InSnapshot(event.tx, snapshot))))
    return and_(event.tx >= wait.after_tx, or_(others, event.position > wait.after_position))


class InSnapshot(FunctionElement[bool]):
    """Whether the transaction ``tx`` (a ``kumiko_events.tx``) had committed when the
    snapshot (``pg_current_snapshot()`` as text) was taken.  PostgreSQL only: SQLite
    stores no snapshot, and ``unseen_by`` asks this only of one."""

    type = Boolean()
    name = "kumiko_in_snapshot"
    inherit_cache = True


@compiles(InSnapshot, "postgresql")
def _in_snapshot(element: InSnapshot, compiler: Any, **kw: Any) -> str:
    tx, snapshot = (compiler.process(arg, **kw) for arg in element.clauses)
    return f"pg_visible_in_snapshot(CAST(CAST({tx} AS TEXT) AS xid8), CAST({snapshot} AS pg_snapshot))"


@compiles(InSnapshot)
def _no_snapshot(element: InSnapshot, compiler: Any, **kw: Any) -> str:
    return "1"


def read_after(session: Session, cursor: Cursor, limit: int = 1000) -> Sequence[EventRow]:
    """Events after ``cursor`` in ``(tx, position)`` order (the consumers' read): on
    PostgreSQL only those of finished transactions, so none can later appear before
    the last one returned."""
    return [EventRow(**row._mapping) for row in _after(session, select(events), cursor, limit)]


def read_heads_after(session: Session, cursor: Cursor, limit: int = 1000) -> list[EventHead]:
    """:func:`read_after`'s events as :class:`EventHead`."""
    return [EventHead(*row) for row in _after(session, select_heads(), cursor, limit)]


def _after(session: Session, stmt: Select[Any], cursor: Cursor, limit: int) -> Result[*tuple[Any, ...]]:
    """The rows of ``stmt`` after ``cursor``, read as :func:`read_after` says."""
    stmt = stmt.where(tuple_(events.c.tx, events.c.position) > tuple_(bindparam("tx"), bindparam("position")))
    if _postgres(session):
        stmt = stmt.where(_BELOW_RUNNING)
    stmt = stmt.order_by(events.c.tx, events.c.position).limit(limit)
    return session.execute(stmt, {"tx": cursor[0], "position": cursor[1]})


def read_streams(
    session: Session,
    aggregate_type: str | None,
    *,
    stream_id: uuid.UUID | None = None,
    tenant_id: uuid.UUID | None = None,
    from_version: int = 1,
    limit: int | None = None,
    batch: int | None = None,
) -> Generator[EventRow]:
    """The events of one aggregate type's streams (of one stream, of one tenant), each
    stream's in version order from ``from_version``, at most ``limit`` of them: what
    ``read_stream`` and a projection rebuild replay.  A page of one stream is a range of
    the unique ``(stream_id, stream_version)`` index, however long the stream.  Without
    an ``aggregate_type``, a stream's events whatever type they were stored for (the
    caller checks it).  With a ``batch``, the rows are fetched ``batch`` at a time (a
    server-side cursor on PostgreSQL, which psycopg otherwise reads whole into memory
    before the first row); close the iterator to close the cursor."""
    stmt = select(events)
    if aggregate_type is not None:
        stmt = stmt.where(events.c.aggregate_type == aggregate_type)
    if stream_id is not None:
        stmt = stmt.where(events.c.stream_id == stream_id)
    if tenant_id is not None:
        stmt = stmt.where(events.c.tenant_id == tenant_id)
    if from_version > 1:
        stmt = stmt.where(events.c.stream_version >= from_version)
    stmt = stmt.order_by(events.c.stream_id, events.c.stream_version)
    if limit is not None:
        stmt = stmt.limit(limit)
    result = session.execute(stmt, execution_options={} if batch is None else {"yield_per": batch})
    try:
        for row in result:
            yield EventRow(**row._mapping)
    finally:
        result.close()
