"""An aggregate's row written through SQLAlchemy Core, not the ORM's unit of work.

Per entity class, the INSERT and the version-checked UPDATE are built once: a write
binds its values as parameters, so no statement (and no cache key) is built per call,
and SQLAlchemy compiles each set of columns once.  The entity object stays the one the
pipeline sees (``Saved.entity``, a ``get_one`` of the same row): after the statement
it is marked as holding what the database has, as a flush would leave it.

The ORM does not know these objects were written, so a rolled-back *savepoint* leaves
them holding what it undid (the ORM would expire them).  Nothing reads them then: a
``Failure`` ends the pipeline, and a failed retry attempt or workflow segment goes on in
a segment that expires every object first.  A rolled-back transaction expires them all.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from typing import Any

import attrs
from sqlalchemy import Column, Enum, Insert, PickleType, Table, Update, bindparam, insert, inspect, update
from sqlalchemy.orm import Session, make_transient_to_detached
from sqlalchemy.orm.attributes import instance_state, set_committed_value
from sqlalchemy.types import TypeDecorator, TypeEngine

from .._cache_keys import keyed_by_identity
from .._connection import connection_of
from .._dml import execute_dml
from .._rules import FRAMEWORK_COLUMNS

__all__ = ["changed_columns", "in_place_values", "insert_row", "update_row", "writer"]


@attrs.frozen
class Writer:
    """One entity class's row statements and its attribute → column mapping."""

    columns: Mapping[str, Column[Any]]
    insert: Insert
    update: Update
    #: The class an identity key names (``(identity, (id,), None)``).
    identity: type[Any]
    #: Attribute → its column's key: the UPDATE's parameter names.
    keys: Mapping[str, str]
    #: The attributes ``update(changes=...)`` may set (the framework owns the others).
    writable: frozenset[str]
    #: The attributes whose values change in place (JSON, ARRAY, pickled): see :func:`in_place_values`.
    in_place: tuple[str, ...]
    #: Attribute → the enum class of its ``Enum`` column, whose text SQLAlchemy stores as
    #: the member it *names* (the event must keep that member: ``_steps.aggregates``).
    enums: Mapping[str, type[enum.Enum]]


_WRITERS: dict[type[Any], Writer] = {}


def writer(entity_type: type[Any]) -> Writer:
    """The statements of ``entity_type``'s table, built on its first write."""
    found = _WRITERS.get(entity_type)
    if found is None:
        mapper = inspect(entity_type)
        table: Table = mapper.local_table
        stmt = update(table).where(
            table.c.id == bindparam("kumiko_b_id"),
            table.c.tenant_id == bindparam("kumiko_b_tenant"),
            table.c.version == bindparam("kumiko_b_version"),
        )
        columns = {a.key: a.columns[0] for a in mapper.column_attrs}
        keys = {k: c.key for k, c in columns.items()}
        writable = frozenset(columns) - FRAMEWORK_COLUMNS
        in_place = tuple(k for k, c in columns.items() if _changes_in_place(c.type))
        enums = {k: c.type.enum_class for k, c in columns.items() if isinstance(c.type, Enum) and c.type.enum_class}
        identity = mapper._identity_class
        # Run as they are on every write: found in the compiled cache by a token (_cache_keys).
        stmt, add = keyed_by_identity(stmt), keyed_by_identity(insert(table))
        found = _WRITERS[entity_type] = Writer(columns, add, stmt, identity, keys, writable, in_place, enums)
    return found


def _changes_in_place(type_: TypeEngine[Any]) -> bool:
    """Whether a value of ``type_`` is a container a projector may change without setting
    the attribute (``row.tags.append(x)``): SQLAlchemy marks those types unhashable."""
    if isinstance(type_, TypeDecorator):
        type_ = type_.impl_instance
    return not type_.hashable or isinstance(type_, PickleType)


def insert_row(session: Session, entity: Any) -> None:
    """INSERT ``entity``'s row and put the object in the session as that row.

    Like a flush, a ``None`` is left out (the column's default applies) unless its
    type stores ``None`` as a value (JSON's ``null``).  A dataclass default the object
    reads but does not hold (``mapped_column(default=0)``) is stored on it first."""
    w = writer(type(entity))
    values = instance_state(entity).dict
    params = {}
    for key, column in w.columns.items():
        value = values[key] if key in values else getattr(entity, key)
        if value is None and not (key in values and column.type.should_evaluate_none):
            continue
        if key not in values:
            set_committed_value(entity, key, value)
        params[column.key] = value
    execute_dml(connection_of(session), w.insert, params)
    make_transient_to_detached(entity)
    session.add(entity)


def update_row(session: Session, entity: Any, values: Mapping[str, object]) -> bool:
    """UPDATE ``entity``'s row to ``values`` (attribute names), if it is still at the
    version the object holds: ``False`` when another transaction has moved it on (or
    removed it) since it was read."""
    w = writer(type(entity))
    keys = w.keys
    params: dict[str, object] = {keys[k]: v for k, v in values.items()}
    params["kumiko_b_id"], params["kumiko_b_tenant"] = entity.id, entity.tenant_id
    params["kumiko_b_version"] = entity.version
    if execute_dml(connection_of(session), w.update, params) != 1:
        return False
    state = instance_state(entity)
    if not (state.modified or state.expired_attributes or state.callables):
        state.dict.update(values)  # loaded, unchanged attributes: what set_committed_value does
        return True
    for key, value in values.items():
        set_committed_value(entity, key, value)
    if state.modified:  # a projector's changes, now written: clean, as after a flush
        # (what the flush itself calls: SQLAlchemy has no public call for it; pinned to 2.1)
        state._commit_all(state.dict, session.identity_map)
    return True


def in_place_values(entity: Any) -> dict[str, object]:
    """Copies of ``entity``'s values that can change in place, taken before its
    projectors run: SQLAlchemy tracks only attributes that are set, so ``changed_columns``
    compares these to tell that ``row.tricks.append(...)`` changed ``tricks``.  Empty
    (and no copy made) for an entity without such columns."""
    keys = writer(type(entity)).in_place
    if not keys:
        return {}
    values = instance_state(entity).dict
    return {key: copy.deepcopy(values.get(key)) for key in keys}


def changed_columns(entity: Any, before: Mapping[str, object]) -> dict[str, object]:
    """The columns set on ``entity`` since it was loaded or written (a projector's
    effect), and those whose value differs from its copy in ``before``
    (:func:`in_place_values`), with their new values."""
    state = instance_state(entity)
    columns = writer(type(entity)).columns
    changed = {key: state.dict.get(key) for key in state.committed_state if key in columns}
    for key, old in before.items():
        if key not in changed and state.dict.get(key) != old:
            changed[key] = state.dict.get(key)
    return changed
