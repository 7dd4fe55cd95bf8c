"""Who may run what, and which rows they see: the role check, the payload check, and
the tenant filter on every ORM read (and ORM ``update(Entity)``/``delete(Entity)``).

The filter (``with_loader_criteria`` on :class:`Entity`) adds ``tenant_id = :tenant`` for
every *mapped class* a select names — directly, aliased, in a join, subquery, EXISTS, CTE
or union.  A select that names an entity's table as SQLAlchemy Core does
(``Product.__table__``, its columns, an alias of it, or ``table("catalog_product")``)
carries no mapper, so no criteria would be added: such a select is refused
(:class:`~kumiko_typed._errors.UnscopedRead`) rather than leaked.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import BindParameter, ColumnClause, Select, TableClause, bindparam, event
from sqlalchemy.orm import Mapper, ORMExecuteState, Session, sessionmaker, with_loader_criteria
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.sql.selectable import AliasedReturnsRows

from ._ctx import User
from ._entity import Entity
from ._errors import UnscopedRead, UnscopedWrite
from ._results import Failure, fail
from ._tables import metadata

if TYPE_CHECKING:
    from typing import TypeAlias

    from ._feature import QueryHandler, WriteHandler

    AnyHandler: TypeAlias = WriteHandler[Any, Any] | QueryHandler[Any, Any]

__all__ = [
    "NO_TENANT",
    "NO_TENANT_REFUSED",
    "TENANT_CRITERIA",
    "TENANT_KEY",
    "TENANT_PARAM",
    "ShapeMemo",
    "deny",
    "install_tenant_filter",
    "no_tenant",
    "refuse_unscoped",
    "wrong_payload",
]

#: ``session.info`` key holding the tenant every ORM read is filtered to.
TENANT_KEY = "kumiko_tenant"


def deny(handler: AnyHandler, user: object) -> Failure | None:
    """The role check: ``roles=None`` admits any authenticated user."""
    if not isinstance(user, User):
        return fail("access_denied", "an authenticated user is required")
    if handler.roles is not None and not (handler.roles & user.roles):
        return fail("access_denied", f"handler {handler.name} needs one of the roles {sorted(handler.roles)}")
    return None


#: No tenant's id: what cron-started runs (``_workflow_engine.SYSTEM_USER``) write their
#: rows and events under, which only a sysadmin reaches (as ``_operations`` does).
NO_TENANT: Final = uuid.UUID(int=0)


def no_tenant(user: object) -> Failure | None:
    """Refuse, at the App's entry points, a user of the nil tenant who is no sysadmin:
    it is what an authentication layer gives a token without a tenant claim, and its
    reads would see every cron run's rows and streams as its own."""
    if isinstance(user, User) and user.tenant_id == NO_TENANT and not user.has_role("sysadmin"):
        return fail("access_denied", NO_TENANT_REFUSED)
    return None


NO_TENANT_REFUSED: Final = "a user of no tenant (the nil tenant id) is refused: only a sysadmin acts there"


#: The tenant of a filtered read travels as a parameter, not in the criteria: one
#: criteria object for every read then costs no per-call analysis of a closure.
TENANT_PARAM: Final = "kumiko_filter_tenant"
_TENANT_VALUE: Final[BindParameter[Any]] = bindparam(TENANT_PARAM)
TENANT_CRITERIA: Final = with_loader_criteria(Entity, lambda cls: cls.tenant_id == _TENANT_VALUE, include_aliases=True)


def wrong_payload(handler: AnyHandler, payload: object) -> Failure | None:
    """A structured payload of another class than the handler's (possible without mypy)."""
    if isinstance(payload, handler.payload_type):
        return None
    expected = handler.payload_type.__name__
    return fail(
        "validation_error",
        f"handler {handler.name} takes a {expected}, not a {type(payload).__name__}",
        [{"path": "$", "message": f"expected {expected}"}],
    )


