"""A constraint of a table that a write breaks — a foreign key to a row that does not
exist, a CHECK, a NOT NULL — as the client's ``validation_error``, the same on both
databases.

The database says too little, and not the same on both: SQLite's error is ``FOREIGN KEY
constraint failed`` (no table, no column), ``CHECK constraint failed: <name or
expression>``; PostgreSQL names the constraint and quotes the values.  So the problem is
read from the schema instead: an engine listener (:func:`note_written`) keeps, with the
error, the table the refused statement wrote and the values it bound; the foreign keys
of that table whose columns it set are the ones that can have failed (on PostgreSQL too,
which could tell which one: both databases answer alike), a CHECK is found by the name
either gives (an unnamed one by PostgreSQL's default name or SQLite's expression), a
NOT NULL by the column both name.  The value's payload field comes from
:func:`~kumiko_typed._limits.source_path`.  The database's text, which quotes values,
and the statement go to the log only.

``validation_error`` (400), not a conflict: what breaks the constraint is a value of the
input (an id of no row, a number out of range, a missing value), and the fix is another
input.  A unique constraint's clash is ``unique_violation`` (409), as an aggregate
write's (:func:`unique_failure`, which ``_steps.aggregates`` uses too).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final
from uuid import uuid4

import attrs
from sqlalchemy import CheckConstraint, Column, ForeignKeyConstraint, Table, UniqueConstraint
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import visitors
from sqlalchemy.sql.elements import ColumnElement

from ._entity import Entity
from ._errors import Problem
from ._limits import source_path
from ._results import Failure, fail

__all__ = [
    "OtherTenantRow",
    "Written",
    "constraint_failure",
    "is_unique",
    "note_written",
    "taken_failure",
    "unique_failure",
]

logger = logging.getLogger("kumiko_typed")

_WRITTEN: Final = "kumiko_written"


@attrs.frozen
class Written:
    """What a refused statement wrote: its table, ``insert``, ``update`` or ``delete``, its
    bound rows (by column key; a multi-row VALUES binds other names)."""

    table: Table
    verb: str
    rows: tuple[Mapping[str, object], ...]


class OtherTenantRow(IntegrityError):
    """A write of a run that refers to a row of another tenant (``_tenant_refs``), which
    the foreign key alone lets through: answered as a foreign key's refusal of a row
    that does not exist, by the same code (``written``: what the refused statement
    wrote; ``None`` for a deferred key, refused where the COMMIT would be)."""

    def __init__(self, written: Written | None) -> None:
        what = "a statement" if written is None else f"a write of {written.table.name}"
        reason = Exception(f"{what} refers to a row of another tenant")
        super().__init__(None, None, reason)
        if written is not None:
            setattr(self, _WRITTEN, written)


def note_written(context: ExceptionContext) -> None:
    """``handle_error`` listener of every App engine (called only for a failed statement):
    keep a refused DML statement's table and bound values with its ``IntegrityError``."""
    exc = context.sqlalchemy_exception
    if not isinstance(exc, IntegrityError):
        return
    execution = context.execution_context
    statement = getattr(getattr(execution, "compiled", None), "statement", None)
    table = getattr(statement, "table", None)
    if not isinstance(table, Table) or not getattr(statement, "is_dml", False):
        return
    rows = tuple(getattr(execution, "compiled_parameters", None) or ())
    verb = next((v for v in ("insert", "delete") if getattr(statement, f"is_{v}", False)), "update")
    setattr(exc, _WRITTEN, Written(table, verb, rows))


def is_unique(exc: IntegrityError) -> bool:
    return _kind(exc) == "unique"


def _kind(exc: IntegrityError) -> str:
    if isinstance(exc, OtherTenantRow):
        return "foreign_key"
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if isinstance(sqlstate, str):  # psycopg
        return _PG_KINDS.get(sqlstate, "other")
    text = _first_line(exc)
    return next((kind for prefix, kind in _SQLITE_KINDS if text.startswith(prefix)), "other")


_PG_KINDS: Final = {"23503": "foreign_key", "23514": "check", "23502": "not_null", "23505": "unique"}
_SQLITE_KINDS: Final = (
    ("FOREIGN KEY constraint failed", "foreign_key"),
    ("CHECK constraint failed", "check"),
    ("NOT NULL constraint failed", "not_null"),
    ("UNIQUE constraint failed", "unique"),
)


def _first_line(exc: IntegrityError) -> str:
    return next(iter(str(exc.orig).strip().splitlines()), "")


