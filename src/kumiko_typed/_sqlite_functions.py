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
(SQLite counts a negative start from the end and takes a negative length), a float
computed past its range (SQLite: infinity, PostgreSQL: overflow), integer arithmetic past
its type (SQLite: a float past 64 bits, PostgreSQL: out of range), ``round``, ``sign``,
``sqrt``, ``power``, ``floor`` and ``ceil`` (SQLite's answer where PostgreSQL's double
precision functions answer otherwise or refuse) and a UUID cast to text (SQLite: the 32
hex digits it stores).
Cost: a Python call per value on SQLite, only where such an expression is read.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_DOWN, ROUND_FLOOR, ROUND_HALF_UP, Context, Decimal
from typing import Final, NoReturn, cast

__all__ = [
    "CAST_NUMBER",
    "CAST_NUMERIC",
    "CAST_TEXT",
    "DIVISOR",
    "EXACT",
    "FINITE",
    "FUNCTIONS",
    "JSON_AS",
    "MATH",
    "REMAINDER",
    "SUBSTR",
    "UUID_TEXT",
    "WHOLE",
    "refused_here",
]

#: The SQL names of the functions, as the compiler writes them.
JSON_AS: Final = "kumiko_json_as"
CAST_TEXT: Final = "kumiko_cast_text"
DIVISOR: Final = "kumiko_divisor"
CAST_NUMBER: Final = "kumiko_cast_number"
CAST_NUMERIC: Final = "kumiko_cast_numeric"
SUBSTR: Final = "kumiko_substr"
FINITE: Final = "kumiko_finite"
REMAINDER: Final = "kumiko_remainder"
WHOLE: Final = "kumiko_whole"
EXACT: Final = "kumiko_exact"
MATH: Final = "kumiko_math"
UUID_TEXT: Final = "kumiko_uuid_text"

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


def cast_numeric(precision: int, scale: int, inexact: int, value: object) -> object:
    """``value`` cast to a ``NUMERIC(precision, scale)``: rounded half away from zero to
    ``scale`` places, and refused as PostgreSQL's "numeric field overflow" when it then
    has more than ``precision - scale`` digits before the point (SQLite's cast has no limit).  A float of an
    ``inexact`` side (a double precision to PostgreSQL) is taken by its first 15
    significant digits, as PostgreSQL converts one (``round(2**53 + 1)`` is
    9007199254740990 there)."""
    if value is None or not isinstance(value, (int, float)):
        return value  # text: SQLite's own cast, as before
    if isinstance(value, float):
        if not math.isfinite(value):
            _refuse("numeric field overflow")
        if inexact:
            value = float(format(value, ".15g"))
    rounded = _decimal(value).quantize(Decimal(1).scaleb(-scale), ROUND_HALF_UP, _EXACT)
    if rounded.adjusted() >= precision - scale and rounded != 0:
        _refuse("numeric field overflow")
    # Rounded, as computed with further: SQLite's cast kept every place, so
    # ``amount / 0.7653`` (SQLAlchemy casts the divisor to the column's type) divided by
    # 0.7653 here and by 0.77 there.
    return value if isinstance(value, int) else float(rounded) + 0.0


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


def divisor(value: object, dividend: object) -> object:
    """``value`` as a divisor of ``dividend``: zero is PostgreSQL's "division by zero", not
    SQLite's NULL, unless the dividend is NULL (PostgreSQL's answer too)."""
    if isinstance(value, (int, float)) and value == 0 and dividend is not None:
        _refuse("division by zero")
    return value


def finite(value: object) -> object:
    """A float computed (``x * 10``, ``sum(x)``): past the float's range it is PostgreSQL's
    "value out of range: overflow", not SQLite's infinity (which no column holds)."""
    if isinstance(value, float) and math.isinf(value):
        _refuse("value out of range: overflow")
    return value


def whole(bits: int, value: object) -> object:
    """An integer computed (``n + 1``, ``big * 4``) of a ``bits``-wide type: past it,
    PostgreSQL's "integer out of range" (SQLite computed ``integer`` in 64 bits, and made
    a float past 64)."""
    if value.__class__ is int and value in _WIDTHS[bits]:
        return value
    if value is None:
        return None
    _refuse(f"{_INTEGER_NAMES[bits]} out of range")


_WIDTHS: Final = {16: INTEGERS["smallint"], 32: INTEGERS["integer"], 64: INTEGERS["bigint"]}
_INTEGER_NAMES: Final = {16: "smallint", 32: "integer", 64: "bigint"}


def math_(name: str, exact: int, *args: object) -> object:
    """PostgreSQL's ``round``/``sign``/``sqrt``/``power``/``floor``/``ceil`` (named by
    ``name``) of ``args``: of a ``numeric`` (``exact``) by the decimal value (``round``
    half away from zero, to places too), else of a double precision (an integer is taken
    as one): ``round`` half to even, zeros keep their sign, a negative's square root, a
    power with no real answer and one past the float's range are refused.  SQLite rounded
    half away from zero, answered ``sign`` as an integer, ``sqrt(-1)`` as NULL and an
    overflowing ``power`` as infinity."""
    if None in args:
        return None
    if not all(isinstance(a, (int, float)) for a in args):
        raise TypeError(f"{name} takes numbers")  # PostgreSQL has no such function either
    numbers = cast(tuple[float, ...], args)
    if name == "power":
        return _power(float(numbers[0]), float(numbers[1]))
    if name == "sqrt":
        if numbers[0] < 0:
            _refuse("cannot take square root of a negative number")
        return math.sqrt(numbers[0])
    if exact:
        return _exact(name, _decimal(numbers[0]), numbers[1:])
    x = float(numbers[0])
    if not math.isfinite(x) or name == "sign":
        return x if not math.isfinite(x) else float((x > 0) - (x < 0))
    # C's rint, floor and ceil keep a zero's sign: round(-0.4) is -0.0 on PostgreSQL.
    return math.copysign(float(_ROUNDINGS[name](x)), x)