def _tenant_filter(state: ORMExecuteState) -> None:
    tenant = state.session.info.get(TENANT_KEY)
    if tenant is None or state.execution_options.get("kumiko_all_tenants", False):
        return
    if state.is_select:
        params = state.parameters
        if params is not None and not isinstance(params, Mapping):
            return  # an executemany select does not exist; nothing to filter
        refuse_unscoped(state.statement)
    elif state.is_update or state.is_delete:
        params = _scoped_write(state)
        if params is _UNFILTERED:
            return
    else:
        return
    state.statement = state.statement.options(TENANT_CRITERIA)
    state.parameters = {**(params or {}), TENANT_PARAM: tenant}


_UNFILTERED: Final[Any] = object()


def _scoped_write(state: ORMExecuteState) -> Any:
    """The parameters of an ORM ``update(Entity)``/``delete(Entity)``, which the filter
    restricts to the tenant's rows as it does a select (another tenant's row is then a
    row that does not match); ``_UNFILTERED`` for a statement of a Core table (not
    filtered, like SQL text) or of a class that is no ``Entity``.  The ORM's UPDATE by
    primary key (a list of rows) would set another tenant's rows by their ids, and
    takes no criteria: refused."""
    entity = state.bind_mapper
    if entity is None or not issubclass(entity.class_, Entity):
        return _UNFILTERED
    params = state.parameters
    if params is not None and not isinstance(params, Mapping):
        raise UnscopedWrite(
            f"an ORM UPDATE of {entity.class_.__name__} by primary key (a list of rows) cannot be "
            "restricted to the tenant; update the rows with update(...).where(...) one statement each, "
            "or say .execution_options(kumiko_all_tenants=True) to write every tenant's rows on purpose"
        )
    return params


def install_tenant_filter(factory: sessionmaker[Session]) -> None:
    """Every ORM select in a dispatch sees only the dispatching user's tenant."""
    event.listen(factory, "do_orm_execute", _tenant_filter)


def _children(node: Any) -> Any:
    if isinstance(node, Select):
        # Not Select.get_children(): it adds the FROMs derived from the columns, where a
        # mapped class's column gives its plain table.  Explicit select_from()s stay.
        return ClauseElement.get_children(node, omit_attrs=("_correlate", "_correlate_except"))
    if isinstance(node, ColumnClause) and node.table is not None:
        return [*node.get_children(), node.table]  # type: ignore[no-untyped-call]  # a column does not list its table
    return node.get_children()


def _scoped(node: Any, aggregates: frozenset[object]) -> bool:
    """A plain reference to one of the ``aggregates``' tables (by name: ``table("...")`` too)."""
    return isinstance(node, TableClause) and "parententity" not in node._annotations and node.fullname in aggregates


def unscoped_table(stmt: object) -> str | None:
    """The name of an entity table ``stmt`` reads without its mapped class, if any.

    Each SELECT, alias, subquery and CTE is a scope of its own.  In a scope, a plain
    reference to a table is covered when a mapped class of that very table is named there
    too (``session.get()`` compares the mapper's plain primary key column): both are then
    one FROM, which the filter restricts; or when it is correlated (:func:`_correlated`)
    to the SELECT around it, which names the mapped class.  An aliased mapped class covers
    nothing: its alias is another FROM.  Nothing under an ORM-annotated element is looked
    at: what sits under a mapped class's element (its table, its columns) is the filter's."""
    covered: list[set[Any]] = []
    plain: list[list[Any]] = []
    #: Per scope: the element that opens it, and the scope around it (-1 for none).
    opened: list[tuple[Any, int]] = []
    todo: list[tuple[Any, int]] = [(stmt, -1)]
    # An Entity's table only: a read model's (a Table of the same metadata, a class of
    # another base) is no aggregate's, not filtered, and read as it is (docs/steps.md).
    aggregates: frozenset[object] = frozenset(getattr(m.local_table, "fullname", None) for m in Entity.registry.mappers)
    while todo:
        node, scope = todo.pop()
        if scope < 0 or isinstance(node, (Select, AliasedReturnsRows)):
            covered.append(set())
            plain.append([])
            opened.append((node, scope))
            scope = len(covered) - 1
        entity = node._annotations.get("parententity")
        if entity is not None:
            if isinstance(entity, Mapper):
                covered[scope].add(entity.local_table)
            continue
        if _scoped(node, aggregates):
            plain[scope].append(node)
        todo.extend((child, scope) for child in _children(node))
    for index, (tables, refs) in enumerate(zip(covered, plain, strict=True)):
        for ref in refs:
            if ref not in tables and not _correlated(ref, opened[index], covered):
                return str(ref.fullname)
    return None


