"""Aggregate writes: ``create``, ``update``, ``append_event`` — each an event appended
to the aggregate's stream and the entity row (its inline projection) written with it.

Only ``create`` runs in a savepoint of its own: after a clash on the event store it
reads the stream's current version for the ``Failure``, and PostgreSQL refuses any
statement in a transaction that has failed.  The other writes read nothing after a
failure, so they go without one (two round trips fewer): a write that fails ends the
pipeline, and whatever goes on after it rolls back first — a ``call_feature``, retry
attempt or workflow segment to its own savepoint, a dispatch the whole transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
from sqlalchemy import Select, bindparam, inspect, select
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm.attributes import instance_state

from .._access import NO_TENANT
from .._awaitables import PLAIN, checked
from .._ctx import correlation_of
from .._errors import ProjectorFailed, StepRefused
from .._eventstore import append
from .._integrity import is_unique, unique_failure
from .._jsonable import jsonable
from .._limits import nested_without_end, path_step, refuse, stored_json, unfit_json, unfit_values
from .._results import Failure, fail
from .._rules import FRAMEWORK_COLUMNS
from .._saved import Saved
from .._structuring import any_field_problems, read_back_problems
from .._tables import events
from ._base import Fn, NamedStep, Result, Step, called, resolve
from ._rows import changed_columns, in_place_values, insert_row, update_row, writer

if TYPE_CHECKING:
    from .._interpreter import Run
    from .._registry import Registry

__all__ = ["AppendEvent", "Create", "Update", "project", "taken_id"]


@attrs.frozen(slots=True)
class Create(NamedStep):
    kind = "aggregate.create"
    entity: type[Any]
    data: Fn
    #: Builds the named domain event stored instead of ``<aggregate>.created``.
    event: Fn | None = None

    def execute(self, run: Run) -> Result:
        return _create(self, run)


@attrs.frozen(slots=True)
class Update(NamedStep):
    kind = "aggregate.update"
    entity: type[Any]
    id: object
    changes: Fn
    version: object
    skip_optimistic_lock: bool

    def execute(self, run: Run) -> Result:
        return _update(self, run)


@attrs.frozen(slots=True)
class AppendEvent(Step):
    kind = "aggregate.append_event"
    entity: type[Any]
    id: object
    event: Fn
    headers: object = None
    version: object = None

    def execute(self, run: Run) -> Result:
        return _append_event(self, run)


def _columns(entity: object) -> dict[str, Any]:
    return {attr.key: getattr(entity, attr.key) for attr in inspect(type(entity)).column_attrs}


def _stored(entity_type: type[Any], values: Mapping[str, Any]) -> Any:
    """Column values as their event stores them.  Text in an ``Enum`` column is stored by
    SQLAlchemy as the member it *names*, and the event keeps that member (by value): kept
    as the text, a replay read it by value first, another member where one's value is
    another's name (``A = "B"``), and the row and its replay differed."""
    enums = writer(entity_type).enums
    if enums:  # most entities have no Enum column: nothing to look at per value
        values = {
            k: enums[k].__members__.get(v, v) if k in enums and isinstance(v, str) else v for k, v in values.items()
        }
    return jsonable(values)


def _refuse_unfit(run: Run, entity_type: type[Any], values: Mapping[str, object]) -> None:
    """Raise :class:`~kumiko_typed._limits.Unfit` if a value will not fit its column."""
    columns = writer(entity_type).columns
    refuse(unfit_values({columns[k]: v for k, v in values.items()}, run.payload))


def _on_event_store(exc: IntegrityError) -> bool:
    """Whether the violated constraint is one of ``kumiko_events`` (a lost race on a
    stream version), judged by the table, not by the message: PostgreSQL's message
    quotes the clashing values, so a duplicate sku ``"kumiko_events"`` would match."""
    table = getattr(getattr(exc.orig, "diag", None), "table_name", None)
    if isinstance(table, str):  # psycopg
        return table == events.name
    # SQLite: "UNIQUE constraint failed: kumiko_events.stream_id, kumiko_events.stream_version"
    first_line = next(iter(str(exc.orig).splitlines()), "")
    return f" {events.name}." in first_line


