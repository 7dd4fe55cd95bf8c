"""A JSON element read as text, a number or true/false on SQLite as PostgreSQL reads it.

SQLAlchemy compiles ``doc["k"].as_integer()`` to ``CAST(doc ->> 'k' AS INTEGER)`` on
PostgreSQL, which takes the element's text and refuses what is no integer (``"5.5"``,
``true``, a list), and to ``CAST(JSON_EXTRACT(doc, '$.k') AS INTEGER)`` on SQLite, which
makes ``5.5`` a ``5``, ``true`` a ``1`` and any text a ``0``; ``as_string()`` of ``true``
was ``'true'`` on one and ``'1'`` on the other.  The App's SQLite engine compiles these
reads to :func:`json_as`, registered on each connection, which answers as PostgreSQL:
the same value, or the same refusal (a ``validation_error``, "the database refused a
value").
"""

from __future__ import annotations

import json
import re
import threading
from typing import Final

__all__ = ["FUNCTION", "json_as", "refused_here"]

#: The SQL name of :func:`json_as` on the App's SQLite connections.
FUNCTION: Final = "kumiko_json_as"

_INTEGER: Final = re.compile(r"\s*[+-]?[0-9]+\s*")
_FLOAT: Final = re.compile(
    r"\s*[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|nan|inf|infinity)\s*", re.IGNORECASE
)
_TRUE: Final = ("true", "yes", "on", "1")
_FALSE: Final = ("false", "no", "off", "0")
_INT4: Final = range(-(2**31), 2**31)

_refusal = threading.local()


class _Refused(ValueError):
    pass


def refused_here() -> bool:
    """Whether the last statement on this thread failed because :func:`json_as` refused an
    element (SQLite reports only "user-defined function raised exception"); clears it."""
    refused: bool = getattr(_refusal, "flag", False)
    _refusal.flag = False
    return refused


def json_as(target: str, kind: str | None, value: object) -> object:
    """``value`` (SQLite's ``JSON_EXTRACT``) of JSON type ``kind`` (``JSON_TYPE``) as
    PostgreSQL's cast of its ``->>`` text to ``target``."""
    text = _text(kind, value)
    if text is None or target == "text":
        return text
    try:
        return _cast(target, text)
    except _Refused:
        _refusal.flag = True
        raise


def _text(kind: str | None, value: object) -> str | None:
    """PostgreSQL's ``->>``: JSON's null and a missing key are NULL, true is ``'true'``,
    a document is its text as SQLAlchemy's JSON wrote it."""
    if kind is None or kind == "null":
        return None
    if kind in ("true", "false"):
        return kind
    if kind in ("array", "object"):
        return json.dumps(json.loads(str(value)))
    return value if isinstance(value, str) else repr(value)


def _cast(target: str, text: str) -> object:
    if target == "integer":
        if _INTEGER.fullmatch(text) and int(text) in _INT4:
            return int(text)
    elif target == "float":
        if _FLOAT.fullmatch(text):
            return float(text)
    elif target == "boolean":
        word = text.strip().lower()
        # PostgreSQL takes any unambiguous prefix of its words ("t", "ye", "of").
        if word and any(w.startswith(word) for w in _TRUE) and not any(w.startswith(word) for w in _FALSE):
            return 1
        if word and any(w.startswith(word) for w in _FALSE) and not any(w.startswith(word) for w in _TRUE):
            return 0
    raise _Refused(f"not a valid {target}")
