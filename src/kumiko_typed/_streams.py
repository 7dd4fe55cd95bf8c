"""The event store as an API: an aggregate's stream read back as typed events, and its
projection (the entity table) rebuilt — or checked — by replaying the streams.

Both run for an acting user, like a dispatch: a stream of another tenant is
``not_found`` to anyone but a ``sysadmin`` (never its data), and a rebuild touches the
user's tenant's rows unless a sysadmin names another tenant or all of them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from collections.abc import Iterable, Mapping
from contextlib import closing
from decimal import Decimal
from itertools import groupby
from typing import Any, Generic, Literal, TypeVar

import attrs
from sqlalchemy import JSON, DateTime, Time, delete, insert, inspect, select, update
from sqlalchemy.orm import Session, configure_mappers, sessionmaker
from sqlalchemy.types import TypeDecorator, TypeEngine

from ._access import no_tenant
from ._ctx import User
from ._errors import UnreadableEvent
from ._eventstore import EventRow, read_streams
from ._interpreter import exception_failure, once_more_if_lost, unavailable
from ._jsonable import bytes_from_text, duration_from_text, jsonable
from ._read_only import READ_ONLY_OPTION, reading
from ._registry import Registry
from ._results import Failure, Ok, fail, ok, wrong_id
from ._steps.aggregates import project
from ._tables import events
from ._utc import UtcDateTime, column_time, utc_time_of_day

__all__ = ["AggregateCreated", "AggregateUpdated", "ProjectionReport", "StoredEvent", "read_stream", "rebuild"]

T = TypeVar("T", covariant=True)

#: Events a rebuild's replay fetches at a time: its memory is one batch, not the table.
_REPLAY_BATCH = 1000

#: Who may read or rebuild any tenant's streams.
SYSADMIN = "sysadmin"
#: The highest stream version ``kumiko_events.stream_version`` (an ``Integer``) holds.
_MAX_VERSION = 2**31 - 1


@attrs.frozen
class AggregateCreated:
    """The event ``create`` stores unless given a named one: the new row's columns."""

    values: Mapping[str, Any]


@attrs.frozen
class AggregateUpdated:
    """The event ``update`` stores: the columns it changed, with their new values."""

    changes: Mapping[str, Any]


@attrs.frozen
class StoredEvent(Generic[T]):
    """One event of a stream: ``event`` is the registered event object (upcast to the
    class's current schema version), an :class:`AggregateCreated` or an
    :class:`AggregateUpdated`; ``version`` is its place in the stream (from 1);
    ``schema_version`` the version its payload was stored in."""

    event: T
    type: str
    version: int
    stream_id: uuid.UUID
    aggregate_type: str
    position: int
    event_id: uuid.UUID
    schema_version: int
    occurred_at: dt.datetime
    tenant_id: uuid.UUID
    user_id: uuid.UUID | None
    correlation_id: uuid.UUID | None
    headers: Mapping[str, str]


@attrs.frozen
class ProjectionReport:
    """What a rebuild found: the rows that differed from the replay (by id, the columns
    that differed), the streams that had no row, the rows that had no stream.  With
    ``verify=True`` nothing was written; otherwise the table now equals the replay."""

    entity: str
    streams: int
    verified: bool
    changed: Mapping[uuid.UUID, tuple[str, ...]]
    missing: tuple[uuid.UUID, ...]
    extra: tuple[uuid.UUID, ...]

    @property
    def matches(self) -> bool:
        """Whether the rows were already what the events say."""
        return not (self.changed or self.missing or self.extra)


def _refused(entity: object, user: object, registry: Registry) -> Failure | None:
    """Typed, but callers without mypy may pass anything."""
    if not isinstance(user, User):
        return fail("access_denied", "an authenticated user is required")
    refused = no_tenant(user)
    if refused is not None:
        return refused
    # Not a class: a list is unhashable (it raised TypeError), a table's repr is its whole definition.
    if not isinstance(entity, type):
        return fail("not_found", f"a {type(entity).__name__} is not an entity of this App: pass its class")
    if entity not in registry.aggregate_types:
        return fail("not_found", f"{entity.__name__} is not an entity of this App")
    return None