_ROUNDINGS: Final[dict[str, Callable[[float], float]]] = {
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
    "ceiling": math.ceil,
}
_DECIMAL_ROUNDINGS: Final = {
    "floor": ROUND_FLOOR,
    "ceil": ROUND_CEILING,
    "ceiling": ROUND_CEILING,
}


def _exact(name: str, number: Decimal, places: tuple[float, ...]) -> float:
    """``name`` of a ``numeric``, which has no negative zero."""
    if name == "sign":
        return float((number > 0) - (number < 0))
    if name == "round":
        exponent = Decimal(1).scaleb(-int(places[0]) if places else 0)
        return float(number.quantize(exponent, ROUND_HALF_UP, _EXACT)) + 0.0
    return float(number.to_integral_value(_DECIMAL_ROUNDINGS[name])) + 0.0


def _power(x: float, y: float) -> float:
    """PostgreSQL's ``power`` of double precision values."""
    if x == 0 and y < 0:
        _refuse("zero raised to a negative power is undefined")
    if x < 0 and math.isfinite(y) and y != math.floor(y):
        _refuse("a negative number raised to a non-integer power yields a complex result")
    try:
        result = math.pow(x, y)
    except OverflowError:
        _refuse("value out of range: overflow")
    if result == 0 and x != 0 and math.isfinite(y):
        _refuse("value out of range: underflow")
    return result


def _decimal(number: float) -> Decimal:
    """A number SQLite holds as the decimal it was written as (its shortest form)."""
    return Decimal(number) if isinstance(number, int) else Decimal(repr(number))


def exact(sign: str, left_scale: int, right_scale: int, left: object, right: object) -> object:
    """PostgreSQL's ``numeric`` ``+ - *`` or ``/`` (``sign``) of the decimal values, as
    the float nearest the decimal answer (SQLite's float arithmetic may be one off it); a
    quotient rounded half away from zero to PostgreSQL's scale (at least 16
    significant digits, at least either side's ``scale``; -1: the value's own places)."""
    if left is None or right is None:
        return None
    if not isinstance(left, (int, float)) or not isinstance(right, (int, float)):
        raise TypeError(f"{sign} takes numbers")  # the compiler sends only numbers
    dividend, divisor = _decimal(left), _decimal(right)
    if sign in _EXACT_OPERATIONS:
        return float(_EXACT_OPERATIONS[sign](dividend, divisor)) + 0.0
    if divisor == 0:
        _refuse("division by zero")
    places = min(
        max(
            _quotient_places(dividend, divisor),
            _places(dividend) if left_scale < 0 else left_scale,
            _places(divisor) if right_scale < 0 else right_scale,
            0,
        ),
        1000,
    )
    # The digits up to those places and a few more, cut off (not rounded: a cut never
    # moves a quotient across the half the rounding below looks at).
    digits = max(dividend.adjusted() - divisor.adjusted() + places + 4, 1)
    cut = Context(prec=digits, rounding=ROUND_DOWN).divide(dividend, divisor)
    return float(cut.quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP, _EXACT)) + 0.0


_EXACT_OPERATIONS: Final[dict[str, Callable[[Decimal, Decimal], Decimal]]] = {
    "+": _EXACT.add,
    "-": _EXACT.subtract,
    "*": _EXACT.multiply,
}


def _quotient_places(dividend: Decimal, divisor: Decimal) -> int:
    """PostgreSQL's ``select_div_scale``: 16 significant digits of the quotient as its
    base-10000 digits estimate them."""
    weight1, first1 = _leading_group(dividend)
    weight2, first2 = _leading_group(divisor)
    weight = weight1 - weight2 - (first1 <= first2)
    return 16 - weight * 4


def _leading_group(number: Decimal) -> tuple[int, int]:
    """The weight and value of ``number``'s first nonzero base-10000 digit (0, 0 for zero)."""
    if number == 0:
        return 0, 0
    weight = number.adjusted() // 4
    return weight, int(abs(number).scaleb(-4 * weight))


def _places(number: Decimal) -> int:
    return max(-int(number.as_tuple().exponent), 0)


def uuid_text(value: object) -> object:
    """A UUID cast to text as PostgreSQL writes it, hyphenated (SQLite stores the 32 hex
    digits and cast them as they are)."""
    if isinstance(value, str) and len(value) == 32:
        return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}".lower()
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
    left, right = _decimal(dividend), _decimal(divisor)
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
    (DIVISOR, 2, divisor),
    (CAST_NUMBER, 3, cast_number),
    (CAST_NUMERIC, 4, cast_numeric),
    (SUBSTR, -1, substr),
    (FINITE, 1, finite),
    (REMAINDER, 2, remainder),
    (WHOLE, 2, whole),
    (MATH, -1, math_),
    (UUID_TEXT, 1, uuid_text),
    (EXACT, 5, exact),
)
