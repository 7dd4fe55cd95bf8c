"""What the database refused, told safely: the reason for a refused row (never its SQL,
parameters or data) and text made storable, so that recording an error cannot fail.

A worker pass works through many rows in one transaction; each row's work is undone alone
(a workflow segment by its savepoint, see ``_segment_savepoint``; an outbox delivery's
record), so one row the database refuses is set aside with this reason and the pass goes on.
"""

from __future__ import annotations

import re

from sqlalchemy.exc import StatementError

__all__ = ["one_line", "refusal", "storable_text"]


def refusal(exc: Exception) -> str:
    """Why the database (or the driver, or the JSON encoder) refused a statement: the
    first line of the underlying error — never the SQL, its parameters or the data."""
    cause = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    return next(iter(str(cause).strip().splitlines()), type(cause).__name__)


def storable_text(text: str) -> str:
    """``text`` with what PostgreSQL cannot store in a text or JSON value (NUL, lone
    surrogates) escaped, so that recording an error can never fail itself."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


#: Control characters: a peer's reason phrase or SMTP reply may hold terminal escapes
#: (``ESC [2J`` clears the screen of whoever reads it in a terminal, ``ESC ]0;`` sets its
#: title) and line breaks (a forged line in a log).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` as one line of plain text: a line break or tab as a blank, any other
    control character as its escape (``\\x1b``)."""
    return _CONTROL.sub(lambda m: " " if m[0] in "\t\n\r" else repr(m[0])[1:-1], text)