def constraint_failure(
    exc: IntegrityError, context: str, where: str, details: Mapping[str, object], payload: object
) -> Failure | None:
    """The ``validation_error`` for ``exc``, which broke a constraint at ``where`` (``step
    ...``; ``context`` is the log's longer name).  Each problem is ``{"path", "message",
    "column", "constraint"}`` with ``details`` (the step) and an error id, under which
    the database's text is logged.  A unique clash is the ``unique_violation`` of the
    table's entity (or of the table).  ``None`` — the caller's ``internal_error`` — for
    a NULL the payload did not carry (the program's bug) and a unique clash of a
    statement written as text (no table to name)."""
    kind = _kind(exc)
    written: Written | None = getattr(exc, _WRITTEN, None)
    if kind == "unique":
        return None if written is None else _written_unique(exc, where, written, payload)
    if kind == "foreign_key":
        problems, said = _foreign_key(written, payload)
    elif kind == "check":
        problems, said = _check(exc, written, payload)
    elif kind == "not_null":
        found = _not_null(exc, written, payload)
        if found is None:
            return None
        problems, said = found
    else:
        problems, said = _other(written)
    error_id = uuid4().hex
    # The database's first line names the constraint; the rest of the exception (its
    # DETAIL, the statement and its parameters) quotes the row: the traceback's, not the message's.
    logger.info(
        "%s: a constraint refused the write (error id %s): %s", context, error_id, _first_line(exc), exc_info=exc
    )
    listed = [{**p, **details, "error_id": error_id} for p in problems]
    return fail("validation_error", f"{where}: {said} (error id {error_id})", listed)


def _label(table: Table, columns: Sequence[Column[Any]]) -> str:
    return f"{table.name}.{', '.join(c.name for c in columns)}"


def _from(problem: Problem) -> str:
    """The problem's column, with the payload field it came from if known."""
    path = problem["path"]
    return problem["column"] if path == "$" else f"{problem['column']} (from {path})"


def _path(payload: object, written: Written, column: Column[Any]) -> str:
    """The payload field ``column``'s value came from; ``$`` if the statement wrote
    several rows whose values come from different fields: neither database says which
    row broke the constraint (an executemany's first row may be a good one)."""
    found: str | None = None
    seen: set[int] = set()  # a walk of the payload per value object, not per row
    for row in written.rows:
        value = row.get(column.key)
        if value is None or id(value) in seen:
            continue
        seen.add(id(value))
        path = source_path(payload, value)
        if found is not None and path != found:
            return "$"
        found = path
    return found or "$"


# --- unique ---------------------------------------------------------------------------

#: PostgreSQL's detail of a unique violation: ``Key (sku, tenant_id)=(<the values>) already exists.``
_PG_KEY: Final = re.compile(r"Key \((?P<columns>.+?)\)=\(")
#: SQLite's words for a unique index on expressions: ``UNIQUE constraint failed: index 'name'``.
_SQLITE_INDEX: Final = re.compile(r"index '(?P<name>.+)'$")


def _clashing_columns(exc: IntegrityError, table: Table) -> list[str]:
    """The column names of the unique constraint ``exc`` reports.  Found by its name in
    ``table`` where the database gives one (PostgreSQL always, SQLite for an index on
    expressions, where it gives nothing else): the columns its expressions read, so that
    ``lower(email)`` is ``email``.  Else read from what both databases say of it
    (PostgreSQL's detail up to its values, which are not read; SQLite's ``UNIQUE
    constraint failed: t.sku, t.tenant_id``)."""
    diag = getattr(exc.orig, "diag", None)
    said = _first_line(exc).partition(":")[2].strip()
    index = _SQLITE_INDEX.match(said)
    name = getattr(diag, "constraint_name", None) if diag is not None else index and index["name"]
    named = _named_columns(table, name) if isinstance(name, str) else None
    if named is not None:
        return named
    detail = getattr(diag, "message_detail", None)
    if isinstance(detail, str):  # psycopg
        found = _PG_KEY.match(detail)
        names = found["columns"].split(", ") if found else []
    else:
        names = [name.strip().rpartition(".")[2] for name in said.split(",")]
    return [name.strip('"') for name in names]


def _named_columns(table: Table, name: str) -> list[str] | None:
    """The columns, in order and once each, that the unique index or constraint ``name``
    of ``table`` reads; ``None`` if the table declares none of that name."""
    for index in table.indexes:
        if index.name == name:
            read = (_read_by(e) if not isinstance(e, str) else [e] for e in index.expressions)
            return list(dict.fromkeys(column for names in read for column in names))
    for constraint in table.constraints:
        if constraint.name == name and isinstance(constraint, UniqueConstraint):
            return [c.name for c in constraint.columns]
    return None


