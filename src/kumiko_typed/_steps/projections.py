"""The unsafe projection writes: ``unsafe_projection_upsert`` and
``unsafe_projection_delete`` on a table the feature declared (never an aggregate's,
which only events change)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
from sqlalchemy import ColumnElement, Insert, Table, delete, literal
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import visitors

from .._errors import StepRefused
from .._integrity import taken_failure
from .._kinds import refuse_mismatched
from .._limits import bound_values, refuse, refuse_compared, source_path, unfit_values
from .._results import Failure
from .._tables import table_of
from ._base import Fn, Result, Step, called

if TYPE_CHECKING:
    from .._interpreter import Run

__all__ = ["ProjectionDelete", "ProjectionUpsert"]


@attrs.frozen(slots=True)
class ProjectionUpsert(Step):
    kind = "unsafe_projection_upsert"
    table: object
    on: tuple[str, ...]
    row: Fn

    def execute(self, run: Run) -> Result:
        table = table_of(self.table)
        row = dict(called(self.row, run, "row="))
        unknown = sorted(set(row) - set(table.c.keys()))
        if unknown:
            raise StepRefused(f"row has no column(s) {unknown} in table {table.name}")
        missing = [c for c in self.on if c not in row]
        if missing:
            raise StepRefused(f"row lacks the conflict column(s) {missing} of on={list(self.on)}")
        # NULL equals nothing, so a key holding one never conflicts: each call inserted
        # another row (under a nullable unique column), where an upsert keeps one per key.
        empty = [
            {"path": source_path(run.payload, None), "message": _NULL_KEY, "column": f"{table.name}.{c}"}
            for c in self.on
            if row[c] is None
        ]
        refuse(empty)
        updates = [c for c in row if c not in self.on]
        if not updates:
            raise StepRefused(f"row sets only the conflict column(s) {list(self.on)}: nothing to update")
        # The INSERT half of an upsert needs them even when the row exists: the database
        # refused it with an IntegrityError, an internal_error naming no column.
        lacking = [c for c in _required(table) if c not in row]
        if lacking:
            raise StepRefused(
                f"row lacks the column(s) {lacking} of {table.name}, which are NOT NULL without a default"
            )
        refuse(unfit_values({table.c[k]: v for k, v in row.items()}, run.payload))
        connection = run.db.connection()
        stmt = _upsert(connection.dialect.name, table, self.on, tuple(updates))
        written = connection.execute(stmt, row)
        # Only the guarded upsert's own RETURNING says whether it wrote: PostgreSQL's
        # implicit ``RETURNING id`` of a table with a generated key is consumed by the
        # insert itself, so its result was empty and every first upsert a false clash.
        if _guarded(table, self.on) and written.first() is None:
            return _held_by_another_tenant(f"step {self.describe()}", table, self.on, row, run.payload)
        return None


#: Table → the columns an INSERT must be given (NOT NULL, no default of either side, no
#: autoincrement key), worked out once per table.
_REQUIRED: dict[Table, tuple[str, ...]] = {}


def _required(table: Table) -> tuple[str, ...]:
    found = _REQUIRED.get(table)
    if found is None:
        found = _REQUIRED[table] = tuple(
            c.key
            for c in table.columns
            if not c.nullable and c.default is None and c.server_default is None and c is not table.autoincrement_column
        )
    return found


_NULL_KEY = "must not be null: it is a conflict column (on=) of an upsert, and NULL matches no row"

#: Upserts by (dialect, table, conflict columns, updated columns): built once, the row
#: bound as parameters (no statement or cache key built per call).
_UPSERTS: dict[tuple[str, Table, tuple[str, ...], tuple[str, ...]], Insert] = {}


def _upsert(dialect: str, table: Table, on: tuple[str, ...], updates: tuple[str, ...]) -> Insert:
    key = (dialect, table, on, updates)
    stmt = _UPSERTS.get(key)
    if stmt is None:
        ins = postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)
        # A table with a tenant column: the row it clashes with is updated only if it is
        # of the same tenant; another tenant's is left as it is, and RETURNING gives no
        # row (psycopg's rowcount of an upsert is -1, whatever it did).
        guard = None
        if _guarded(table, on):
            guard = table.c.tenant_id.is_not_distinct_from(ins.excluded.tenant_id)
        stmt = ins.on_conflict_do_update(
            index_elements=[table.c[c] for c in on], set_={c: ins.excluded[c] for c in updates}, where=guard
        )
        if guard is not None:
            stmt = stmt.returning(literal(1))
        _UPSERTS[key] = stmt
    return stmt


def _guarded(table: Table, on: tuple[str, ...]) -> bool:
    """Whether the upsert of ``table`` on ``on`` updates only a row of the same tenant."""
    return "tenant_id" in table.c and "tenant_id" not in on


@attrs.frozen(slots=True)
class ProjectionDelete(Step):
    kind = "unsafe_projection_delete"
    table: object
    where: Fn

    def execute(self, run: Run) -> Result:
        table = table_of(self.table)
        clause = called(self.where, run, "where=")
        if not isinstance(clause, ColumnElement) or not _references(clause, table):
            raise StepRefused(
                f"where= must be a condition on the columns of {table.name} (got a {type(clause).__name__}); "
                "an unbounded delete is refused"
            )
        binds = bound_values(clause)
        refuse_mismatched(clause, binds, run.payload, None)
        refuse_compared(binds, clause, run.payload)
        run.db.execute(delete(table).where(clause))
        return None


def _held_by_another_tenant(
    where: str, table: Table, on: tuple[str, ...], row: Mapping[str, object], payload: object
) -> Failure:
    """The upsert's key is another tenant's row: the clash of a unique constraint not
    made per tenant, answered as an aggregate's is (``unique_violation``), not by taking
    over that tenant's row."""
    return taken_failure(where, table.name, on, row, payload)


def _references(clause: ColumnElement[Any], table: Table) -> bool:
    return any(getattr(el, "table", None) is table for el in visitors.iterate(clause))
