"""Which database errors a worker outlives: the same pass, tried again a little later,
can succeed.  Anything else (no such table, a bad password) stops the worker with the
error, for its supervisor and its operator to see.

And which lost connections cost a transaction nothing: :func:`note_lost` counts, for the
transaction runner (``_interpreter.once_more_if_lost``), whether a connection was lost
while a statement ran — before any COMMIT, so nothing was committed — or at the COMMIT
(or while connecting), when whether it committed cannot be known."""

from __future__ import annotations

import re
from typing import Any, Final

from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

__all__ = [
    "LOST",
    "exhausted",
    "lost_connection",
    "lost_in_statements",
    "note_lost",
    "sqlite_exhausted",
    "transient",
    "unreachable",
]


class _Lost:
    """Connections lost so far, counted by :func:`note_lost`: ``(while a statement ran,
    elsewhere — at a COMMIT, or while connecting)``.  A new tuple per loss, so a runner
    tells that none happened during its attempt by identity: one read before, one after.

    One count for the process, not per thread (a ``threading.local`` or a context
    variable per attempt cost a dispatch that sends no SQL a tenth more): another
    thread's loss during an attempt can only make a failed attempt run once more, which
    committed nothing, or keep it from running again, as before."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts = (0, 0)


LOST: Final = _Lost()


def note_lost(context: ExceptionContext) -> None:
    """``handle_error`` listener of every App engine (called only for a failed statement,
    commit or connect): count a lost connection.  A COMMIT (or a connect) has no
    statement: SQLAlchemy passes ``None``."""
    if context.is_disconnect:
        in_statement, elsewhere = LOST.counts
        if context.statement is None:
            LOST.counts = (in_statement, elsewhere + 1)
        else:
            LOST.counts = (in_statement + 1, elsewhere)


def lost_in_statements(before: tuple[int, int]) -> bool:
    """Whether connections were lost since the counts were ``before``, all of them while
    statements ran: no COMMIT that was sent can have been lost."""
    in_statement, elsewhere = LOST.counts
    return in_statement != before[0] and elsewhere == before[1]


#: PostgreSQL aborted the transaction so that another could go on (serialization
#: failure, deadlock detected), gave up waiting for a lock (lock_timeout), or cancelled
#: a statement that ran past the operator's statement_timeout (or was cancelled by an
#: operator: query_canceled).  Retrying is the documented remedy of the first three; a
#: statement timeout is the server busy past the wait it allows, as a lock timeout is.
_RETRY_STATES: Final = frozenset({"40001", "40P01", "55P03", "57014"})


#: SQLite's result codes for a write the disk did not take: ``SQLITE_FULL`` (13: a full disk,
#: ``max_page_count`` reached) and ``SQLITE_IOERR_WRITE`` (778, "disk I/O error": a disk
#: quota or a file size limit reached, ``EDQUOT``/``EFBIG``, which SQLite does not call
#: full; or a disk failing a write).  Its ``SQLITE_NOMEM`` reaches Python as a
#: ``MemoryError``, no database error.
_SQLITE_UNWRITTEN: Final = frozenset({13, 778})


#: The server's words for ``too_many_connections`` (53300) when it refuses a new
#: connection, which psycopg raises with no SQLSTATE (libpq's connect error carries
#: only its text, and libpq offers no other way to the code): "sorry, too many clients
#: already", "too many connections for role (database) ...", "remaining connection slots
#: are reserved for ...".  English only: a server whose ``lc_messages`` says them in
#: another language refuses as any server that answers does (:func:`unreachable`).
_NO_SLOT: Final = ("too many clients", "too many connections for", "connection slots are reserved")


def exhausted(exc: DBAPIError) -> bool:
    """The database ran out of a resource: PostgreSQL's SQLSTATE class 53 (insufficient
    resources: disk full, out of memory, too many connections, a configuration limit)
    or SQLite's full disk.  Freed by the operator, the same call succeeds: an
    outage, as a lost connection is, not the program's bug nor its input's fault."""
    state = getattr(exc.orig, "sqlstate", None)
    if isinstance(state, str):
        return state.startswith("53")
    if sqlite_exhausted(exc.orig):
        return True
    text = str(exc.orig)
    return text.startswith("connection failed:") and any(words in text for words in _NO_SLOT)


#: What a server that answers a new connection says when it cannot take one for now: it
#: is starting up, shutting down or recovering (``cannot_connect_now``, 57P03: a restart
#: or a failover under way).  Any other answer (a wrong password, no such database) is
#: the set-up's to fix, not an outage.  In English only, as :data:`_NO_SLOT`.
_NOT_NOW: Final = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "the database system is not accepting connections",
)


#: libpq's own words when the server answered and the set-up cannot go on (no ``FATAL:``
#: from the server then): a password the server asks for and the URL does not give
#: (``fe_sendauth: no password supplied``), SSL it wants and the server has not or whose
#: certificate fails, channel binding or an authentication method ``require_auth`` refuses.
_SET_UP: Final = ("fe_sendauth:", "SSL was required", "certificate", "channel binding", "authentication method")


#: How libpq writes what a server said: its severity, a colon and two blanks
#: (``FATAL:  ``).  The severity is in the server's ``lc_messages`` (``ВАЖНО``,
#: ``致命错误``: matching the English ``FATAL:`` took every refusal of such a server for
#: one that was not there), the two blanks are libpq's in every language; libpq's own
#: words for a connect that failed before a server spoke never have them.
_SERVER_SAID: Final = re.compile(r"(?:^|\s)[^\s:]+:  \S")


def _server_answered(error: BaseException | None) -> bool:
    """Whether a server answered the failed connect: it asked for a password (libpq's
    flags, words of no language), or libpq quotes what it said."""
    pgconn = getattr(error, "pgconn", None)
    if pgconn is not None and (pgconn.needs_password or pgconn.used_password):
        return True
    return _SERVER_SAID.search(str(error)) is not None


def unreachable(exc: DBAPIError) -> bool:
    """A new connection to PostgreSQL failed without the server refusing it: the server
    is down or restarting, the host does not answer (no server spoke) or its name cannot
    be resolved now, the connect timed out, or the server answered that it takes none
    for now (:data:`_NOT_NOW`); not libpq's own refusal of the set-up (:data:`_SET_UP`).
    psycopg raises all of these with no SQLSTATE, as its connect error is libpq's text
    (behind psycopg's own words for a failed connect or a name it could not resolve, and
    its ``ConnectionTimeout``: psycopg is optional, so the class is told by its name)."""
    if type(exc.orig).__name__ == "ConnectionTimeout":
        return True
    text = str(exc.orig)
    if text.startswith("failed to resolve host"):
        return True
    if not text.startswith("connection failed:") or any(words in text for words in _SET_UP):
        return False
    return not _server_answered(exc.orig) or any(words in text for words in _NOT_NOW)


def sqlite_exhausted(error: BaseException | None) -> bool:
    """Whether a pysqlite error is a write the disk did not take (:data:`_SQLITE_UNWRITTEN`)."""
    return getattr(error, "sqlite_errorcode", None) in _SQLITE_UNWRITTEN


def transient(exc: DBAPIError) -> bool:
    """The connection was lost (a restarted or failed-over server, a killed backend), the
    transaction lost a deadlock or serialization conflict, waited too long for a lock or
    ran a statement past the statement timeout, SQLite stayed locked, the database ran
    out of disk, memory or connections (:func:`exhausted`), or a new connection found
    the server unreachable (:func:`unreachable`)."""
    if exc.connection_invalidated or exhausted(exc) or unreachable(exc):
        return True
    if getattr(exc.orig, "sqlstate", None) in _RETRY_STATES:
        return True
    return "database is locked" in str(exc.orig)  # SQLite's words, the same in every locale


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
