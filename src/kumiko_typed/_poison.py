"""Poison-row isolation for the worker: one row whose values the database refuses (or
that cannot be processed at all) is set aside with the reason, and the pass goes on.

A worker pass works through many rows in one transaction.  An error while writing one
of them would abort that transaction and, raised, stop the pass; the next pass would
meet the same row first and stop again, for ever.  So the work on one row runs in a
savepoint: an error rolls back that row's work only and is returned to the caller,
which records it on the row (a failed run, a dead outbox row).  Errors that say
nothing about the row — a lost connection, a deadlock — are raised: the pass is then
tried again as a whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.orm import Session

from ._transient import transient

T = TypeVar("T")


def isolated(session: Session, work: Callable[[], T]) -> T | Exception:
    """``work()`` in a savepoint: its result, or the error it raised (its writes undone)."""
    savepoint = session.begin_nested()
    try:
        result = work()
    except Exception as exc:
        savepoint.rollback()
        if isinstance(exc, DBAPIError) and transient(exc):
            raise
        return exc
    savepoint.commit()
    return result


def refusal(exc: Exception) -> str:
    """Why the database (or the driver, or the JSON encoder) refused a statement: the
    first line of the underlying error — never the SQL, its parameters or the data."""
    cause = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    return next(iter(str(cause).strip().splitlines()), type(cause).__name__)


def storable_text(text: str) -> str:
    """``text`` with what PostgreSQL cannot store in a text or JSON value (NUL, lone
    surrogates) escaped, so that recording an error can never fail itself."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