def _read_by(expression: ColumnElement[Any]) -> list[str]:
    """The names of the columns an index's expression reads (``lower(email)``: ``email``)."""
    return [c.name for c in visitors.iterate(expression) if isinstance(c, Column)]


def unique_failure(
    exc: IntegrityError,
    where: str,
    entity: str,
    table: Table,
    keys: Mapping[str, str],
    row: Mapping[str, object],
    payload: object,
) -> Failure:
    """The clash at ``where`` (``step ...``) with a row of ``table`` as the client can act
    on it, the same on both databases: the columns of the constraint (``keys``: column
    name to the attribute ``row`` is keyed by) and the payload field the first of their
    values came from (``$`` if none did).  The database's text names a constraint, or
    quotes the values."""
    columns = [keys[name] for name in _clashing_columns(exc, table) if name in keys]
    return taken_failure(where, entity, columns, row, payload)


def taken_failure(
    where: str, entity: str, columns: Sequence[str], row: Mapping[str, object], payload: object
) -> Failure:
    """``unique_violation``: a row of ``entity`` holds the value of ``columns`` already
    (``row``, keyed by them), named by the payload field the first of those values came
    from (``$`` if none did); the message says what to do, never the value."""
    paths = [source_path(payload, row[key]) for key in columns if row.get(key) is not None]
    path = next((p for p in paths if p != "$"), "$")
    on = f" on {', '.join(columns)}" if columns else ""
    held = "that value" if len(columns) < 2 else "those values"
    at = f" at {path}" if path != "$" else ""
    return fail(
        "unique_violation",
        f"{where}: {entity} violates a unique constraint{on}: another row holds {held}; "
        f"pass another value{at}, or update that row instead",
        {"entity": entity, "columns": list(columns), "path": path},
    )


def _written_unique(exc: IntegrityError, where: str, written: Written, payload: object) -> Failure:
    """A statement's own clash (a ``compute`` step's write through ``c.db``): named by the
    table's entity class and attributes, as an aggregate write's is, else by the table."""
    table = written.table
    entity, attributes = table.name, {c.name: c.key for c in table.columns}
    mapper = next((m for m in Entity.registry.mappers if m.local_table is table), None)
    if mapper is not None:
        entity = mapper.class_.__name__
        attributes = {a.columns[0].name: a.key for a in mapper.column_attrs}
    by_key = {c.key: c.name for c in table.columns}
    first = written.rows[0] if len(written.rows) == 1 else {}  # of several rows: which clashed, neither says
    row = {attributes[by_key[k]]: v for k, v in first.items() if k in by_key and by_key[k] in attributes}
    return unique_failure(exc, where, entity, table, attributes, row, payload)


# --- foreign keys ----------------------------------------------------------------------


def _fk_name(fk: ForeignKeyConstraint) -> str:
    """The constraint's name; PostgreSQL's default for an unnamed one."""
    if isinstance(fk.name, str):
        return fk.name
    return f"{fk.table.name}_{'_'.join(c.name for c in fk.columns)}_fkey"


def _foreign_key(written: Written | None, payload: object) -> tuple[list[Problem], str]:
    if written is None:
        said = "a value refers to a row that does not exist; pass the id of a row that exists"
        return [_unknown("a foreign key")], said
    table = written.table
    order = list(table.columns)
    keys = sorted(table.foreign_key_constraints, key=lambda fk: order.index(next(iter(fk.columns))))
    # The keys this statement set: a row it inserted or updated refers to none.
    set_ = [fk for fk in keys if any(all(row.get(c.key) is not None for c in fk.columns) for row in written.rows)]
    if not set_ and written.verb == "insert":
        set_ = keys  # values bound under other names (a multi-row VALUES): an insert breaks only its own keys
    if set_ and written.verb != "delete":
        problems = [
            {
                "path": _path(payload, written, next(iter(fk.columns))),
                "column": _label(table, list(fk.columns)),
                "constraint": _fk_name(fk),
                "message": f"must refer to an existing row of {fk.referred_table.name}",
            }
            for fk in set_
        ]
        targets = sorted({fk.referred_table.name for fk in set_})
        names = ", ".join(p["constraint"] for p in problems)
        one = len(problems) == 1
        subject = _from(problems[0]) if one else "one of " + ", ".join(p["column"] for p in problems)
        said = (
            f"{subject} must refer to an existing row of {' or '.join(targets)} "
            f"(foreign key {names}); pass the id of a row that exists"
        )
        return problems, said
    # A row that others refer to, deleted (or its key changed).
    referrers = [
        (other, fk)
        for other in table.metadata.tables.values()
        for fk in sorted(other.foreign_key_constraints, key=_fk_name)
        if fk.referred_table is table
    ]
    problems = [
        {
            "path": "$",
            "column": _label(other, list(fk.columns)),
            "constraint": _fk_name(fk),
            "message": f"still refers to the row of {table.name}",
        }
        for other, fk in referrers
    ] or [_unknown("a foreign key", table)]
    said = f"a row of {table.name} is still referred to; remove what refers to it first"
    return problems, said


