"""A database error that a step's resolver caught and went on from (docs/steps.md,
"A database error a resolver catches"; docs/design-decisions.md says why no savepoint).

A resolver's ``c.db`` statement runs in the program's transaction.  When it fails and the
resolver catches the error and goes on, SQLite has undone that statement alone and the
transaction goes on; PostgreSQL has aborted the transaction: every later statement raised
``InFailedSqlTransaction`` (an ``internal_error`` naming whichever step sent the next
one), and with none the COMMIT silently rolled everything back while the caller was
told ``Ok``.  So the two databases answered differently, one of them wrongly.

Now both answer alike: the program fails with ``internal_error`` naming the step whose
resolver caught the error, and nothing is written.  The error is noted when it happens
(``handle_error``, called only for a failed statement: nothing on the way of a statement
that succeeds) if a resolver's code is on the stack under a step; it is forgotten when it
leaves the resolver after all (the step crashes with it, or with an error raised from it), or
when a savepoint that was open then is rolled back (``with c.db.begin_nested():`` around the
statement, a retry's attempt, the framework's own savepoints), and the program's end
turns one still noted into its Failure, whatever the steps after it did.  A statement
the framework sends and handles itself has no resolver's frame above it: not noted.
"""

from __future__ import annotations

import logging
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, Final
from uuid import uuid4

from sqlalchemy import Connection
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError

from ._results import Failure, fail
from ._transient import transient

if TYPE_CHECKING:
    from ._steps._block import Block

__all__ = ["KEY", "escaped", "noted", "swallowed_failure", "undone"]

logger = logging.getLogger("kumiko_typed")

#: Where a noted error is kept: the session's ``info`` (read at the program's end) and the
#: connection's (read when a savepoint is rolled back).
KEY: Final = "kumiko_swallowed"
_LIBRARIES: Final = frozenset({"kumiko_typed", "sqlalchemy", "psycopg", "psycopg_pool"})
_GENERATED: Final = "<kumiko-typed: a block"


class Swallowed:
    """A failed statement of a resolver, until its savepoint is rolled back."""

    __slots__ = ("exc", "holders", "levels", "run", "seq")

    def __init__(self, exc: BaseException, levels: list[tuple[Block, int]], run: object, seq: int) -> None:
        self.exc = exc
        #: The steps it failed in, outermost first: each block and the index of its step.
        self.levels = levels
        self.run = run
        #: The number of the innermost savepoint open when it failed (0: none).
        self.seq = seq
        self.holders: list[dict[Any, Any]] = []

    def forget(self) -> None:
        for holder in self.holders:
            if holder.get(KEY) is self:
                del holder[KEY]

    def where(self) -> tuple[str, str]:
        """The step's path (``2/on_true/0``; a loop's iteration is not known) and its description."""
        parts: list[str] = []
        for n, (block, i) in enumerate(self.levels):
            parts.append(str(i))
            if n + 1 < len(self.levels):
                inner = self.levels[n + 1][0]
                parts += [label for label, child in block.steps[i].children() if child is inner][:1]
        block, i = self.levels[-1]
        return "/".join(parts), block.steps[i].describe()


def noted(context: ExceptionContext) -> None:
    """``handle_error`` listener of every App engine: note a failed statement that a
    resolver sent (its frame between the statement and a step), the first per run.  It
    never raises: an exception here would replace the statement's own error."""
    try:
        _note(context)
    except Exception:
        logger.warning("a failed statement could not be looked at for a resolver's catch", exc_info=True)


def _note(context: ExceptionContext) -> None:
    conn = context.connection
    exc = context.sqlalchemy_exception
    if conn is None or not isinstance(exc, DBAPIError):
        return
    levels, run, by_resolver = _on_stack(sys._getframe(1))
    session = getattr(run, "db", None)
    if not levels or not by_resolver or session is None or not _runs_on(session, conn):
        return
    held = session.info.get(KEY)
    if held is not None and held.run is run:
        return  # PostgreSQL refuses each later statement too: the first error is the one
    nested = conn.get_nested_transaction()
    seq = _seq(getattr(nested, "_savepoint", "")) if nested is not None else 0
    noting = Swallowed(exc, levels, run, seq)
    session.info[KEY] = noting
    noting.holders = [session.info]
    if not (conn.invalidated or conn.closed):  # a lost connection's info would reconnect
        noting.holders.append(conn.info)
        conn.info[KEY] = noting


