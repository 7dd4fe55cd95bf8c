"""The read steps' ``select(Entity)`` without the ORM's per-call execution machinery.

A resolver builds a new ``select(...)`` on every call, so ``session.execute`` pays for
the ORM's execution context, its loading context and row processors each time (about
four times what the SQL costs the driver).  Here a statement is known by its cache key
(SQLAlchemy's own: equal keys compile to the same SQL, values aside): the first
statement of a shape, with the tenant filter added, is kept as a *plan* and executed
again on the session's connection with the new statement's values bound by position
(as SQLAlchemy's compiled cache binds them), and each row is made into its entity:
the object this session has already for that row (identity, as the ORM keeps it), or a
new one put in the session as a loaded, persistent object.

Only what that reproduces exactly takes this path: one whole mapped class selected,
no loader options or execution options, a plain mapping (no inheritance,
relationships, deferred or non-column attributes, load events), a session with no
unflushed changes (the ORM would autoflush them first), no ``do_orm_execute`` hook of the
application's and a tenant to filter by.
Everything else goes through ``session.execute`` and the session's tenant filter.
"""

from __future__ import annotations

from itertools import repeat
from operator import is_
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import inspect
from sqlalchemy.orm import ColumnProperty, Mapper
from sqlalchemy.orm.attributes import instance_state

from .._access import TENANT_CRITERIA, TENANT_KEY, TENANT_PARAM, ShapeMemo, _tenant_filter, refuse_unscoped
from .._cache_keys import keyed_by_identity
from .._connection import connection_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy import Row, Select
    from sqlalchemy.engine import CursorResult
    from sqlalchemy.orm import Session
    from sqlalchemy.sql.elements import BindParameter

__all__ = ["plain_tenant", "planned", "run_plan", "select_entities"]


class _Plan:
    """One statement shape: the statement run for it (tenant filter added), its bound
    parameters in cache-key order, and how a row becomes an entity."""

    __slots__ = ("attributes", "binds", "identity_class", "mapper", "new_instance", "primary", "stmt")

    def __init__(self, stmt: Select[Any], binds: list[BindParameter[Any]], mapper: Mapper[Any]) -> None:
        self.stmt = stmt
        self.binds = binds
        self.mapper = mapper
        self.identity_class = mapper._identity_class
        #: Makes an object of the class without calling its ``__init__`` (as the ORM's loading does).
        self.new_instance = mapper.class_manager.new_instance
        #: Per result column, its attribute; learnt from the first result (``None`` until then).
        self.attributes: tuple[str, ...] | None = None
        #: The primary key's positions in a row.
        self.primary: tuple[int, ...] = ()

    def learn(self, columns: list[str]) -> bool:
        """Map the result's columns to attributes: every column attribute once, else
        this shape is not for this path."""
        by_column: dict[str, str] = {}
        for prop in self.mapper.column_attrs:
            for label in {prop.columns[0].key, prop.columns[0].name}:
                # A label two attributes answer to is ambiguous: no attribute ("").
                by_column[label] = prop.key if by_column.get(label, prop.key) == prop.key else ""
        attributes = tuple(by_column.get(c, "") for c in columns)
        wanted = {prop.key for prop in self.mapper.column_attrs}
        if "" in attributes or len(set(attributes)) != len(attributes) or set(attributes) != wanted:
            return False
        keys = [self.mapper.get_property_by_column(c).key for c in self.mapper.primary_key]
        self.primary = tuple(attributes.index(k) for k in keys)
        self.attributes = attributes
        return True


#: Cache key → plan, or ``None`` for a shape that takes ``session.execute``.
_PLANS: Final = ShapeMemo()
_MISSING: Final = object()


def _only_ours(session: Session) -> bool:
    """No ``do_orm_execute`` hook but the tenant filter: an application's own (a soft-delete
    criteria, a read replica) must see its reads, so they take ``session.execute``."""
    # ``fn is _tenant_filter`` for each, in C (no generator per read, no hashing of
    # an application's listeners).
    return all(map(is_, session.dispatch.do_orm_execute, repeat(_tenant_filter)))


def _plain(mapper: Mapper[Any]) -> bool:
    """A mapping whose loaded object is exactly its column values."""
    return (
        mapper.inherits is None
        and mapper.polymorphic_on is None
        and not mapper.relationships
        and not mapper.class_manager.dispatch.load  # load events, a @reconstructor
        and all(
            isinstance(prop, ColumnProperty) and not prop.deferred and len(prop.columns) == 1 for prop in mapper.attrs
        )
    )