def read_stream(
    sessions: sessionmaker[Session],
    registry: Registry,
    entity: type[Any],
    stream_id: object,
    user: User,
    from_version: int = 1,
    limit: int | None = None,
) -> Ok[list[StoredEvent[object]]] | Failure:
    refused = _refused(entity, user, registry)
    if refused is not None:
        return refused
    if not isinstance(stream_id, uuid.UUID):
        return wrong_id("id", stream_id)
    wrong = _wrong_page("from_version", from_version)
    if wrong is None and limit is not None:
        wrong = _wrong_page("limit", limit)
    if wrong is not None:
        return wrong
    not_found = fail("not_found", f"{entity.__name__} {stream_id} not found", {"entity_id": str(stream_id)})
    tenant = None if user.has_role(SYSADMIN) else user.tenant_id
    # Once more on a connection found dead before the end, as a query is.
    return once_more_if_lost(
        unavailable, _read_stream, sessions, registry, entity, stream_id, tenant, from_version, limit, not_found
    )


def _read_stream(
    sessions: sessionmaker[Session],
    registry: Registry,
    entity: type[Any],
    stream_id: uuid.UUID,
    tenant: uuid.UUID | None,
    from_version: int,
    limit: int | None,
    not_found: Failure,
) -> Ok[list[StoredEvent[object]]] | Failure:
    try:
        with reading(sessions) as session:
            # By id alone: events stored for another aggregate type are named, not left out.
            page = list(
                read_streams(
                    session, None, stream_id=stream_id, tenant_id=tenant, from_version=from_version, limit=limit
                )
            )
            # A page past the stream's end is empty: the stream is there all the same.
            first = page[:1] or (
                from_version > 1 and list(read_streams(session, None, stream_id=stream_id, tenant_id=tenant, limit=1))
            )
            if not first or _of_another_entity(registry, entity, first[0]):
                return not_found
            stream = [_stored(registry, entity, row) for row in page]
    except Exception as exc:
        where = f"read_stream of {entity.__name__} {stream_id}"
        return exception_failure(exc, where, where, {"entity_id": str(stream_id)})
    return ok(stream)


def _of_another_entity(registry: Registry, entity: type[Any], row: EventRow) -> bool:
    """Whether ``row`` begins the stream of another entity class of this App (its id
    asked for as an ``entity``'s): one that does not exist, for ``entity``."""
    return (
        row.aggregate_type != registry.aggregate_types[entity]
        and row.aggregate_type in registry.aggregate_types.values()
    )


def _wrong_page(path: str, value: object) -> Failure | None:
    """``from_version`` or ``limit``: typed, but taken from a query string too, so a
    text, a float or a bool (``True`` is an int) is refused by its type, and a number
    outside a stream version's range (32 bits) by its value — below 1, a page that could
    hold nothing; above, SQLite could not bind it and PostgreSQL refused it (both an
    ``internal_error``), or one answered ``Ok([])`` where the other failed."""
    if isinstance(value, bool) or not isinstance(value, int):
        given = f"a {type(value).__name__}"
    elif not 1 <= value <= _MAX_VERSION:
        given = str(value)
    else:
        return None
    message = f"{path} must be an integer from 1 to {_MAX_VERSION}, not {given}"
    return fail("validation_error", message, [{"path": path, "message": message}])


def rebuild(
    sessions: sessionmaker[Session],
    registry: Registry,
    entity: type[Any],
    user: User,
    tenant: uuid.UUID | Literal["all"] | None,
    verify: bool,
) -> Ok[ProjectionReport] | Failure:
    refused = _refused(entity, user, registry)
    if refused is not None:
        return refused
    given: object = tenant  # typed, but callers without mypy may pass anything
    if not (given is None or given == "all" or isinstance(given, uuid.UUID)):
        # Named by its type, never echoed: text may be a URL's, or a tenant id not parsed yet.
        parse = " (parse a tenant id's text with uuid.UUID(...))" if isinstance(given, str) else ""
        wanted = "tenant= must be a tenant id (a UUID), 'all' or None (the user's tenant)"
        message = f"{wanted}, not {type(given).__name__}{parse}"
        return fail("validation_error", message, [{"path": "tenant", "message": message}])
    if tenant is not None and tenant != user.tenant_id and not user.has_role(SYSADMIN):
        return fail("access_denied", f"rebuilding another tenant's {entity.__name__} rows needs the sysadmin role")
    scope = None if tenant == "all" else (tenant or user.tenant_id)
    # Its one transaction once more if its connection was found dead before the COMMIT
    # (a server restarted since the pool's connection was opened): nothing of it committed.
    return once_more_if_lost(unavailable, _rebuilt, sessions, registry, entity, scope, verify)


