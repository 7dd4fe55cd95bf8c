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
So do a number cast to an integer (SQLite truncates, PostgreSQL rounds), ``substr``
(SQLite counts a negative start from the end and takes a negative length) and a float
computed past its range (SQLite: infinity, PostgreSQL: overflow).
Cost: a Python call per value on SQLite, only where such an expression is read.
"""

from __future__ import annotations

import json
import math
import re
import threading
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Final, NoReturn, cast

__all__ = [
    "CAST_NUMBER",
    "CAST_TEXT",
    "DIVISOR",
    "FINITE",
    "FUNCTIONS",
    "JSON_AS",
    "REMAINDER",
    "SUBSTR",
    "refused_here",
]

#: The SQL names of the functions, as the compiler writes them.
JSON_AS: Final = "kumiko_json_as"
CAST_TEXT: Final = "kumiko_cast_text"
DIVISOR: Final = "kumiko_divisor"
CAST_NUMBER: Final = "kumiko_cast_number"
SUBSTR: Final = "kumiko_substr"
FINITE: Final = "kumiko_finite"
REMAINDER: Final = "kumiko_remainder"

_INTEGER: Final = re.compile(r"\s*[+-]?[0-9]+\s*")
_FLOAT: Final = re.compile(
    r"\s*[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|nan|inf|infinity)\s*", re.IGNORECASE
)
_TRUE: Final = ("true", "yes", "on", "1")
_FALSE: Final = ("false", "no", "off", "0")
_INT4: Final = range(-(2**31), 2**31)
#: Enough digits for the integer quotient of any two floats (1e308 by 5e-324), which a
#: remainder works out in full.
_EXACT: Final = Context(prec=700)
#: The integer types a cast names, by the word the compiler writes, and what they hold.
INTEGERS: Final = {"smallint": range(-(2**15), 2**15), "integer": _INT4, "bigint": range(-(2**63), 2**63)}

_refusal = threading.local()


class _Refused(ValueError):
    pass


def refused_here() -> bool:
    """Whether the last statement on this thread failed because one of these functions
    refused a value (SQLite reports only "user-defined function raised exception");
    clears it."""
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
    return _cast(target, text)


def cast_number(target: str, exact: int, value: object) -> object:
    """``CAST(value AS target)`` of a number to an integer type as PostgreSQL's: a
    ``numeric`` (``exact``) rounds half away from zero, a float half to even, and a value
    past the type's range is refused (SQLite truncated and kept 64 bits)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            _refuse("integer out of range")
        value = int(Decimal(repr(value)).quantize(Decimal(1), ROUND_HALF_UP)) if exact else round(value)
    if isinstance(value, int) and value not in INTEGERS[target]:
        _refuse("integer out of range")
    return value


def substr(text: object, start: object, *count: object) -> object:
    """PostgreSQL's ``substr(text, start[, count])``: the characters at positions ``start``
    up to ``start + count`` (positions before the first count, and hold nothing); a
    negative ``count`` is refused.  SQLite counted a negative ``start`` from the end."""
    if text is None or start is None or None in count:
        return None
    lengths = [n for n in count if isinstance(n, int)]
    if not isinstance(start, int) or len(lengths) != len(count):
        raise TypeError("substr takes whole numbers")  # PostgreSQL has no such substr either
    # SQLite's own substr reads a number as its text too.
    chars = text if isinstance(text, (str, bytes)) else str(text)
    first = max(start, 1) - 1
    if not lengths:
        return chars[first:]
    length = lengths[0]
    if length < 0:
        _refuse("negative substring length not allowed")
    return chars[first : max(start - 1 + length, first)]


def _refuse(reason: str) -> NoReturn:
    _refusal.flag = True
    raise _Refused(reason)


def divisor(value: object) -> object:
    """``value`` as a divisor: zero is PostgreSQL's "division by zero", not SQLite's NULL."""
    if isinstance(value, (int, float)) and value == 0:
        _refuse("division by zero")
    return value


def finite(value: object) -> object:
    """A float computed (``x * 10``, ``sum(x)``): past the float's range it is PostgreSQL's
    "value out of range: overflow", not SQLite's infinity (which no column holds)."""
    if isinstance(value, float) and math.isinf(value):
        _refuse("value out of range: overflow")
    return value


def remainder(dividend: object, divisor: object) -> object:
    """PostgreSQL's ``numeric`` ``%``: the remainder with the dividend's sign, of the
    decimal values (SQLite keeps a NUMERIC as a float: ``0.3`` is read by its shortest
    form, as the column's reading does); a zero divisor is refused."""
    if dividend is None or divisor is None:
        return None
    if not isinstance(dividend, (int, float)) or not isinstance(divisor, (int, float)):
        raise TypeError("% takes numbers")  # the compiler sends only numbers
    if divisor == 0:
        _refuse("division by zero")
    left = Decimal(dividend) if isinstance(dividend, int) else Decimal(repr(dividend))
    right = Decimal(divisor) if isinstance(divisor, int) else Decimal(repr(divisor))
    return float(_EXACT.remainder(left, right)) + 0.0  # numeric has no -0: -4 % 2 is 0


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
    if target in INTEGERS:
        if _INTEGER.fullmatch(text) and int(text) in INTEGERS[target]:
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
    _refuse(f"not a valid {target}")


#: ``(name, argument count, function)`` registered on each connection.
FUNCTIONS: Final = (
    (JSON_AS, 3, json_as),
    (CAST_TEXT, 2, cast_text),
    (DIVISOR, 1, divisor),
    (CAST_NUMBER, 3, cast_number),
    (SUBSTR, -1, substr),
    (FINITE, 1, finite),
    (REMAINDER, 2, remainder),
)
