"""The page arguments of the operator's listings (``app.runs``, ``app.outbox``): checked
once for both, so that a wrong one is a ``TypeError`` or ``ValueError`` naming it, never a
page that quietly matches nothing or everything."""

from __future__ import annotations

import uuid
from typing import Final

__all__ = ["MOST_ROWS", "checked_cursor", "checked_limit"]

#: The largest count SQLite's INTEGER and PostgreSQL's ``bigint`` hold, which no table
#: reaches.  A larger limit means as much; bound as it was, it was the driver's error
#: (``OverflowError`` on SQLite, ``bigint out of range`` quoting the SQL on PostgreSQL).
MOST_ROWS: Final = 2**63 - 1


def checked_limit(limit: object) -> int | None:
    """``limit``: ``None`` (no limit) or a positive int (a ``bool`` is no count)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise TypeError(f"limit must be an int or None, not {type(limit).__name__}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive int, not {limit}")
    return None if limit is None else min(limit, MOST_ROWS)


def checked_cursor(name: str, value: object, what: str) -> uuid.UUID | None:
    """The id a page goes on from (``before=``, ``after=``): ``None`` or a UUID, ``what``."""
    if value is not None and not isinstance(value, uuid.UUID):
        raise TypeError(f"{name} must be a uuid.UUID ({what}), not {type(value).__name__}")
    return value