# --- CHECK -----------------------------------------------------------------------------


def _checks(table: Table) -> list[CheckConstraint]:
    found = [c for c in table.constraints if isinstance(c, CheckConstraint)]
    for column in table.columns:  # a column's own CHECK, if SQLAlchemy kept it there
        found += [c for c in column.constraints if isinstance(c, CheckConstraint) and c not in found]
    return found


def _check_columns(table: Table, check: CheckConstraint) -> list[Column[Any]]:
    """The columns the CHECK's expression names, in the order it names them."""
    text = str(check.sqltext)
    at = {c: m.start() for c in table.columns if (m := re.search(rf"\b{re.escape(c.name)}\b", text))}
    return sorted(at, key=at.__getitem__)


def _check_name(table: Table, check: CheckConstraint) -> str:
    """The constraint's name; PostgreSQL's default for an unnamed one (its first column's)."""
    if isinstance(check.name, str):
        return check.name
    columns = _check_columns(table, check)
    return f"{table.name}_{columns[0].name}_check" if columns else f"{table.name}_check"


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _check(exc: IntegrityError, written: Written | None, payload: object) -> tuple[list[Problem], str]:
    if written is None:
        return [_unknown("a check constraint")], "a value breaks a check constraint; pass a value it allows"
    table = written.table
    checks = _checks(table)
    named = getattr(getattr(exc.orig, "diag", None), "constraint_name", None)  # psycopg
    told = named if isinstance(named, str) else _first_line(exc).partition(":")[2].strip()  # SQLite
    found = [
        c for c in checks if told in (_check_name(table, c), c.name) or _squeezed(told) == _squeezed(str(c.sqltext))
    ]
    if not found and len(checks) == 1:
        found = checks
    if len(found) != 1:
        problem = _unknown("a check constraint", table)
        return [problem], f"a value breaks a check constraint of {table.name}; pass a value it allows"
    check = found[0]
    name = _check_name(table, check)
    columns = _check_columns(table, check)[:1]
    problem = {
        "path": _path(payload, written, columns[0]) if columns else "$",
        "column": _label(table, columns) if columns else table.name,
        "constraint": name,
        "message": f"must satisfy the check constraint {name}",
    }
    return [problem], f"{_from(problem)} {problem['message']}; pass a value it allows"


# --- NOT NULL and the rest -------------------------------------------------------------


def _not_null(exc: IntegrityError, written: Written | None, payload: object) -> tuple[list[Problem], str] | None:
    """A NULL is the input's fault when the payload carried one (the field named like the
    column, else the first ``None`` it holds); a NULL the program made (a projector
    clearing a column) is a bug: ``None``, for the caller's ``internal_error``."""
    diag = getattr(exc.orig, "diag", None)
    if diag is not None:  # psycopg
        table, column = diag.table_name or "", diag.column_name or ""
    else:  # SQLite: "NOT NULL constraint failed: table.column"
        table, _, column = _first_line(exc).partition(":")[2].strip().rpartition(".")
    if not table and written is not None:
        table = written.table.name
    path = _none_in(payload, column)
    if path is None:
        return None
    label = f"{table}.{column}" if table else column
    problem = {"path": path, "column": label, "constraint": "NOT NULL", "message": "must not be null"}
    return [problem], f"{_from(problem)} must not be null; give it a value"


def _none_in(payload: object, column: str) -> str | None:
    """The path of the payload's ``None`` a NULL came from: the field named ``column``
    if it is one, else the first ``None`` (``None`` if it holds none)."""
    if getattr(payload, column, _ABSENT) is None:
        return f"$.{column}"
    path = source_path(payload, None)
    return None if path == "$" else path


_ABSENT: Final = object()


def _other(written: Written | None) -> tuple[list[Problem], str]:
    table = None if written is None else written.table
    problem = _unknown("a constraint", table)
    where = f" of {table.name}" if table is not None else ""
    return [problem], f"the write breaks a constraint{where}; check the values given"


def _unknown(what: str, table: Table | None = None) -> Problem:
    """A problem whose column cannot be told (a statement of text, or a constraint the
    schema does not declare)."""
    name = "" if table is None else table.name
    return {"path": "$", "column": name, "constraint": "", "message": f"breaks {what}"}
