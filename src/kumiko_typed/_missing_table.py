"""A statement that met no table: the App's tables were never created in this database.

Forgetting ``app.create_all()`` (or pointing the App at a database no migration has
reached) made the first dispatch an ``internal_error`` saying only that a step "raised
OperationalError"; the table's name and the fix were in the log's traceback.  The
Failure now names the table and the fix when it is one kumiko-typed defines (the
framework's, an entity's): a name the code already publishes, where a table only an
application's own SQL names stays in the log with the rest of that SQL.  The command
line, which tells an operator to create the tables, asks :func:`lacking` too.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from sqlalchemy.exc import DBAPIError

from ._entity import Entity
from ._tables import metadata as framework_metadata

__all__ = ["lacking", "missing_table"]

#: PostgreSQL's undefined_table and undefined_column: told by SQLSTATE, whatever the
#: server's language; SQLite's words are the same in every locale.
_SQLSTATES: Final[dict[str, Literal["table", "column"]]] = {"42P01": "table", "42703": "column"}
_SQLITE_WORDS: Final[dict[str, Literal["table", "column"]]] = {"no such table": "table", "no such column": "column"}
_SQLITE_TABLE: Final = re.compile(r"^no such table: (?:main\.)?(?P<name>\S+)$")
#: PostgreSQL quotes the name in most of its languages.
_QUOTED: Final = re.compile(r"[\"“«»„](?P<name>[^\"“”«»„]+)[\"”«»“]")


def lacking(exc: DBAPIError) -> Literal["table", "column"] | None:
    """What the database said ``exc``'s statement named and it lacks, if that is what it said."""
    state = getattr(exc.orig, "sqlstate", None)
    if state in _SQLSTATES:
        return _SQLSTATES[state]
    said = str(exc.orig)
    return next((what for words, what in _SQLITE_WORDS.items() if words in said), None)


def missing_table(exc: BaseException) -> str | None:
    """What a Failure may say of ``exc`` if it is the database's "no such table" for a
    table of kumiko-typed or of an entity, else ``None``."""
    if not isinstance(exc, DBAPIError) or lacking(exc) != "table":
        return None
    first = next(iter(str(exc.orig).splitlines()), "")
    found = _QUOTED.search(first) if getattr(exc.orig, "sqlstate", None) else _SQLITE_TABLE.match(first)
    if found is None or not _ours(found["name"]):
        return None
    return (
        f"the database has no table {found['name']}: create the App's tables with app.create_all()"
        " or a migration (docs/operations.md#tables-and-migrations)"
    )


def _ours(name: str) -> bool:
    """Whether ``name`` is a table of kumiko-typed or of an entity (as PostgreSQL quotes
    one, its schema may lead)."""
    tables = {**framework_metadata.tables, **Entity.metadata.tables}
    return any(name in (t.name, t.fullname) for t in tables.values())