def _rebuilt(
    sessions: sessionmaker[Session], registry: Registry, entity: type[Any], scope: uuid.UUID | None, verify: bool
) -> Ok[ProjectionReport] | Failure:
    try:
        with sessions() as session, session.begin():
            # Events and rows as of one moment, no writer held back: a write since then to
            # a row this rebuild changes fails it (retryable), never the other way round.
            _begin_snapshot(session, read_only=verify)
            return ok(_rebuild(session, registry, entity, scope, verify))
    except Exception as exc:
        where = f"rebuild_projection of {entity.__name__}"
        return exception_failure(exc, where, where, {"entity": entity.__name__})


def _begin_snapshot(session: Session, *, read_only: bool) -> None:
    """Begin the rebuild's transaction so that it reads the events and the rows as of one
    moment, holding no other writer back (it used to lock ``kumiko_events``: one tenant's
    user paused every tenant's appends).  PostgreSQL: ``REPEATABLE READ``; a row the
    rebuild then updates or deletes that another transaction changed since is a
    serialization failure (``unavailable``, retry), so an append's inline projection is
    never overwritten by a replay made without its event.  SQLite: a check reads in a
    deferred transaction (the write-ahead log keeps its snapshot, writers go on), a
    repair in ``BEGIN IMMEDIATE``, which waits for and holds back the other writers."""
    connection = session.connection(execution_options={READ_ONLY_OPTION: True} if read_only else {})
    if connection.dialect.name == "postgresql":
        mode = ", READ ONLY" if read_only else ""
        connection.exec_driver_sql(f"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ{mode}")


def _rebuild(
    session: Session, registry: Registry, entity: type[Any], tenant: uuid.UUID | None, verify: bool
) -> ProjectionReport:
    keys = {a.key: a.columns[0] for a in inspect(entity).column_attrs}
    _refuse_other_types(session, registry, entity, keys, tenant)
    replayed: dict[Any, dict[str, Any]] = {}
    # Closed here, not by the garbage collector: a replay that fails leaves PostgreSQL's
    # server-side cursor open in the transaction otherwise.
    events_of = read_streams(session, registry.aggregate_types[entity], tenant_id=tenant, batch=_REPLAY_BATCH)
    with closing(events_of) as rows:
        for stream_id, stream in groupby(rows, key=lambda r: r.stream_id):
            row = _replay(registry, entity, stream)
            replayed[stream_id] = {key: _as_stored(getattr(row, key), column.type) for key, column in keys.items()}
    table = inspect(entity).local_table
    stmt = select(table) if tenant is None else select(table).where(keys["tenant_id"] == tenant)
    live = {r._mapping[keys["id"]]: {k: r._mapping[c] for k, c in keys.items()} for r in session.execute(stmt)}
    changed = {
        i: tuple(k for k in keys if values[k] != live[i][k])
        for i, values in replayed.items()
        if i in live and values != live[i]
    }
    missing = tuple(i for i in replayed if i not in live)
    extra = tuple(i for i in live if i not in replayed)
    if not verify:
        for i, columns in [*changed.items(), *((i, tuple(keys)) for i in missing)]:
            _refuse_nulls(entity, keys, i, {k: replayed[i][k] for k in columns})
        for i, columns in changed.items():
            session.execute(update(table).where(keys["id"] == i).values({keys[k]: replayed[i][k] for k in columns}))
        for i in missing:
            session.execute(insert(table).values({keys[k]: v for k, v in replayed[i].items()}))
        if extra:
            session.execute(delete(table).where(keys["id"].in_(extra)))
    return ProjectionReport(entity.__name__, len(replayed), verify, changed, missing, extra)


def _refuse_other_types(
    session: Session, registry: Registry, entity: type[Any], keys: Mapping[str, Any], tenant: uuid.UUID | None
) -> None:
    """Refuse, before anything is written, rows whose stream was stored for another
    aggregate type: the replay, which reads this one's, would find no stream for them
    and delete them (every row of an entity whose class was renamed)."""
    stmt = (
        select(keys["id"], events.c.stream_version, events.c.aggregate_type)
        .join(events, events.c.stream_id == keys["id"])
        .where(events.c.aggregate_type != registry.aggregate_types[entity])
    )
    if tenant is not None:
        stmt = stmt.where(keys["tenant_id"] == tenant)
    found = session.execute(stmt.limit(1)).first()
    if found is not None:
        row_id, version, stored = found
        raise UnreadableEvent(f"{_place(entity, version, row_id)} {_stored_for(entity, registry, stored)}")


