"""A database made full for real, for the resource exhaustion tests: SQLite by
``max_page_count``, PostgreSQL by a trigger raising a SQLSTATE of class 53."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from kumiko_typed import App


class Full:
    """The database ``app`` writes to, made full (``on``) and given space again (``off``):
    on SQLite each connection the App checks out gets ``max_page_count`` at the file's
    page count; on PostgreSQL a trigger on ``tables`` raises ``state``."""

    def __init__(self, app: App, state: str = "53100", tables: tuple[str, ...] = ("kumiko_events",)) -> None:
        self.app, self.state, self.tables = app, state, tables
        self.sqlite = app.engine.dialect.name == "sqlite"
        self.full = False
        if self.sqlite:
            sa.event.listen(app.engine, "checkout", self._pages)

    def _pages(self, dbapi_connection: Any, _record: object, _proxy: object) -> None:
        cursor = dbapi_connection.cursor()
        pages = cursor.execute("PRAGMA page_count").fetchone()[0] if self.full else 1_073_741_823
        cursor.execute(f"PRAGMA max_page_count = {pages}")
        cursor.close()

    def on(self) -> None:
        self.full = True
        if self.sqlite:
            return
        with self.app.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "CREATE OR REPLACE FUNCTION rx_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    f"RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = '{self.state}'; "
                    "END $$"
                )
            )
            for table in self.tables:
                conn.execute(
                    sa.text(
                        f"CREATE TRIGGER rx_full BEFORE INSERT OR UPDATE ON {table} "
                        "FOR EACH ROW EXECUTE FUNCTION rx_full()"
                    )
                )

    def off(self) -> None:
        self.full = False
        if self.sqlite:
            return
        with self.app.engine.begin() as conn:
            for table in self.tables:
                conn.execute(sa.text(f"DROP TRIGGER rx_full ON {table}"))


@contextmanager
def limited_role(admin_url: str) -> Iterator[tuple[str, Callable[[int], None]]]:
    """A URL on the database of ``admin_url`` as a role of its own that owns it (not a
    superuser: no ``CONNECTION LIMIT`` binds those), and ``limit(n)`` setting that
    role's limit (-1: none; 0: every new connection of the role is refused, 53300).
    At the end the role's connections are closed and its limit lifted."""
    admin = sa.create_engine(admin_url, poolclass=NullPool)
    role = f"rx_{uuid.uuid4().hex[:12]}"
    url = sa.make_url(admin_url)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(sa.text(f'ALTER DATABASE "{url.database}" OWNER TO {role}'))
        conn.execute(sa.text(f"GRANT ALL ON SCHEMA public TO {role}"))

    def limit(n: int) -> None:
        with admin.begin() as conn:
            conn.execute(sa.text(f"ALTER ROLE {role} CONNECTION LIMIT {n}"))

    try:
        yield url.set(username=role, password=None).render_as_string(hide_password=False), limit
    finally:
        limit(-1)
        close_connections(admin_url, role)
        admin.dispose()


def close_connections(admin_url: str, role: str) -> int:
    """Terminate every backend of ``role`` (as an operator would, or a failover): how many."""
    admin = sa.create_engine(admin_url, poolclass=NullPool)
    try:
        with admin.begin() as conn:
            killed = conn.scalar(
                sa.text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = :r"),
                {"r": role},
            )
        return int(killed or 0)
    finally:
        admin.dispose()
