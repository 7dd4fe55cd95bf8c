"""What the database refused, told safely: the reason for a refused row (never its SQL,
parameters or data) and text made storable, so that recording an error cannot fail.

A worker pass works through many rows in one transaction; each row's work is undone alone
(a workflow segment by its savepoint, see ``_segment_savepoint``; an outbox delivery's
record), so one row the database refuses is set aside with this reason and the pass goes on.
"""

from __future__ import annotations

from sqlalchemy.exc import StatementError

__all__ = ["refusal", "storable_text"]


def refusal(exc: Exception) -> str:
    """Why the database (or the driver, or the JSON encoder) refused a statement: the
    first line of the underlying error — never the SQL, its parameters or the data."""
    cause = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    return next(iter(str(cause).strip().splitlines()), type(cause).__name__)


def storable_text(text: str) -> str:
    """``text`` with what PostgreSQL cannot store in a text or JSON value (NUL, lone
    surrogates) escaped, so that recording an error can never fail itself."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