def _refuse_nulls(entity: type[Any], keys: Mapping[str, Any], row_id: object, values: Mapping[str, Any]) -> None:
    """Refuse, before anything is written, a replayed row that would leave a NOT NULL
    column empty: a column added since its events were stored (with no default), or one
    a named creation event's projectors do not set.  The write would fail on an
    ``IntegrityError`` naming nothing."""
    empty = sorted(k for k, v in values.items() if v is None and not keys[k].nullable)
    if empty:
        columns = ", ".join(f"{entity.__name__}.{k}" for k in empty)
        raise UnreadableEvent(
            f"the events of {entity.__name__} {row_id} give no value to {columns}, which cannot be null: "
            "give a column added since a default, and set it in a creation event's projectors"
        )


def _as_stored(value: Any, column_type: TypeEngine[Any]) -> Any:
    """A replayed value as its column gives it back: a projector may put a tuple or an
    int-keyed dict in a JSON column, which reads back as a list or a str-keyed dict, and
    is the same document; a ``DateTime`` column holds a time in UTC, naive unless the
    column keeps a zone, and a date as its midnight; a ``Time(timezone=True)`` column a
    time in UTC.  Compared as built, every such row
    looked changed (an aware time written to a naive column, a naive one to an aware)."""
    if value is None:
        return None
    if isinstance(column_type, JSON):
        return jsonable(value)
    if isinstance(column_type, DateTime) and isinstance(value, dt.date):
        try:
            return column_time(value, zoned=column_type.timezone)
        except OverflowError:  # past year 9999 in UTC, stored by a release that took it: as it is
            return value
    if isinstance(column_type, Time) and column_type.timezone and isinstance(value, dt.time):
        # A Time(timezone=True) reads back in UTC on both: a naive time, and one of another
        # offset an earlier release stored.
        return utc_time_of_day(value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value)
    return value


def _replay(registry: Registry, entity_type: type[Any], stream: Iterable[EventRow]) -> Any:
    """The row the events of one stream make: from its creation event on, each event
    applied as its step applied it (columns set, or the event's projectors run)."""
    configure_mappers()  # a fresh process may replay before its first ORM query
    entity: Any = None
    for row in stream:
        event = _event(registry, entity_type, row)
        if entity is None:
            entity = _blank(entity_type, row)
        if isinstance(event, AggregateCreated):
            for key, value in event.values.items():
                setattr(entity, key, value)
        elif isinstance(event, AggregateUpdated):
            for key, value in event.changes.items():
                setattr(entity, key, value)
        else:
            try:
                project(registry, entity_type, entity, event)
            except Exception as exc:
                # Its traceback names the projector, not which of every stream's events it
                # failed on: the log record (the Failure's error id) says it with this.
                exc.add_note(f"replaying {_place(entity_type, row.stream_version, row.stream_id)} ({row.type!r})")
                raise
        entity.version = row.stream_version
        entity.updated_at = row.occurred_at
    return entity


def _blank(entity_type: type[Any], row: EventRow) -> Any:
    """An entity with its fields' defaults and the framework's columns: what a named
    creation event's projectors start from.  (SQLAlchemy gives a plain ``default`` when
    an unset attribute is read; a ``default_factory`` it leaves to ``__init__``.)"""
    entity = inspect(entity_type).class_manager.new_instance()
    for field in dataclasses.fields(entity_type):
        if field.default_factory is not dataclasses.MISSING:
            setattr(entity, field.name, field.default_factory())
    entity.id, entity.tenant_id = row.stream_id, row.tenant_id
    entity.created_at = row.occurred_at
    return entity


def _stored(registry: Registry, entity_type: type[Any], row: EventRow) -> StoredEvent[object]:
    return StoredEvent(
        event=_event(registry, entity_type, row),
        type=row.type,
        version=row.stream_version,
        stream_id=row.stream_id,
        aggregate_type=row.aggregate_type,
        position=row.position,
        event_id=row.event_id,
        schema_version=row.schema_version,
        occurred_at=row.occurred_at,
        tenant_id=row.tenant_id,
        user_id=row.user_id,
        correlation_id=row.correlation_id,
        headers=row.headers,
    )


