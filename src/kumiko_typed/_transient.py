"""Which database errors a worker outlives: the same pass, tried again a little later,
can succeed.  Anything else (no such table, a bad password) stops the worker with the
error, for its supervisor and its operator to see.

And which lost connections cost a transaction nothing: :func:`note_lost` marks, for the
transaction runner (``_interpreter.once_more_if_lost``), whether a connection was lost
while a statement ran — before any COMMIT, so nothing was committed — or at the COMMIT
(or while connecting), when whether it committed cannot be known."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Final

from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

__all__ = ["LOST", "lost_connection", "lost_in_statements", "note_lost", "transient"]

#: The attempt the current thread (or task) runs: one entry per connection it lost,
#: ``True`` if lost in a statement; ``None`` outside a runner's attempt (a worker's pass).
LOST: ContextVar[list[bool] | None] = ContextVar("kumiko_lost", default=None)


def note_lost(context: ExceptionContext) -> None:
    """``handle_error`` listener of every App engine (called only for a failed statement,
    commit or connect): note a lost connection in the current attempt.  A COMMIT (or a
    connect) has no statement: SQLAlchemy passes ``None``."""
    if context.is_disconnect:
        attempt = LOST.get()
        if attempt is not None:
            attempt.append(context.statement is not None)


def lost_in_statements(attempt: list[bool]) -> bool:
    """Whether ``attempt`` lost its connection, and only while statements ran: it sent no
    COMMIT that might have committed."""
    return bool(attempt) and all(attempt)


#: PostgreSQL aborted the transaction so that another could go on (serialization
#: failure, deadlock detected), gave up waiting for a lock (lock_timeout), or cancelled
#: a statement that ran past the operator's statement_timeout (or was cancelled by an
#: operator: query_canceled).  Retrying is the documented remedy of the first three; a
#: statement timeout is the server busy past the wait it allows, as a lock timeout is.
_RETRY_STATES: Final = frozenset({"40001", "40P01", "55P03", "57014"})


def transient(exc: DBAPIError) -> bool:
    """The connection was lost (a restarted or failed-over server, a killed backend), the
    transaction lost a deadlock or serialization conflict, waited too long for a lock or
    ran a statement past the statement timeout, or SQLite stayed locked."""
    if exc.connection_invalidated:
        return True
    if getattr(exc.orig, "sqlstate", None) in _RETRY_STATES:
        return True
    return "database is locked" in str(exc.orig)


def lost_connection(session: Session) -> OperationalError | None:
    """The error that stops a worker's pass (a transient one: the pass is done again) if
    the session's transaction lost its connection: a step's statement met a killed
    backend, which the interpreter made the segment's ``unavailable``.  Nothing more
    can be sent in that transaction, not even the rollback to the segment's savepoint
    (SQLAlchemy raises ``PendingRollbackError``, which stopped the worker)."""
    transaction: Any = session.get_transaction()
    if transaction is None or not any(held[0].invalidated for held in transaction._connections.values()):
        return None
    reason = ConnectionError("the connection to the database was lost in a workflow segment")
    return OperationalError(None, None, reason, connection_invalidated=True)
