"""Read-only transactions for queries: the database refuses every write, not only the
builder that offers no write step (a resolver still holds ``c.db``).

PostgreSQL: ``SET TRANSACTION READ ONLY`` as the transaction's first statement.  SQLite
has no read-only transaction, so the connection is made ``PRAGMA query_only`` for the
transaction (and a deferred ``BEGIN``: a query must not take the write lock that a
write's ``BEGIN IMMEDIATE`` takes); the next transaction that is not a query resets the
pragma as it begins.  Either way a query is rolled back, never committed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from sqlalchemy.exc import DBAPIError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

__all__ = ["READ_ONLY_OPTION", "begin_read_only", "pending_changes", "reading", "write_refused"]

#: The execution option that marks a connection's transaction read-only (``_engine``).
READ_ONLY_OPTION: Final = "kumiko_read_only"

#: PostgreSQL's read_only_sql_transaction; SQLite's SQLITE_READONLY result code.
_PG_READ_ONLY: Final = "25006"
_SQLITE_READONLY: Final = 8


def begin_read_only(session: Session) -> None:
    """Begin the session's transaction (it must have none yet) as read-only."""
    connection = session.connection(execution_options={READ_ONLY_OPTION: True})
    if connection.dialect.name != "sqlite":  # SQLite's is done as it begins (``_engine``)
        connection.exec_driver_sql("SET TRANSACTION READ ONLY")


@contextmanager
def reading(sessions: Callable[[], Session]) -> Iterator[Session]:
    """A new session of ``sessions`` whose transaction begins read-only: the App's views
    (a run, the run and outbox listings, a result, a stream, the pre-deploy check), which
    on SQLite must neither take nor wait for the write lock a worker's segment holds."""
    with sessions() as session:
        begin_read_only(session)
        yield session


def write_refused(exc: BaseException) -> bool:
    """Is ``exc`` the database refusing a write in a read-only transaction?"""
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    return (
        getattr(orig, "sqlstate", None) == _PG_READ_ONLY or getattr(orig, "sqlite_errorcode", None) == _SQLITE_READONLY
    )


def pending_changes(session: Session) -> bool:
    """ORM objects added, changed or deleted but not flushed: a write that a rollback
    would drop without a word."""
    return bool(session.new or session.dirty or session.deleted)