def _unique_violation(
    exc: IntegrityError, run: Run, step: Step, entity_type: type[Any], row: Mapping[str, object]
) -> Failure:
    keys = {column.name: key for key, column in writer(entity_type).columns.items()}
    table = entity_type.__table__
    return unique_failure(exc, f"step {step.describe()}", entity_type.__name__, table, keys, row, run.payload)


def _version_conflict(entity_type: type[Any], entity_id: object, expected: object, current: object) -> Failure:
    return fail(
        "version_conflict",
        f"{entity_type.__name__} {entity_id} is at version {current}, not {expected}",
        {"entity_id": str(entity_id), "expected_version": expected, "current_version": current},
    )


def _create_conflict(
    exc: IntegrityError, run: Run, step: Create, entity: Any, columns: Mapping[str, object]
) -> Failure:
    if not _on_event_store(exc):
        if not is_unique(exc):
            raise exc
        return _unique_violation(exc, run, step, type(entity), columns)
    current = run.db.execute(_version_of(type(entity)), {"kumiko_id": entity.id}).scalar()
    if current is None:  # another tenant's aggregate (the read is the tenant's): say no more
        return fail(
            "version_conflict",
            f"{type(entity).__name__} {entity.id}: the id is taken; create it with another id",
            {"entity_id": str(entity.id), "expected_version": 0, "current_version": None},
        )
    return _version_conflict(type(entity), entity.id, 0, current)


def taken_id(failure: Failure) -> str | None:
    """The id a ``create`` found taken, if ``failure`` is that conflict (its expected
    version 0: no aggregate yet).  Event streams are never removed, so the id stays
    taken: a workflow worker fails a run whose segment, tried again after that, creates
    it again (``_workflow_engine``)."""
    details = failure.details
    if failure.code != "version_conflict" or not isinstance(details, Mapping) or details.get("expected_version") != 0:
        return None
    entity_id = details.get("entity_id")
    return entity_id if isinstance(entity_id, str) else None


def _create(step: Create, run: Run) -> Failure | None:
    entity = called(step.data, run, "data=")
    if not isinstance(entity, step.entity):
        raise StepRefused(f"data= must build a {step.entity.__name__}, not {type(entity).__name__}")
    registry, ctx, session = run.registry, run, run.db
    aggregate = registry.aggregate_type(step.entity)
    entity.tenant_id = ctx.user.tenant_id
    entity.version = 1
    entity.created_at = entity.updated_at = ctx.now
    if entity.id is None:
        entity.id = uuid.uuid4()
    event_type, payload, schema = f"{aggregate}.created", None, 1
    if step.event is not None:
        event = called(step.event, ctx, "event=")
        event_type, schema = registry.event_name(type(event)), registry.schema_version(type(event))
        payload = _event_payload(run, event)
        # The event's projectors finish the row, as a replay builds it from the event.
        project(registry, step.entity, entity, event)
    columns = _columns(entity)
    _refuse_unfit(run, step.entity, columns)
    try:
        with session.begin_nested():
            append(
                session,
                stream_id=entity.id,
                aggregate_type=aggregate,
                stream_version=1,
                type=event_type,
                payload=_stored(step.entity, columns) if payload is None else payload,
                tenant_id=ctx.user.tenant_id,
                user_id=ctx.user.id,
                correlation_id=correlation_of(ctx),
                occurred_at=ctx.now,
                schema_version=schema,
            )
            insert_row(session, entity)
    except IntegrityError as exc:
        return _create_conflict(exc, run, step, entity, columns)
    changes = {k: v for k, v in columns.items() if k not in FRAMEWORK_COLUMNS}
    run.values[step.name] = Saved(entity.id, entity, 1, True, changes, {}, event_type)
    return None


