"""What ``create_all`` cannot fix: an existing table that lacks a column the code needs.

``create_all`` never alters a table, so a database created by an older kumiko-typed (or
before an entity grew a field) keeps its old columns, and the first statement naming a
new one fails deep inside a dispatch or a worker pass. Comparing the tables' columns with
the database's once, at ``create_all``, turns that into one error naming every column.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Column, Engine, Table, inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import CreateColumn

__all__ = ["SCHEMA_FIX", "missing_columns"]

#: What ``check --against`` says to do about the tables and columns it lists.
SCHEMA_FIX = (
    "Migrate this database before deploying this code: app.create_all() adds a missing table but"
    " never a column, and every statement naming one fails until it is there"
    " (docs/operations.md#tables-and-migrations). The runs are checked once the tables are complete."
)


def missing_columns(engine: Engine, tables: Sequence[Table]) -> list[str]:
    """One problem per column of ``tables`` that the database's table of that name lacks,
    and one per table it lacks altogether (which ``create_all`` creates, but a check
    before the deploy must name: every statement of the new code using it would fail)."""
    inspector = inspect(engine)
    present: dict[tuple[str | None, str], set[str]] = {}
    for schema in dict.fromkeys(t.schema for t in tables):  # one query per schema on PostgreSQL
        names = [t.name for t in tables if t.schema == schema]
        found = inspector.get_multi_columns(schema=schema, filter_names=names)
        present.update({key: {c["name"] for c in columns} for key, columns in found.items()})
    problems: list[str] = []
    for table in tables:
        columns = present.get((table.schema, table.name))
        if columns is None:
            problems.append(f"table {table.name} does not exist: {_create(table)}")
            continue
        problems += [
            f"table {table.name} has no column {column.name}: {_fix(table, column, engine.dialect)}"
            for column in table.columns
            if column.name not in columns
        ]
    return problems


def _create(table: Table) -> str:
    if table.name.startswith("kumiko_"):
        return "this release adds it; create it (app.create_all() or a migration)"
    return "create it (app.create_all() or a migration)"


def _fix(table: Table, column: Column[object], dialect: Dialect) -> str:
    """What to do, with the statement to run where one statement does it: a column that may
    be NULL or has a default is added as is; the rows already there need a value for one
    that has neither, which no statement can know."""
    if column.nullable or column.server_default is not None:
        # The engine's own DDL compiler: on PostgreSQL, a text column's COLLATE "C".
        spec = CreateColumn(column).compile(dialect=dialect)
        run = f": ALTER TABLE {dialect.identifier_preparer.format_table(table)} ADD COLUMN {spec}"
    else:
        run = " (NOT NULL with no default: the rows already there need a value)"
    if table.name.startswith("kumiko_"):
        return (
            f"the database was made by an older kumiko-typed; add it{run} (docs/operations.md, Tables and migrations)"
        )
    return f"the class has a column its table lacks; add it with a migration{run}"
