"""Functions the App's SQLite connections carry, so that SQLite answers as PostgreSQL.

SQLite converts where PostgreSQL refuses: ``CAST('5.5' AS INTEGER)`` is 5 and
``CAST('abc' AS INTEGER)`` 0 (PostgreSQL: invalid input), ``7 / 0`` is NULL (PostgreSQL:
division by zero), and a JSON element read as a number or text is JSON_EXTRACT's value
(SQLAlchemy compiles ``doc["k"].as_integer()`` to ``CAST(doc ->> 'k' AS INTEGER)`` on
PostgreSQL, which takes the element's text and refuses ``"5.5"``, ``true`` or a list;
SQLite made them 5, 1 and 0, and ``as_string()`` of ``true`` was ``'1'``).  The App's
SQLite compiler (``_sqlite_sql.SQLiteStatements``) routes these through the functions here,
which give PostgreSQL's value or its refusal; the refusal is the same
``validation_error`` as PostgreSQL's ``DataError`` ("the database refused a value").
Cost: a Python call per value on SQLite, only where such an expression is read.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Final, cast

__all__ = ["CAST_TEXT", "DIVISOR", "FUNCTIONS", "JSON_AS", "refused_here"]

#: The SQL names of the functions, as the compiler writes them.
JSON_AS: Final = "kumiko_json_as"
CAST_TEXT: Final = "kumiko_cast_text"
DIVISOR: Final = "kumiko_divisor"

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
    # The common cases first, without the text round trip: a number read as one.
    if kind == "integer":
        if target == "integer":
            if type(value) is int and value in _INT4:
                return value
        elif target == "float":
            return float(cast(int, value))
    elif kind == "real" and target == "float":
        return value
    text = _text(kind, value)
    if text is None or target == "text":
        return text
    return cast_text(target, text)


def cast_text(target: str, text: object) -> object:
    """``CAST(text AS target)`` as PostgreSQL's input rules read ``text``."""
    if not isinstance(text, str):
        return text  # a number or NULL: SQLite's own cast would do; the compiler sends only text
    try:
        return _cast(target, text)
    except _Refused:
        _refusal.flag = True
        raise


def divisor(value: object) -> object:
    """``value`` as a divisor: zero is PostgreSQL's "division by zero", not SQLite's NULL."""
    if isinstance(value, (int, float)) and value == 0:
        _refusal.flag = True
        raise _Refused("division by zero")
    return value


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


#: ``(name, argument count, function)`` registered on each connection.
FUNCTIONS: Final = ((JSON_AS, 3, json_as), (CAST_TEXT, 2, cast_text), (DIVISOR, 1, divisor))