#: Per entity class: its locking read, built once (a cached statement skips building it
#: and its cache key on every write).
_LOCKING_READS: dict[type[Any], Select[Any]] = {}


def _load_for_write(run: Run, entity_type: type[Any], entity_id: object, *, fresh: bool = False) -> Any:
    """The aggregate to write, at the version the write is based on.

    An entity this transaction loaded already (the pipeline's own ``get_one``) is used
    as it is: what the pipeline decided on is that version, and the write appends the
    next one — if another writer got there first, the unique ``(stream_id,
    stream_version)`` refuses the event and the write is a ``version_conflict``.
    Anything else (or everything, ``fresh``) is read with a row lock, current until
    commit.

    The read names the tenant itself, so the session's tenant filter is skipped for it
    (it would only add the same condition again)."""
    if entity_id.__class__ is not uuid.UUID:
        # Text is fine if it is a UUID (as PostgreSQL casts it); a number or bytes failed to
        # bind, an internal_error on both databases naming no field.
        _refuse_unfit(run, entity_type, {"id": entity_id})
    session = run.db
    tenant = run.user.tenant_id
    loaded = None if fresh else session.identity_map.get((writer(entity_type).identity, (entity_id,), None))
    if loaded is not None and isinstance(loaded, entity_type):
        state = instance_state(loaded)
        # ``_deleted``: ``state.deleted`` of an object in this session's identity map
        # (which has a key and is attached), without looking the session up again.
        if not (state.expired_attributes or state.modified or state._deleted):
            return loaded if loaded.tenant_id == tenant else None
    stmt = _LOCKING_READS.get(entity_type)
    if stmt is None:
        stmt = (
            select(entity_type)
            .where(entity_type.id == bindparam("kumiko_id"), entity_type.tenant_id == bindparam("kumiko_tenant"))
            .with_for_update()
            .execution_options(populate_existing=True, kumiko_all_tenants=True)
        )
        _LOCKING_READS[entity_type] = stmt
    return session.execute(stmt, {"kumiko_id": entity_id, "kumiko_tenant": tenant}).scalars().first()


def _write_row(run: Run, step: Step, entity: Any, values: dict[str, object]) -> Failure | None:
    """Write ``values`` and the next version to the aggregate's row, if it is still at
    the version it was read at (else ``version_conflict``).  A unique clash is the
    client's conflict; any other integrity error raises, for the interpreter to name
    (``_integrity``: the input's foreign key, CHECK or NULL, or a projector's bug)."""
    entity_type = type(entity)
    read_at = entity.version
    values["version"], values["updated_at"] = read_at + 1, run.now
    try:
        written = update_row(run.db, entity, values)
    except IntegrityError as exc:
        if not is_unique(exc):
            raise
        return _unique_violation(exc, run, step, entity_type, {**_columns(entity), **values})
    if not written:
        current = run.db.execute(_version_of(entity_type), {"kumiko_id": entity.id}).scalar()
        return _version_conflict(entity_type, entity.id, read_at, current)
    return None


#: Per entity class: the read of a row's current version after a lost race.
_VERSION_READS: dict[type[Any], Select[Any]] = {}


def _version_of(entity_type: type[Any]) -> Select[Any]:
    stmt = _VERSION_READS.get(entity_type)
    if stmt is None:
        # No autoflush: the object holds changes (a projector's) that must not be written.
        stmt = select(entity_type.version).where(entity_type.id == bindparam("kumiko_id"))
        stmt = stmt.execution_options(autoflush=False)
        _VERSION_READS[entity_type] = stmt
    return stmt


