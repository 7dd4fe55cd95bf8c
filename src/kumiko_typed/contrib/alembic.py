"""Alembic's autogenerate for an App's tables: ``context.configure(..., **options(app))``
in ``env.py`` (docs/operations.md, "Tables and migrations").

Without these, autogenerate writes what the App's tables are not, and what the first
``alembic upgrade`` cannot run:

- a time column as ``kumiko_typed._utc.UtcDateTime(timezone=True)``, a private class the
  migration does not import (``NameError`` at upgrade); here it is the
  ``sa.DateTime(timezone=True)`` it is in the database;
- ``postgresql.JSONB(astext_type=Text())`` with ``Text`` unimported when the revision is
  generated on SQLite (an Alembic bug); here ``postgresql.JSONB()``, imported;
- in every revision, the index made on the other database only
  (``kumiko_workflow_runs_due`` on PostgreSQL, ``kumiko_workflow_runs_due_by_workflow`` on
  SQLite): Alembic ignores ``ddl_if``.

Alembic is not a dependency: this module only names what ``env.py`` passes it.  Run the
migrations through ``app.engine`` (its DDL adds ``COLLATE "C"`` and ``DOUBLE PRECISION``
on PostgreSQL, ``JSONTEXT`` on SQLite); Alembic compares no collation, so a migration run
on an engine of its own is never mended by a later revision.  Offline (``alembic upgrade
--sql``) there is no engine: :func:`compile_as_app` gives the dialect Alembic compiles
with the App's DDL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from sqlalchemy.dialects import postgresql
from sqlalchemy.types import TypeDecorator

from .._app import App
from .._engine import dress_dialect
from .._errors import BootError
from .._tables import ONLY_ON

__all__ = ["compile_as_app", "include_object", "options", "render_item"]


def options(app: App) -> dict[str, Any]:
    """The options of ``context.configure`` that make autogenerate write what
    ``app.create_all()`` makes: ``render_item`` and ``include_object``.  With hooks of
    your own, call these first from them."""
    return {"render_item": render_item, "include_object": include_object(app)}


def render_item(kind: str, obj: object, autogen_context: Any) -> str | Literal[False]:
    """Alembic's ``render_item``: the library's column types as importable SQLAlchemy
    types; ``False`` (Alembic's own rendering) for everything else."""
    if kind != "type":
        return False
    if isinstance(obj, TypeDecorator) and type(obj).__module__.startswith("kumiko_typed."):
        return f"sa.{obj.impl_instance!r}"  # UtcDateTime: sa.DateTime(timezone=True)
    if isinstance(obj, postgresql.JSONB):
        autogen_context.imports.add("from sqlalchemy.dialects import postgresql")
        return "postgresql.JSONB()"
    return False


def include_object(app: App) -> Callable[[Any, str | None, str, bool, Any], bool]:
    """Alembic's ``include_object`` for ``app``'s database: every object but an index the
    library makes on the other kind of database only."""
    dialect = app.engine.dialect.name

    def included(obj: Any, name: str | None, kind: str, reflected: bool, compare_to: Any) -> bool:
        info = getattr(obj, "info", None) or {}
        return bool(info.get(ONLY_ON, dialect) == dialect)

    return included


def compile_as_app(migration_context: Any, app: App) -> None:
    """Offline migrations (``alembic upgrade --sql``): after ``context.configure(url=...)``,
    call ``compile_as_app(context.get_context(), app)`` so that the SQL Alembic prints is
    the DDL ``app.engine`` runs online.  Alembic makes a plain dialect from the URL, and
    its script made text columns with the database's collation and a 4-byte float
    ``REAL`` on PostgreSQL, JSON with numeric affinity on SQLite: a database the App
    answers otherwise on (docs/operations.md)."""
    dialect = migration_context.dialect
    expected = app.engine.dialect.name
    if dialect.name != expected:
        raise BootError(
            [
                f"the migration compiles for {dialect.name} and the App runs on {expected}: "
                f"give context.configure the App's URL (url=app.engine.url)"
            ]
        )
    dress_dialect(dialect)