def _plan(stmt: Select[Any], binds: list[BindParameter[Any]]) -> _Plan | None:
    refuse_unscoped(stmt)
    described = stmt.column_descriptions
    if len(described) != 1 or stmt._with_options:
        return None
    entity = described[0].get("entity")  # none for a Core table's column (a read model's)
    if not isinstance(entity, type) or described[0]["expr"] is not entity:
        return None  # a column, an aliased class, an expression
    mapper: object = inspect(entity, raiseerr=False)
    if not isinstance(mapper, Mapper) or not _plain(mapper):
        return None
    return _Plan(keyed_by_identity(stmt.options(TENANT_CRITERIA)), binds, mapper)


def plain_tenant(session: Session) -> Any:
    """The tenant a planned read filters by, or ``None`` when this session's reads must
    take ``session.execute`` (no tenant, unflushed changes, an application's own hook)."""
    tenant = session.info.get(TENANT_KEY)
    if tenant is None or not session._is_clean() or not _only_ours(session):
        return None
    return tenant


def select_entities(session: Session, stmt: Select[Any], first: bool) -> list[Any]:
    """The entities ``stmt`` selects, as ``session.execute(stmt).scalars()`` gives them
    (only the first one, or none, with ``first``)."""
    tenant = None if stmt._execution_options else plain_tenant(session)
    key = stmt._generate_cache_key() if tenant is not None else None
    if key is None:
        return _through_orm(session, stmt, first)
    plans = _PLANS.entries()
    plan = plans.get(key.key, _MISSING)
    if plan is _MISSING:
        plan = plans[key.key] = _plan(stmt, list(key.bindparams))
    if plan is None:
        return _through_orm(session, stmt, first)
    assert isinstance(plan, _Plan)
    params = {b.key: given.effective_value for b, given in zip(plan.binds, key.bindparams, strict=True)}
    params[TENANT_PARAM] = tenant
    found = run_plan(session, plan, params, first)
    if plan.attributes is None:
        plans[key.key] = None
    return _through_orm(session, stmt, first) if found is None else found


def planned(key: Any) -> _Plan | None:
    """The plan kept for a statement's cache key, if it has run as one."""
    plan = _PLANS.entries().get(key.key)
    return plan if isinstance(plan, _Plan) and plan.attributes is not None else None


def run_plan(session: Session, plan: _Plan, params: dict[str, Any], first: bool) -> list[Any] | None:
    """Run ``plan`` with ``params`` (its binds' keys and the tenant's): the entities, or
    ``None`` when the ORM must run the statement (the plan cannot read its columns, and
    is marked so by ``attributes`` staying ``None``; or the session holds an expired row)."""
    result: CursorResult[Any] = connection_of(session).execute(plan.stmt, params)
    if plan.attributes is None and not plan.learn(list(result.keys())):
        result.close()
        return None
    rows: Sequence[Row[Any]]
    if first:
        row = result.first()  # and closes the result
        rows = () if row is None else (row,)
    else:
        rows = result.all()
    return _entities(session, plan, rows)


def _entities(session: Session, plan: _Plan, rows: Sequence[Row[Any]]) -> list[Any] | None:
    """The rows as entities; ``None`` when the session holds one of them with
    attributes to refresh (expired): the ORM's load does that."""
    found: list[Any] = []
    identity_map = session.identity_map
    attributes, primary, cls = plan.attributes, plan.primary, plan.identity_class
    assert attributes is not None
    single = primary[0] if len(primary) == 1 else None
    for row in rows:
        ident = (row[single],) if single is not None else tuple(row[i] for i in primary)
        if None in ident:
            found.append(None)  # an outer join's missing side, as the ORM gives it
            continue
        held = identity_map.get((cls, ident, None))
        if held is not None:
            if instance_state(held).expired_attributes:
                return None
            found.append(held)
            continue
        found.append(_loaded(session, plan, (cls, ident, None), row))
    return found


def _loaded(session: Session, plan: _Plan, key: Any, row: Any) -> Any:
    """A new object holding ``row``, put in the session as the ORM's loading puts one:
    persistent, clean, in the identity map (SQLAlchemy's own steps for it; pinned to 2.1)."""
    entity = plan.new_instance()
    state = instance_state(entity)
    # Not strict: ``attributes`` was learnt from this statement's own columns, so a row
    # has as many values, and checking it again was a sixth of making the object.
    state.dict.update(zip(plan.attributes or (), row, strict=False))
    state.key = key
    state.session_id = session.hash_key
    session.identity_map._add_unpresent(state, key)
    if session.dispatch.loaded_as_persistent:
        session.dispatch.loaded_as_persistent(session, state)
    return entity


def _through_orm(session: Session, stmt: Select[Any], first: bool) -> list[Any]:
    scalars = session.execute(stmt).scalars()
    if first:
        one = scalars.first()
        return [] if one is None else [one]
    return list(scalars.all())