def _unwritable_columns(step: Update, columns: list[object]) -> Failure:
    """``changes=`` named something that is not a writable column: the pipeline's
    mistake, reported per column like a payload's (the plugin catches it earlier)."""
    entity = step.entity.__name__
    reason = f"not a writable column of {entity} (the framework owns {', '.join(sorted(FRAMEWORK_COLUMNS))})"
    return fail(
        "validation_error",
        f"update {step.name!r}: changes= names {', '.join(repr(c) for c in columns)}, not writable columns of {entity}",
        [{"path": f"changes.{column}", "message": reason, "step": step.name} for column in columns],
    )


def _stated_conflict(run: Run, entity_type: type[Any], entity_id: object, expected: object, current: object) -> Failure:
    """The aggregate is not at the version the step states.  Unlike a lost race (a version
    read, then written by another), trying a workflow segment again reads the same stated
    version: the worker fails the run rather than try it again for good."""
    run.settled = conflict = _version_conflict(entity_type, entity_id, expected, current)
    return conflict


def _not_a_version(expected: object, what: str, step_name: str | None) -> Failure | None:
    """Refuse an expected version that is not an int: ``"1"`` was a version_conflict "at
    version 1, not 1"; ``True`` and ``1.0`` passed as 1."""
    if not isinstance(expected, bool) and isinstance(expected, int):
        return None
    given = type(expected).__name__
    fix = "pass the integer version the caller read"
    return _refused_argument(
        what, step_name, "version", f"a {given}", fix, "version", f"must be an integer, not {given}"
    )


def _refused_argument(
    what: str, step_name: str | None, argument: str, gave: str, fix: str, path: str, problem: str
) -> Failure:
    """A step argument its resolver gave wrong (the input passed on, or the handler): a
    ``validation_error`` naming the step, the argument and the fix, before anything is
    written — never the value given, which may be a secret (a header's token)."""
    return fail(
        "validation_error",
        f"{what}: {argument}= gave {gave}; {fix}",
        [{"path": path, "message": problem, "step": step_name}],
    )


def _not_found(run: Run, entity_type: type[Any], entity_id: object) -> Failure:
    message = f"{entity_type.__name__} {entity_id} not found"
    if run.user.tenant_id == NO_TENANT and _held_by_a_tenant(run, entity_type, entity_id):
        # A run of no tenant (a cron run) that read the row with kumiko_all_tenants was told
        # only "not found" of a row it had just read; it may know that the row exists.
        message += (
            " in the run's tenant: a run of no tenant (a cron run) may not change a tenant's aggregate;"
            " change it from a run of that tenant (docs/workflows.md, Triggers)"
        )
    return fail("not_found", message, {"entity_id": str(entity_id)})


def _held_by_a_tenant(run: Run, entity_type: type[Any], entity_id: object) -> bool:
    stmt = select(entity_type.id).where(entity_type.id == entity_id).execution_options(kumiko_all_tenants=True)
    return run.db.execute(stmt.limit(1)).first() is not None


def _update(step: Update, run: Run) -> Failure | None:
    registry, ctx = run.registry, run
    entity_id = resolve(step.id, run, "id=")
    expected = resolve(step.version, run, "version=")
    if expected is None and not step.skip_optimistic_lock:
        # Boot refuses a missing version=; here the resolver gave None for this input.
        return fail(
            "validation_error",
            f"update {step.name!r}: version= gave no version; pass the version the caller read",
            [{"path": "version", "message": "required (or skip_optimistic_lock=True)", "step": step.name}],
        )
    if not step.skip_optimistic_lock:
        refused = _not_a_version(expected, f"update {step.name!r}", step.name)
        if refused is not None:
            return refused
    changes = dict(called(step.changes, ctx, "changes="))
    if not changes.keys() <= writer(step.entity).writable:
        mapped = writer(step.entity).columns
        unwritable = sorted((set(changes) - set(mapped)) | (set(changes) & FRAMEWORK_COLUMNS), key=str)
        return _unwritable_columns(step, unwritable)
    # Without the version check, the write is based on the current row, whatever was read.
    entity = _load_for_write(run, step.entity, entity_id, fresh=step.skip_optimistic_lock)
    if entity is None:
        return _not_found(run, step.entity, entity_id)
    if not step.skip_optimistic_lock and entity.version != expected:
        return _stated_conflict(run, step.entity, entity_id, expected, entity.version)
    previous = {k: getattr(entity, k) for k in changes}
    actual = {k: v for k, v in changes.items() if previous[k] != v}
    if not actual:
        # Nothing changes: no event and no new version, as SQLAlchemy writes no UPDATE (and
        # bumps no version counter) for an unchanged object; the client's version stays current.
        run.values[step.name] = Saved(entity.id, entity, entity.version, False)
        return None
    _refuse_unfit(run, step.entity, actual)
    new_version = entity.version + 1
    aggregate = registry.aggregate_type(step.entity)
    event_type = f"{aggregate}.updated"
    appended = _append(run, entity, new_version, aggregate, event_type, {"changes": _stored(step.entity, actual)})
    if appended is not None:
        return appended
    refused = _write_row(run, step, entity, dict(actual))
    if refused is not None:
        return refused
    was = {k: previous[k] for k in actual}
    run.values[step.name] = Saved(entity.id, entity, new_version, False, actual, was, event_type)
    return None


