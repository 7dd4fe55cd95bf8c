"""The SQL an engine sends, for tests that pin down which statements a feature costs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa


@contextmanager
def statements(engine: sa.Engine) -> Iterator[list[str]]:
    """The statements ``engine`` sends while the block runs, whitespace collapsed."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


class _CountingCursor:
    """A DBAPI cursor that counts the rows fetched from it (``counts[table]``)."""

    def __init__(self, cursor: Any, counts: dict[str, int], table: str) -> None:
        self._cursor, self._counts, self._table = cursor, counts, table

    def _count(self, rows: Any) -> Any:
        self._counts[self._table] = self._counts.get(self._table, 0) + len(rows)
        return rows

    def fetchone(self) -> Any:
        row = self._cursor.fetchone()
        return row if row is None else self._count([row])[0]

    def fetchmany(self, *args: Any) -> Any:
        return self._count(self._cursor.fetchmany(*args))

    def fetchall(self) -> Any:
        return self._count(self._cursor.fetchall())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


@contextmanager
def rows_read(engine: sa.Engine, *tables: str) -> Iterator[dict[str, int]]:
    """The rows the block's SELECTs from ``tables`` (named in their FROM) hand to Python,
    per table: what a read costs whatever the database's plan."""
    with _fetched(engine, tables, _CountingCursor) as counts:
        yield counts


@contextmanager
def _fetched(
    engine: sa.Engine, tables: tuple[str, ...], cursor_class: type[_CountingCursor]
) -> Iterator[dict[str, int]]:
    """What ``cursor_class`` counts of the fetches of the block's SELECTs from ``tables``."""
    counts: dict[str, int] = {}

    def wrap(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        head = " ".join(statement.split())
        for table in tables:
            if head.startswith("SELECT") and f"FROM {table}" in head:
                context.cursor = cursor_class(cursor, counts, table)
                break

    sa.event.listen(engine, "after_cursor_execute", wrap)
    try:
        yield counts
    finally:
        sa.event.remove(engine, "after_cursor_execute", wrap)


def _size(value: object) -> int:
    """A fetched value's bytes: text as it is, JSON (psycopg hands it parsed) as text."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, dict | list):
        return len(json.dumps(value, default=str))
    return 0


class _SizingCursor(_CountingCursor):
    """A DBAPI cursor that sums the bytes of the values fetched from it (``counts[table]``),
    and counts the rows (``counts[f"{table} rows"]``)."""

    def _count(self, rows: Any) -> Any:
        self._counts[self._table] = self._counts.get(self._table, 0) + sum(_size(v) for row in rows for v in row)
        self._counts[f"{self._table} rows"] = self._counts.get(f"{self._table} rows", 0) + len(rows)
        return rows


@contextmanager
def bytes_read(engine: sa.Engine, *tables: str) -> Iterator[dict[str, int]]:
    """The bytes of the values the block's SELECTs from ``tables`` hand to Python, per
    table (and their rows, per ``"<table> rows"``): what a read costs in what travels
    and is decoded, whatever the plan."""
    with _fetched(engine, tables, _SizingCursor) as counts:
        yield counts