def _correlated(table: Any, opened: tuple[Any, int], covered: list[set[Any]]) -> bool:
    """Whether ``table``, named plainly in the scope ``opened``, is the FROM of the SELECT
    around it, which names its mapped class: the row a relationship's ``any()``/``has()``
    EXISTS tests (its join condition names both tables plainly).  Only a correlation the
    select says itself counts — ``correlate_except`` (what ``any()``/``has()`` write) not
    naming the table, or ``correlate`` naming it — which SQLAlchemy applies whenever the
    enclosing select has the table; not a subquery in a FROM (never correlated) and not
    auto-correlation, which SQLAlchemy skips for a select of one FROM."""
    select, around = opened
    if not isinstance(select, Select) or around < 0:
        return False
    plain_table = table._deannotate()
    if select._correlate_except is not None:
        said = all(t._deannotate() is not plain_table for t in select._correlate_except)
    else:
        said = any(t._deannotate() is plain_table for t in select._correlate)
    return said and plain_table in covered[around]


def _entity_class(table: str) -> str:
    for mapper in Entity.registry.mappers:
        if getattr(mapper.local_table, "fullname", None) == table:
            return mapper.class_.__name__
    return "its mapped class"


class ShapeMemo:
    """What was worked out once per statement *shape*: SQLAlchemy's cache key of a
    statement (equal keys compile to the same SQL; only bound values differ).

    Dropped when it holds ``limit`` shapes (statements of ever new shapes must not grow
    memory without bound) and when a table is added to the metadata (a table name's
    verdict may change)."""

    __slots__ = ("_entries", "_limit", "_tables")

    def __init__(self, limit: int = 2000) -> None:
        self._entries: dict[Any, Any] = {}
        self._limit = limit
        self._tables = -1

    def entries(self) -> dict[Any, Any]:
        """The memo, keyed by ``CacheKey.key``."""
        tables = len(metadata.tables)
        if tables != self._tables or len(self._entries) >= self._limit:
            self._entries.clear()
            self._tables = tables
        return self._entries


#: Cache keys of statements found to read no entity table around the filter.
_SCOPED: Final = ShapeMemo()


def refuse_unscoped(stmt: object) -> None:
    """Raise :class:`UnscopedRead` if ``stmt`` reads an entity table around the filter.

    The walk runs once per statement shape: everything it looks at (each FROM, table
    name, and whether a column or table carries its mapped class) is part of the cache
    key — the ORM compiles the filter into a mapped class's reads and not into a plain
    table's, so a key that mixed them up would be SQLAlchemy's own caching bug.  Only a
    verdict of *scoped* is kept: a refused statement is walked (and refused) every time."""
    key = stmt._generate_cache_key() if isinstance(stmt, ClauseElement) else None
    scoped = _SCOPED.entries()
    if key is not None and key.key in scoped:
        return
    table = unscoped_table(stmt)
    if table is None:
        if key is not None:
            scoped[key.key] = True
        return
    cls = _entity_class(table)
    raise UnscopedRead(
        f"a select names the table {table} as a Core table (Table, its columns or table()): "
        f"the tenant filter covers the mapped class only; select {cls} or {cls}.<column> instead, "
        "or say .execution_options(kumiko_all_tenants=True) to read every tenant on purpose"
    )