def project(registry: Registry, entity_type: type[Any], entity: Any, event: object) -> None:
    """Run ``event``'s projectors on its aggregate's row (a write's, or a replay's).  A
    projector that sets a column the framework owns is refused: a ``tenant_id`` it set
    put the new row in another tenant (or made the update find no row, a false
    ``version_conflict``), an ``id`` parted the row from its stream."""
    projectors = registry.projectors_for(entity_type, type(event))
    if not projectors:
        return
    owned = {key: getattr(entity, key) for key in FRAMEWORK_COLUMNS}
    for projector in projectors:
        try:
            done: object = projector(entity, event)  # typed None; a lambda may give more
        except DBAPIError:
            raise  # the database's (a lazy load): busy or gone stays ``unavailable``
        except Exception as exc:
            # The step's Failure named only the step ("append_event raised ValueError"):
            # which of the event's projectors, and that it was one, the log alone told.
            raise ProjectorFailed(projector, entity_type, type(event), exc) from exc
        if type(done) not in PLAIN:  # a plain function calling an async one: boot cannot tell
            name = ProjectorFailed.name_of(projector)
            checked(done, f"the projector {name} of {entity_type.__name__} for {type(event).__name__}")
    moved = sorted(key for key, value in owned.items() if getattr(entity, key) != value)
    if moved:
        raise StepRefused(
            f"a projector of {type(event).__name__} set {entity_type.__name__}.{', '.join(moved)}: "
            f"projectors may not set the framework's columns ({', '.join(sorted(FRAMEWORK_COLUMNS))})"
        )


def _event_payload(run: Run, event: object) -> Any:
    """The event as stored: an event that holds itself makes the converter recurse as
    ``jsonable`` would, and is refused the same way."""
    column = f"{events.name}.payload"
    unstructure = run.registry.converter.unstructure
    try:
        unstructured = unstructure(event)
    except RecursionError:
        raise nested_without_end(column, event, run.payload, unstructure) from None
    except TypeError:
        # A tuple key under Any, which cattrs makes an (unhashable) list: refused as the
        # read-back check below refuses any key JSON would not give back.
        refuse(any_field_problems(event, column, run.payload))
        raise
    stored = stored_json(unstructured, column, run.payload)
    refuse(read_back_problems(run.registry.converter, stored, event, column, run.payload))
    return stored


#: How to give ``append_event`` headers it can store.
_HEADERS_FIX = "pass a mapping of text header names to text values (convert numbers, ids and dates with str())"