def _place(entity_type: type[Any], version: object, stream_id: object) -> str:
    """How a message names one stored event."""
    return f"the event at version {version} of {entity_type.__name__} {stream_id}"


def _event(registry: Registry, entity_type: type[Any], row: EventRow) -> object:
    where = _place(entity_type, row.stream_version, row.stream_id)
    if row.aggregate_type != registry.aggregate_types[entity_type]:
        raise UnreadableEvent(f"{where} {_stored_for(entity_type, registry, row.aggregate_type)}")
    if row.type == f"{row.aggregate_type}.created":
        return AggregateCreated(_columns(entity_type, row.payload, f"{where} ({row.type!r})"))
    if row.type == f"{row.aggregate_type}.updated":
        return AggregateUpdated(_columns(entity_type, row.payload["changes"], f"{where} ({row.type!r})"))
    cls = registry.event_classes.get(row.type)
    if cls is None:
        # The stored type is the class's kebab-cased name unless given: renaming the class
        # (a refactoring) made every event stored before unreadable, with no word of why.
        raise UnreadableEvent(
            f"{where} has the type {row.type!r}, which no feature registers: an event class renamed "
            f"keeps its stored type with feature.event(<the class>, name={row.type!r})"
        )
    return registry.load(row, cls, where)


def _stored_for(entity_type: type[Any], registry: Registry, stored: str) -> str:
    """Why events stored for the aggregate type ``stored`` are not ``entity_type``'s:
    its class was renamed (or given another ``name=``), which changed the type its new
    events are stored for.  Read by type, the old ones would be left out of its stream
    unsaid, and its rebuild would delete its rows."""
    current = registry.aggregate_types[entity_type]
    return (
        f"was stored for the aggregate type {stored!r}, not {current!r}: an entity class renamed keeps "
        f"its stored type with feature.entity({entity_type.__name__}, name={stored!r})"
    )


def _columns(entity_type: type[Any], stored: Mapping[str, Any], what: str) -> dict[str, Any]:
    """Stored column values (JSON) back as the columns' Python values; a key that is no
    longer a column is left out (a replay cannot set it).  A value its column's type no
    longer reads (the column's type changed since) is an :class:`UnreadableEvent` naming
    the column, not the value."""
    columns = {a.key: a.columns[0] for a in inspect(entity_type).column_attrs}
    values = {}
    for key, value in stored.items():
        if key in columns:
            try:
                values[key] = _from_json(columns[key].type, value)
            except (TypeError, ValueError, ArithmeticError) as exc:
                column = f"{entity_type.__name__}.{key}"
                column_type = columns[key].type
                if isinstance(column_type, TypeDecorator):  # UtcDateTime: a datetime
                    column_type = column_type.impl_instance
                kind = column_type.python_type.__name__  # _from_json converted, so it has one
                raise UnreadableEvent(f"{what}: its value of {column} does not read as {kind}") from exc
    return values


def _from_json(column_type: TypeEngine[Any], value: Any) -> Any:
    """The inverse of :func:`~kumiko_typed._jsonable.jsonable` for one column."""
    if value is None:
        return None
    if isinstance(column_type, UtcDateTime):
        column_type = column_type.impl_instance
    try:
        python_type = column_type.python_type
    except NotImplementedError:  # JSON and the user's own types: the value as stored
        return value
    if python_type is uuid.UUID:
        return python_type(value)
    if python_type is Decimal:
        # A float given to the column is stored as JSON writes it (1.1): its decimal is
        # that text, not the binary value's 1.100000000000000088817841970012523233890533447265625.
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if python_type in (dt.datetime, dt.date, dt.time):
        return python_type.fromisoformat(value)
    if python_type is float:
        return float(value)
    if python_type is dt.timedelta:
        return duration_from_text(value)
    if python_type is bytes:
        return bytes_from_text(value)
    if isinstance(python_type, type) and issubclass(python_type, enum.Enum):
        return _member(python_type, value)
    return value


def _member(enum_type: type[enum.Enum], value: Any) -> enum.Enum:
    """The member an event's column value names: a member was stored as its value, but a
    text given to the column is stored as it was, and SQLAlchemy's ``Enum`` reads text as
    a member's *name* (the row holds ``Color.BLUE`` for ``"BLUE"``).  Such an event made
    ``read_stream`` and every rebuild an ``internal_error``."""
    try:
        return enum_type(value)
    except ValueError:
        if isinstance(value, str) and value in enum_type.__members__:
            return enum_type[value]
        raise
