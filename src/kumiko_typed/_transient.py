"""Which database errors a worker outlives: the same pass, tried again a little later,
can succeed.  Anything else (no such table, a bad password) stops the worker with the
error, for its supervisor and its operator to see."""

from __future__ import annotations

from typing import Final

from sqlalchemy.exc import DBAPIError

__all__ = ["transient"]

#: PostgreSQL aborted the transaction so that another could go on (serialization
#: failure, deadlock detected) or gave up waiting for a lock (lock_timeout).  Retrying
#: is the documented remedy.
_RETRY_STATES: Final = frozenset({"40001", "40P01", "55P03"})


def transient(exc: DBAPIError) -> bool:
    """The connection was lost (a restarted or failed-over server, a killed backend), the
    transaction lost a deadlock or serialization conflict or waited too long for a lock,
    or SQLite stayed locked."""
    if exc.connection_invalidated:
        return True
    if getattr(exc.orig, "sqlstate", None) in _RETRY_STATES:
        return True
    return "database is locked" in str(exc.orig)
