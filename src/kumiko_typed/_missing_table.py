"""A statement that met no table: the App's tables were never created in this database.

Forgetting ``app.create_all()`` (or pointing the App at a database no migration has
reached) made the first dispatch an ``internal_error`` saying only that a step "raised
OperationalError"; the table's name and the fix were in the log's traceback.  The
Failure now names the table and the fix when it is one kumiko-typed defines (the
framework's, an entity's): a name the code already publishes, where a table only an
application's own SQL names stays in the log with the rest of that SQL.
"""

from __future__ import annotations

import re
from typing import Final

from sqlalchemy.exc import DBAPIError

from ._entity import Entity
from ._tables import metadata as framework_metadata

__all__ = ["missing_table"]

#: PostgreSQL's undefined_table: told by its SQLSTATE, whatever the server's language.
_UNDEFINED_TABLE: Final = "42P01"
#: SQLite's words (the same in every locale); PostgreSQL's quote the name in most languages.
_SQLITE: Final = re.compile(r"^no such table: (?:main\.)?(?P<name>\S+)$")
_QUOTED: Final = re.compile(r"[\"“«»„](?P<name>[^\"“”«»„]+)[\"”«»“]")


def missing_table(exc: BaseException) -> str | None:
    """What to say of ``exc`` if it is the database's "no such table", else ``None``."""
    if not isinstance(exc, DBAPIError):
        return None
    first = next(iter(str(exc.orig).splitlines()), "")
    postgresql = getattr(exc.orig, "sqlstate", None) == _UNDEFINED_TABLE
    found = _QUOTED.search(first) if postgresql else _SQLITE.match(first)
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
