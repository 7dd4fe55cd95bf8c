"""A database error that a step's resolver caught and went on from (docs/steps.md, "A
database error a resolver catches"; docs/design-decisions.md says why no savepoint).

A resolver's ``c.db`` statement runs in the program's transaction.  When it fails and the
resolver catches the error and goes on, SQLite has undone that statement alone and the
transaction goes on; PostgreSQL has aborted the transaction: every later statement raised
``InFailedSqlTransaction``, and with none the COMMIT silently rolled everything back while
the caller was told ``Ok``.  Now the step fails on both databases
(:class:`CaughtDatabaseError`, made a ``Failure`` by the interpreter), and nothing is
written.

What counts is decided where resolvers are called, not by guessing whose code sent a
statement: the generated lines of a block (``compute``, ``return_``) and
:func:`~kumiko_typed._steps._base.called` (every other resolver) read :data:`SEEN` before
the call and compare after it; only when a statement failed meanwhile (anywhere in the
process) do they look closer (:func:`caught`, :func:`escaped`).  A failed statement is
noted by :func:`noted` (``handle_error``: nothing on the way of a statement that succeeds)
in its thread, with its connection, transaction and innermost savepoint; a rollback of
that savepoint or one around it forgets it (:func:`undone`).  A resolver then swallowed
one if a note made during its call is still held, on its run's own connection, in the
transaction it failed in.  The framework's own statements between resolver calls (an
append's conflict, a retried program's) are never made during one; a dispatch from inside
a resolver runs on a connection of its own.
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
from types import CodeType, FrameType
from typing import Any, Final

from sqlalchemy import Connection
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ._errors import CaughtDatabaseError

__all__ = ["BLOCK_FILES", "SEEN", "caught", "escaped", "noted", "undone"]

logger = logging.getLogger("kumiko_typed")


class _Seen:
    """The number of the last failed statement noted, in any thread: read around every
    resolver call (an attribute of a slotted object is the cheapest read there is)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


SEEN: Final = _Seen()
#: Each note's number, unique: a resolver's before and after differ whenever one was made
#: meanwhile, whichever thread stored its number last.
_NUMBERS: Final = itertools.count(1)
_SAVEPOINT: Final = "sa_savepoint_"
#: How the file of a block's generated code is named (``_steps._block``) begins.
BLOCK_FILES: Final = "<kumiko-typed: a block of "


class _Noted:
    __slots__ = ("at", "conn", "error", "n", "root", "savepoint")

    def __init__(
        self, n: int, conn: Connection, root: object, savepoint: int, error: DBAPIError, at: tuple[CodeType, int] | None
    ) -> None:
        self.n = n
        self.conn = conn
        #: The connection's transaction it failed in: one ended since undid it (or lost it).
        self.root = root
        #: The number of the innermost savepoint open when it failed (0: none).
        self.savepoint = savepoint
        self.error = error
        #: The innermost block's generated code and the line it was on (its step's).
        self.at = at

    def raised(self) -> set[int]:
        """The ids of what the statement raised: SQLAlchemy's error, or (replaced by a
        ``handle_error`` listener) the driver's it was raised from."""
        return {id(self.error), id(self.error.orig)}

    def held(self) -> bool:
        return self.root is not None and self.conn.get_transaction() is self.root


class _Held(threading.local):
    """This thread's notes (a connection serves one thread at a time; its resolver runs
    in the thread that sent its statements)."""

    def __init__(self) -> None:
        self.notes: list[_Noted] = []


_HELD: Final = _Held()


def noted(context: ExceptionContext) -> None:
    """``handle_error`` listener of every App engine: note a failed statement.  It never
    raises: an exception here would replace the statement's own error."""
    conn = context.connection
    error = context.sqlalchemy_exception
    if conn is None or not isinstance(error, DBAPIError):
        return  # not sent (a value that could not be bound), or no connection: nothing aborted
    try:
        nested = conn.get_nested_transaction()
        savepoint = _number(nested._savepoint) if nested is not None else 0
        notes = _HELD.notes
        notes[:] = [note for note in notes if note.held()]  # those of ended transactions
        n = next(_NUMBERS)
        at = _block_line(sys._getframe(1))  # the failure's path only: a walk of the stack
        notes.append(_Noted(n, conn, conn.get_transaction(), savepoint, error, at))
        SEEN.n = n
    except Exception:
        logger.warning("a failed statement could not be noted for its resolver", exc_info=True)