def _event_headers(headers: object, what: str) -> Mapping[str, str] | Failure | None:
    """``append_event(headers=...)``: stored with the event as given, so only text names
    and values (a JSON column consumers read back); anything else is refused like a bad
    ``version=``, naming the header but not its value."""
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        given = type(headers).__name__
        problem = f"must be a mapping of str to str, not {given}"
        return _refused_argument(what, None, "headers", f"a {given}", _HEADERS_FIX, "headers", problem)
    for name, value in headers.items():
        if not isinstance(name, str):
            given = type(name).__name__
            gave, problem = f"a header name of type {given}", f"header names must be str, not {given}"
            return _refused_argument(what, None, "headers", gave, _HEADERS_FIX, "headers", problem)
        if not isinstance(value, str):
            # The name as a path shows it: a hostile one is cut, its control characters escaped.
            given, shown = type(value).__name__, path_step(name, bracketed=True)[1:-1]
            gave, problem = f"a value of type {given} for the header {shown}", f"must be a str, not {given}"
            return _refused_argument(what, None, "headers", gave, _HEADERS_FIX, f"headers{path_step(name)}", problem)
    return headers


def _append(
    run: Run,
    entity: Any,
    version: int,
    aggregate: str,
    event_type: str,
    payload: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
    schema_version: int = 1,
) -> Failure | None:
    """The event of an aggregate write.  A clash on (stream, version) means another
    writer appended that version since this one's read: a ``version_conflict``.  So is
    a deadlock on it: this writer waited for another's uncommitted append of the version
    while that one waited for one of ours (writes of several aggregates crossing), and
    PostgreSQL broke the tie."""
    ctx = run
    try:
        append(
            run.db,
            stream_id=entity.id,
            aggregate_type=aggregate,
            stream_version=version,
            type=event_type,
            payload=payload,
            tenant_id=ctx.user.tenant_id,
            user_id=ctx.user.id,
            correlation_id=correlation_of(ctx),
            occurred_at=ctx.now,
            headers=headers,
            schema_version=schema_version,
        )
    except IntegrityError as exc:
        if not _on_event_store(exc):
            raise
        # A committed writer holds ``version``: the stream is (at least) there.  Reading
        # how far would need a savepoint per append; the transaction is aborted here.
        taken, current = "is taken already", version
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) != "40P01":
            raise
        # The other writer has not committed: the stream is still where it was read.
        taken, current = "is being appended by another writer", entity.version
    else:
        return None
    return fail(
        "version_conflict",
        f"{type(entity).__name__} {entity.id}: version {version} of its event stream {taken}",
        {"entity_id": str(entity.id), "expected_version": entity.version, "current_version": current},
    )


def _append_event(step: AppendEvent, run: Run) -> Failure | None:
    registry, ctx = run.registry, run
    event = called(step.event, ctx, "event=")
    name = registry.event_name(type(event))
    entity_id = resolve(step.id, run, "id=")
    # Optional here, unlike update's: an event need not be decided on a version read.
    expected = resolve(step.version, run, "version=")
    what = f"append_event {step.entity.__name__}"
    if expected is not None:
        refused = _not_a_version(expected, what, None)
        if refused is not None:
            return refused
    headers = _event_headers(resolve(step.headers, run, "headers="), what)
    if isinstance(headers, Failure):
        return headers
    entity = _load_for_write(run, step.entity, entity_id)
    if entity is None:
        return _not_found(run, step.entity, entity_id)
    if expected is not None and entity.version != expected:
        return _stated_conflict(run, step.entity, entity_id, expected, entity.version)
    new_version = entity.version + 1
    aggregate = registry.aggregate_type(step.entity)
    payload = _event_payload(run, event)
    if headers is not None:
        refuse(unfit_json(dict(headers), f"{events.name}.headers", ctx.payload))
    schema = registry.schema_version(type(event))
    appended = _append(run, entity, new_version, aggregate, name, payload, headers, schema)
    if appended is not None:
        return appended
    before = in_place_values(entity)
    project(registry, step.entity, entity, event)
    _refuse_unfit(run, step.entity, _columns(entity))
    return _write_row(run, step, entity, changed_columns(entity, before))
