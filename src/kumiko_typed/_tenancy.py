"""What the tenant filter cannot see, refused rather than leaked.

The filter (``with_loader_criteria`` on :class:`Entity`) adds ``tenant_id = :tenant`` for
every *mapped class* a select names — directly, aliased, in a join, subquery, EXISTS, CTE
or union.  A select that names an entity's table as SQLAlchemy Core does
(``Product.__table__``, its columns, an alias of it, or ``table("catalog_product")``)
carries no mapper, so no criteria would be added: such a select is refused.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnClause, Select, TableClause
from sqlalchemy.orm import Mapper
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.sql.selectable import AliasedReturnsRows

from ._data import StepRefused
from ._entity import Entity
from ._tables import metadata


class UnscopedRead(StepRefused):
    """A select reads an entity's table around the tenant filter."""


def _children(node: Any) -> Any:
    if isinstance(node, Select):
        # Not Select.get_children(): it adds the FROMs derived from the columns, where a
        # mapped class's column gives its plain table.  Explicit select_from()s stay.
        return ClauseElement.get_children(node, omit_attrs=("_correlate", "_correlate_except"))
    if isinstance(node, ColumnClause) and node.table is not None:
        return [*node.get_children(), node.table]  # type: ignore[no-untyped-call]  # a column does not list its table
    return node.get_children()


def _scoped(node: Any) -> bool:
    return (
        isinstance(node, TableClause)
        and "parententity" not in node._annotations
        and node.fullname in metadata.tables
        and not node.name.startswith("kumiko_")
    )


def unscoped_table(stmt: object) -> str | None:
    """The name of an entity table ``stmt`` reads without its mapped class, if any.

    Each SELECT, alias, subquery and CTE is a scope of its own.  In a scope, a plain
    reference to a table is covered when a mapped class of that very table is named there
    too (``session.get()`` compares the mapper's plain primary key column): both are then
    one FROM, which the filter restricts.  An aliased mapped class covers nothing: its
    alias is another FROM.  Nothing under an ORM-annotated element is looked at: what sits
    under a mapped class's element (its table, its columns) is the filter's."""
    covered: list[set[Any]] = []
    plain: list[list[Any]] = []
    todo: list[tuple[Any, int]] = [(stmt, -1)]
    while todo:
        node, scope = todo.pop()
        if scope < 0 or isinstance(node, (Select, AliasedReturnsRows)):
            covered.append(set())
            plain.append([])
            scope = len(covered) - 1
        entity = node._annotations.get("parententity")
        if entity is not None:
            if isinstance(entity, Mapper):
                covered[scope].add(entity.local_table)
            continue
        if _scoped(node):
            plain[scope].append(node)
        todo.extend((child, scope) for child in _children(node))
    for tables, refs in zip(covered, plain, strict=True):
        for ref in refs:
            if ref not in tables:
                return str(ref.fullname)
    return None


def _entity_class(table: str) -> str:
    for mapper in Entity.registry.mappers:
        if getattr(mapper.local_table, "fullname", None) == table:
            return mapper.class_.__name__
    return "its mapped class"


def refuse_unscoped(stmt: object) -> None:
    """Raise :class:`UnscopedRead` if ``stmt`` reads an entity table around the filter."""
    table = unscoped_table(stmt)
    if table is None:
        return
    cls = _entity_class(table)
    raise UnscopedRead(
        f"a select names the table {table} as a Core table (Table, its columns or table()): "
        f"the tenant filter covers the mapped class only; select {cls} or {cls}.<column> instead, "
        "or say .execution_options(kumiko_all_tenants=True) to read every tenant on purpose"
    )
