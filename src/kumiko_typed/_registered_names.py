"""What a feature's, handler's, query's or workflow's name may be.

Names travel further than the code that gives them: into rows (a run's workflow, an
outbox row's handler, a cron schedule's cursor: ``String(400)`` columns), log records and
the command line's tables.  A name that one of those cannot carry was an error far from
its cause (PostgreSQL refusing the first row, a log line broken in two, a name no one can
type), or a collision: the full name is
``feature:name``, so a feature ``a:b`` with a handler ``c`` and a feature ``a`` with a
handler ``b:c`` were one name.  (Whether a name can be an HTTP path segment is the HTTP
adapter's to say: an App served otherwise may name a handler ``orders/place``.)
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_FULL_NAME", "name_problem"]

#: The longest full name (``feature:name``): with the prefixes stored beside it
#: (``cron:``) it fits the framework's ``String(400)`` columns on every database.
MAX_FULL_NAME: Final = 200


def name_problem(kind: str, name: object, *, full: str | None = None) -> str | None:
    """Why ``name`` cannot name a ``kind`` ("feature", "handler", "query", "workflow"), with
    the fix; ``None`` if it can.  ``full``: the ``feature:name`` it is stored as."""
    if not isinstance(name, str):
        return f"a {kind} name must be a string, not {type(name).__name__}"
    if not name:
        return f"a {kind} name must not be empty"
    if not name.isprintable():
        return f"a {kind} name must not contain line breaks or other control characters"
    if name != name.strip():
        return f"a {kind} name must not begin or end with blanks"
    if kind == "feature" and ":" in name:
        return "a feature name must not contain ':': it separates the feature from a handler's name (feature:name)"
    if full is not None and len(full) > MAX_FULL_NAME:
        return f"a {kind}'s full name (feature:name) must be at most {MAX_FULL_NAME} characters, not {len(full)}"
    return None