def undone(conn: Connection, name: str, _context: object) -> None:
    """``rollback_savepoint`` listener: the failed statements noted while the savepoint
    ``name`` was open on ``conn`` are undone with it (PostgreSQL's transaction goes on)."""
    notes = _HELD.notes
    if notes:
        number = _number(name)
        if number:
            notes[:] = [note for note in notes if not (note.conn is conn and note.savepoint >= number)]


def caught(run: object, before: int) -> None:
    """After a resolver of ``run`` returned, a statement having failed somewhere since
    :data:`SEEN` was ``before``: raise :class:`CaughtDatabaseError` if one of the
    resolver's own is still held."""
    swallowed = _swallowed(run, before, None)
    if swallowed is not None:
        raise swallowed


def escaped(run: object, before: int, exc: BaseException) -> CaughtDatabaseError | None:
    """``exc`` left a resolver of ``run`` during which a statement failed somewhere
    (:data:`SEEN` was ``before``): the :class:`CaughtDatabaseError` to raise instead if the
    resolver had caught an earlier error and gone on (on PostgreSQL, ``exc`` is then the
    next statement's ``InFailedSqlTransaction``), else ``None``: ``exc`` is the step's."""
    if isinstance(exc, CaughtDatabaseError):
        return None  # already the verdict of a resolver inside this one
    return _swallowed(run, before, exc)


def _swallowed(run: object, before: int, exc: BaseException | None) -> CaughtDatabaseError | None:
    session = getattr(run, "db", None)
    notes = _HELD.notes
    if not isinstance(session, Session) or not notes:
        return None
    mine = _connections(session)
    during = [note for note in notes if note.n > before and note.conn in mine and note.held()]
    if not during:
        return None
    first = during[0]
    # An error that leaves the resolver (or one raised from it or while handling it) is
    # the step's own, unless the resolver sent another statement after it: then it went
    # on (on PostgreSQL the next statement failed too, with InFailedSqlTransaction).
    if len(during) == 1 and exc is not None and not _chain(exc).isdisjoint(first.raised()):
        return None
    return CaughtDatabaseError(first.error, first.at)


def _block_line(frame: FrameType | None) -> tuple[CodeType, int] | None:
    """The code and line of the innermost frame running a block's generated ``run`` (the
    line of the step, or the fused resolver, that was running): its file name is the
    blocks', and its globals' ``block`` is the block whose code it is."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(BLOCK_FILES) and getattr(frame.f_globals.get("block"), "code", None) is code:
            return code, frame.f_lineno
        frame = frame.f_back
    return None


def _connections(session: Session) -> set[Connection]:
    """The connections ``session``'s transactions run on: the dispatch's own, which it is
    bound to (``_connection.Direct``), or those its transactions took (SQLAlchemy's
    bookkeeping, pinned to 2.1 as in ``_connection``)."""
    found: set[Connection] = set()
    if isinstance(session.bind, Connection):
        found.add(session.bind)
    transaction: Any = session._transaction
    while transaction is not None:
        found.update(entry[0] for entry in transaction._connections.values())
        transaction = transaction.parent
    return found


def _chain(exc: BaseException | None) -> set[int]:
    """The ids of ``exc`` and of the exceptions it was raised from or while handling."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        at = todo.pop()
        if at is not None and id(at) not in seen:
            seen.add(id(at))
            todo += (at.__cause__, at.__context__)
    return seen


def _number(name: str) -> int:
    """The number of a savepoint SQLAlchemy named (``sa_savepoint_3``, counted per
    connection, so an inner savepoint has a higher one); 0 for another."""
    number = name[len(_SAVEPOINT) :]
    return int(number) if name.startswith(_SAVEPOINT) and number.isdigit() else 0