def undone(conn: Connection, name: str, context: object) -> None:
    """``rollback_savepoint`` listener: a savepoint open when the noted statement failed
    was rolled back, and the failed statement with it."""
    if conn.invalidated or conn.closed:
        return  # its info would reconnect (PendingRollbackError); the lost transaction fails anyway
    held = conn.info.get(KEY)
    if held is not None and 0 < _seq(name) <= held.seq:
        held.forget()


def escaped(info: dict[Any, Any], exc: BaseException) -> None:
    """A step crashed with ``exc``: if the noted error is ``exc`` or what it was raised
    from, it left the resolver (it was not caught and gone on from): forgotten."""
    held: Swallowed | None = info.get(KEY)
    seen: set[int] = set()
    cause: BaseException | None = exc
    while held is not None and cause is not None and id(cause) not in seen:
        if cause is held.exc:
            held.forget()
            return
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__


def swallowed_failure(info: dict[Any, Any], run: object, who: str) -> Failure | None:
    """The Failure of a program whose resolver caught a database error and went on (taken
    from the session's ``info``), or ``None`` if none of this run's did."""
    held: Swallowed | None = info.get(KEY)
    if held is None or held.run is not run:
        return None
    held.forget()
    path, step = held.where()
    error_id = uuid4().hex
    details = {"path": path, "step": step, "error_id": error_id}
    name = type(held.exc).__name__
    # The database's text may quote the statement and its values: the log's, not the message's.
    logger.error(
        "%s: step %s %s: its resolver caught %s and went on (error id %s)",
        *(who, path, step, name, error_id),
        exc_info=held.exc,
    )
    if isinstance(held.exc, DBAPIError) and transient(held.exc):
        message = f"step {path} {step}: the database is busy or unreachable, try again (error id {error_id})"
        return fail("unavailable", message, details)
    message = (
        f"step {path} {step}: its resolver caught a database error from a statement it sent "
        "through c.db and went on, so nothing is written (on PostgreSQL the error ends the transaction); "
        "let the error leave the resolver, or send that statement in a savepoint of its own: "
        f"with c.db.begin_nested(): ... (error id {error_id})"
    )
    return fail("internal_error", message, details)


def _on_stack(frame: FrameType | None) -> tuple[list[tuple[Block, int]], object, bool]:
    """From the failed statement outwards: the steps running (outermost first), the run
    of the innermost, and whether a resolver's frame is above the innermost step."""
    from ._steps._block import _walk

    levels: list[tuple[Block, int]] = []
    run: object = None
    by_resolver = False
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(_GENERATED):
            # A line of no step's (a resumed or traced run's call of _walk): _walk's frame has it.
            block = frame.f_globals["block"]
            index = block.lines.get(frame.f_lineno)
            level = None if index is None else (block, index)
        elif code is _walk.__code__:
            level = (frame.f_locals["block"], frame.f_locals["i"])
        else:
            level = None
            if not levels and _users(frame):
                by_resolver = True
        if level is not None:
            if levels and frame.f_locals.get("run") is not run:
                break  # the program that called the innermost's (call_feature): not its steps
            if not levels:
                run = frame.f_locals.get("run")
            levels.insert(0, level)
        frame = frame.f_back
    return levels, run, by_resolver


def _runs_on(session: Any, conn: Connection) -> bool:
    """Whether ``conn`` is the connection of ``session``'s transaction: the run's own, not
    another session's (a dispatch from inside a resolver has one of its own).  A dispatch's
    session is bound to its connection (``_connection.Direct``); another's transaction
    holds it (SQLAlchemy's bookkeeping, pinned to 2.1 as in ``_connection``)."""
    if isinstance(session.bind, Connection):
        return session.bind is conn
    transaction = session.get_transaction()
    held = getattr(transaction, "_connections", {}) if transaction is not None else {}
    return any(entry[0] is conn for entry in held.values())


def _users(frame: FrameType) -> bool:
    """Whether ``frame`` runs the application's code: no library's, nor the standard one's."""
    top = str(frame.f_globals.get("__name__", "")).partition(".")[0]
    return top not in _LIBRARIES and top not in sys.stdlib_module_names


def _seq(name: str) -> int:
    """The number of a savepoint SQLAlchemy named (``sa_savepoint_3``); 0 for another."""
    number = name.rpartition("_")[2]
    return int(number) if name.startswith("sa_savepoint_") and number.isdigit() else 0
