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

The store of such a segment (its run's one UPDATE) was then a resume's only round trip
of its own, and with SQLAlchemy's work per statement about half of its wall time
(bench/workflows.py).  A loop that claimed its runs up front (the due runs, locked) may
also *hold* those stores (``hold_stores``): each is kept with the segment, dropped if
the segment fails, and the loop sends all of a batch's at its end, before the COMMIT,
in one ``executemany`` (one round trip: psycopg pipelines it, sqlite3 loops in C).  The
run's row and the segment's work still commit together; only the UPDATE is sent later
in the same transaction.  A held store the database refuses raises :class:`Redo` as
one sent at once would on PostgreSQL, on both databases: the batch is done again with
a savepoint per segment, and the refused run fails alone.
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

    def __init__(self, hold_stores: bool) -> None:
        self._conn: Connection | None = None
        self._armed = False
        self._taken = False
        self._hold_stores = hold_stores
        #: The held store of the segment running (kept by :meth:`release`).
        self._held: dict[str, Any] | None = None
        #: The held stores of the segments that succeeded, for :meth:`take_held`.
        self._kept: list[dict[str, Any]] = []

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

    def may_hold(self) -> bool:
        """Whether the running segment's store (one statement) may be held: the loop
        allowed it, and the segment sent nothing, so that its store is all it writes."""
        return self._hold_stores and not self._taken

    def hold(self, params: dict[str, Any]) -> None:
        """Hold the running segment's store: its run's UPDATE with ``params``."""
        self._held = params

    def take_held(self) -> list[dict[str, Any]]:
        """The held stores of the segments that succeeded so far, for the loop to send."""
        kept, self._kept = self._kept, []
        return kept

    def _before(self, conn: Connection, cursor: Any, *_: object) -> None:
        if self._armed:
            self._armed = False
            cursor.execute(f"SAVEPOINT {_NAME}")
            self._taken = True

    def release(self) -> None:
        """The segment succeeded: its work stays in the transaction."""
        self._armed = False
        if self._held is not None:
            self._kept.append(self._held)
            self._held = None
        if self._taken and self._conn is not None:
            self._conn.exec_driver_sql(f"RELEASE SAVEPOINT {_NAME}")

    def undo(self, session: Session) -> None:
        """The segment failed: undo what it sent (nothing, if it sent nothing).  Raises
        :class:`Redo` if its refused store left the transaction aborted (PostgreSQL)."""
        self._armed = False
        self._held = None  # its store, if held, is never sent
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


def allow_lazy(session: Session, *, hold_stores: bool = False) -> SegmentSavepoint:
    """Let the segments run in ``session``'s transaction take their savepoints lazily;
    the caller handles :class:`Redo`.  ``hold_stores``: the caller also sends the held
    stores (:meth:`SegmentSavepoint.take_held`) before it commits."""
    guard = session.info[_KEY] = SegmentSavepoint(hold_stores)
    return guard


def lazy_savepoint(session: Session) -> SegmentSavepoint | None:
    """The lazy savepoint of ``session``'s segments, if its caller allowed one."""
    guard: SegmentSavepoint | None = session.info.get(_KEY)
    return guard
