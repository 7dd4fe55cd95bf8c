"""Which database errors a worker outlives: the same pass, tried again a little later,
can succeed.  Anything else (no such table, a bad password) stops the worker with the
error, for its supervisor and its operator to see."""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

__all__ = ["lost_connection", "transient"]

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
