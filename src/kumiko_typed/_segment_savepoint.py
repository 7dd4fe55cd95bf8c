"""A worker's segment savepoint, taken only once the segment sends a statement.

A worker runs many segments in one transaction, each in a savepoint so that a failed one
is undone alone.  Most segments send nothing before their store (a wait, a compute step,
an HTTP call), and for them the SAVEPOINT and its RELEASE were two of a resume's three
round trips and a third of its CPU.  So the savepoint is taken just before the segment's
first statement (a hook on the session's connection), and the store of a segment that
sent nothing goes without one: on SQLite a refused statement changes nothing; on
PostgreSQL it aborts the whole transaction, and :class:`Redo` asks the worker's loop to
roll it back and do that transaction's work again with a savepoint per segment from its
start (the other segments of it are redone, as after a crash).

Only loops that handle :class:`Redo` allow this (:func:`allow_lazy`); anywhere else a
segment takes its savepoint at once, as before.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Connection, event
from sqlalchemy.orm import Session

__all__ = ["Redo", "SegmentSavepoint", "allow_lazy", "lazy_savepoint"]

_KEY: Final = "kumiko_segment_savepoint"
_NAME: Final = "kumiko_segment"


class Redo(Exception):
    """A segment's store was refused outside a savepoint and PostgreSQL aborted the
    transaction: roll it back and do its work again, each segment in a savepoint."""


class SegmentSavepoint:
    """The savepoint of the segment running in a session (one segment at a time)."""

    def __init__(self) -> None:
        self._conn: Connection | None = None
        self._armed = False
        self._taken = False

    def arm(self, session: Session) -> None:
        """A segment begins: the next statement sent takes the savepoint first."""
        conn = session.connection()
        if conn is not self._conn:  # once per connection: the hook lives as long as it
            event.listen(conn, "before_cursor_execute", self._before)
            self._conn = conn
        self._armed, self._taken = True, False

    def disarm(self) -> None:
        """The segment's store, if it sent nothing before, goes without a savepoint."""
        self._armed = False

    def _before(self, conn: Connection, cursor: Any, *_: object) -> None:
        if self._armed:
            self._armed = False
            cursor.execute(f"SAVEPOINT {_NAME}")
            self._taken = True

    def release(self) -> None:
        """The segment succeeded: its work stays in the transaction."""
        self._armed = False
        if self._taken and self._conn is not None:
            self._conn.exec_driver_sql(f"RELEASE SAVEPOINT {_NAME}")

    def undo(self, session: Session) -> None:
        """The segment failed: undo what it sent (nothing, if it sent nothing).  Raises
        :class:`Redo` if its refused store left the transaction aborted (PostgreSQL)."""
        self._armed = False
        # Whether it sent anything or not, the ORM may hold what its steps added or
        # changed but never flushed: the failure's store would flush it into the batch.
        # And after a rollback to the savepoint, what it loaded is stale.
        session.expunge_all()
        if self._taken and self._conn is not None:
            self._conn.exec_driver_sql(f"ROLLBACK TO SAVEPOINT {_NAME}")
            self._conn.exec_driver_sql(f"RELEASE SAVEPOINT {_NAME}")
        elif _aborted(session):
            raise Redo


def _aborted(session: Session) -> bool:
    """Whether the database refuses every statement until the transaction rolls back."""
    conn = session.connection()
    if conn.dialect.name != "postgresql":
        return False  # SQLite undoes a failed statement alone
    from psycopg.pq import TransactionStatus  # the PostgreSQL extra

    driver: Any = conn.connection.driver_connection
    return bool(driver.info.transaction_status == TransactionStatus.INERROR)


def allow_lazy(session: Session) -> None:
    """Let the segments run in ``session``'s transaction take their savepoints lazily;
    the caller handles :class:`Redo`."""
    session.info[_KEY] = SegmentSavepoint()


def lazy_savepoint(session: Session) -> SegmentSavepoint | None:
    """The lazy savepoint of ``session``'s segments, if its caller allowed one."""
    guard: SegmentSavepoint | None = session.info.get(_KEY)
    return guard
