"""Comparisons whose two sides hold different kinds of value (text, number, true/false).

SQLAlchemy types a compared value by the value when its kind is not the column's:
``Item.title == 5`` binds an integer, ``Item.rank == "5"`` a text.  SQLite then converts
by the column's affinity and answers (``5`` matches the title ``'5'``, ``True`` matches
``1``); PostgreSQL refuses the operator for the two types, with an error that names no
field.  Refused here on both, before the database sees the statement: a value's
mismatch is a ``validation_error`` at the payload field it came from (as a value its
column cannot hold), a mismatch written in the query itself (``Item.rank == True``,
``Item.title == Item.rank``) the step's refusal naming both sides.

Arithmetic likewise: PostgreSQL has ``+``, ``-``, ``*``, ``/`` and ``%`` of numbers only
(text is joined with ``||``, which SQLAlchemy writes for text ``+`` text), where SQLite
read ``Item.rank + Item.title`` as ``rank + 0`` and ``Item.flag + 1`` as 1 or 2.

Numbers whose exact answer SQLite's float cannot give are the step's refusal unless cast
to say the places: an integer divided by an integer (a ``numeric`` on PostgreSQL), a
``Numeric``'s product and quotient, and a ``Numeric`` answer of ``+ - *`` whose sides'
types allow more than 15 significant digits.

The kinds of the two sides are part of the statement's shape (SQLAlchemy's cache key
holds each parameter's type), so the walk runs once per shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Final, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Enum,
    Float,
    Integer,
    Numeric,
    SmallInteger,
    String,
    Time,
    Uuid,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.cache_key import CacheKey
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BindParameter,
    Cast,
    ClauseElement,
    ColumnClause,
    ColumnElement,
    ExpressionClauseList,
    False_,
    FunctionFilter,
    Grouping,
    Over,
    True_,
    UnaryExpression,
)
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeDecorator, TypeEngine

from ._access import ShapeMemo
from ._errors import Problem, StepRefused, Unfit
from ._limits import FLOAT_DIGITS, source_path

__all__ = [
    "computed_exactly",
    "computes_a_float",
    "exact_quotient",
    "nested_arithmetic",
    "numeric_scale",
    "refuse_mismatched",
]

_TEXT: Final = "text"
_NUMBER: Final = "a number"
_BOOL: Final = "true or false"
#: The kinds of time.  PostgreSQL converts a date to a datetime where they meet; SQLite
#: compares their text, in which a datetime's midnight is no date ('2024-01-01 00:00:00'
#: against '2024-01-01'): ``Item.at == date(...)`` matched on PostgreSQL only,
#: ``Item.day == datetime(...)`` likewise, and ISO text was SQLite's to compare and an
#: operator PostgreSQL lacks.
_DATETIME: Final = "a datetime"
_DATE: Final = "a date"
_TIME: Final = "a time"
_TIMES: Final = frozenset({_DATETIME, _DATE, _TIME})
#: A UUID is text to SQLite (its 32 hex digits) and a type of its own to PostgreSQL:
#: ``Item.ref == 5`` matched nothing on SQLite and had no operator on PostgreSQL.  Text
#: compared with a ``Uuid`` is bound as one (``_limits`` checks that it is one).
_UUID: Final = "a UUID"
#: The kinds PostgreSQL computes with ``+ - * / %`` only as numbers.
_PLAIN: Final = frozenset({_TEXT, _NUMBER, _BOOL})


def _kind(type_: TypeEngine[Any]) -> str | None:
    """The kind of value ``type_`` holds, if it is one whose comparison with another kind
    PostgreSQL refuses.  A ``TypeDecorator`` is its own kind: SQLAlchemy types a value
    compared with one by the decorator, whatever the value (its ``process_bind_param``
    converts it)."""
    if isinstance(type_, TypeDecorator):
        return None
    if isinstance(type_, String):  # Enum, Text, Unicode too
        return _TEXT
    if isinstance(type_, Boolean):
        return _BOOL
    if isinstance(type_, (Integer, Numeric, Float)):
        return _NUMBER
    if isinstance(type_, DateTime):
        return _DATETIME
    if isinstance(type_, Date):
        return _DATE
    if isinstance(type_, Time):
        return _TIME
    if isinstance(type_, Uuid):
        return _UUID
    return None


#: Per statement shape: the mismatched parameters, by their place among the cache key's
#: ``bindparams``, with the side they are compared with, what the value must be,
#: whether it is computed with that side (else compared) and whether only a value that
#: is no finite number is refused.
_FOUND: Final = ShapeMemo()

#: A parameter to refuse: its place, the side it meets, what it must be, whether it is
#: computed with, whether only when not finite, and the most decimal places a number
#: computed with the side may have (``None``: any).
_Mismatch = tuple[int, str, str, bool, bool, int | None]
#: What a number computed with a number column must be: SQLite's float arithmetic cannot
#: tell infinity from an overflow (which it refuses, as PostgreSQL does), and binds NaN as
#: NULL, where PostgreSQL computed with both (``x + inf`` was infinity).
_FINITE: Final = "a finite number"
_Found = tuple[_Mismatch, ...]

#: Operators PostgreSQL has for numbers only.
_ARITHMETIC: Final = {
    operators.add: "+",
    operators.sub: "-",
    operators.mul: "*",
    operators.truediv: "/",
    operators.floordiv: "/",
    operators.mod: "%",
}


def refuse_mismatched(
    where: ClauseElement,
    binds: Sequence[tuple[BindParameter[Any], object]],
    payload: object,
    key: CacheKey | None,
) -> None:
    """Raise :class:`Unfit` for a value of ``binds`` compared with a side of another kind
    (or computed with a number), :class:`StepRefused` for such a comparison or arithmetic
    written in ``where`` itself.  ``binds``
    are ``key.bindparams`` with their values when ``key`` is given."""
    memo = _FOUND.entries() if key is not None else None
    found: _Found | None = memo.get(key.key) if memo is not None and key is not None else None
    if found is None:
        found = _walk(where, [b for b, _ in binds])
        if memo is not None and key is not None:
            memo[key.key] = found
    if not found:
        return
    problems: list[Problem] = []
    computed = False
    for place, side, must, computing, unbounded, places in found:
        value = binds[place][1]
        if value is None:  # compares with NULL: no row matches, on both
            continue
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if item is None:
                continue
            message = None if unbounded and _finite(item) else f"must be {must}"
            if message is None and places is not None and _places(item) > places:
                message = f"must have at most {places} decimal places (its column's scale), not {_places(item)}"
            if message is not None:
                problems.append({"path": source_path(payload, item), "message": message, "column": side})
                computed = computed or computing
                break
    if problems:
        raise Unfit(problems, f"a value cannot be {'computed' if computed else 'compared'} with its column")


#: Comparisons that order their sides (an enum's members are ordered differently by each database).
_ORDERING: Final = frozenset(
    {operators.lt, operators.le, operators.gt, operators.ge, operators.between_op, operators.not_between_op}
)


def _refuse_enum_order(clause: ClauseElement, how: str) -> None:
    """The step's refusal of ordering by a native ``Enum`` column (``clause``, under any
    ``asc()``/``desc()``/``nulls_last()``): PostgreSQL's enum type orders its members as
    the class declares them, SQLite's text by their names, so ``order_by(Task.level)``,
    ``Task.level > Level.LOW`` and ``max(Task.level)`` gave other rows on each."""
    inner: Any = clause
    while isinstance(inner, (UnaryExpression, Grouping)):
        inner = inner.element
    clause = inner
    type_ = getattr(clause, "type", None)
    if isinstance(type_, TypeDecorator):
        type_ = type_.impl_instance
    if not isinstance(type_, Enum) or not type_.native_enum or not isinstance(clause, ColumnElement):
        return
    raise StepRefused(
        f"the query {how} {_name(clause)}, an Enum: PostgreSQL orders its members as the enum declares "
        "them, SQLite by their names; declare the column Enum(..., native_enum=False), which both order "
        "by name, or order the rows in Python"
    )


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return not isinstance(value, Decimal) or value.is_finite()


def _places(value: object) -> int:
    """The decimal places a finite ``Decimal`` needs (``1.0050`` needs 3; trailing zeros,
    which change no sum, not counted); 0 for anything else."""
    if not isinstance(value, Decimal):
        return 0
    _sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int) or exponent >= 0:
        return 0
    zeros = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    return max(-exponent - zeros, 0)


def _walk(where: ClauseElement, binds: list[BindParameter[Any]]) -> _Found:
    found: list[_Mismatch] = []
    cast_to = {id(_cast_of(e.clause)): e.type for e in visitors.iterate(where) if isinstance(e, Cast)}
    for element in visitors.iterate(where):
        ordered_by = element.order_by if isinstance(element, Over) else getattr(element, "_order_by_clauses", None)
        if ordered_by is not None:
            for clause in ordered_by if isinstance(ordered_by, (tuple, list)) else getattr(ordered_by, "clauses", ()):
                _refuse_enum_order(clause, "orders by")
        if isinstance(element, FunctionElement):
            if element.name.lower() in ("min", "max"):
                for argument in element.clauses:
                    _refuse_enum_order(argument, f"takes {element.name.lower()}() of")
            found.extend(_function(element, binds))
            if id(element) not in cast_to:
                _exact_math(element)
            _summed_places(element, cast_to.get(id(element)))
            continue
        if isinstance(element, ExpressionClauseList) and element.operator in _ARITHMETIC:
            # a + b + c: its binaries are checked as a + b, then (a + b) + c.
            binary: ColumnElement[Any] = nested_arithmetic(element)
            outer = cast_to.get(id(element))
            while isinstance(binary, BinaryExpression):
                found.extend(_arithmetic(binary, outer, binds))
                binary, outer = _bare(binary.left), None
            continue
        if isinstance(element, BinaryExpression) and element.operator in _ARITHMETIC:
            found.extend(_arithmetic(element, cast_to.get(id(element)), binds))
            continue
        if not isinstance(element, BinaryExpression) or not operators.is_comparison(element.operator):
            continue
        left = element.left
        if element.operator in _ORDERING:
            _refuse_enum_order(left, "compares (<, <=, >, >=, between)")
            _refuse_enum_order(element.right, "compares (<, <=, >, >=, between)")
        if _raw_json(element):
            raise StepRefused(
                f"the query compares the JSON value {_name(left)} as it is: PostgreSQL has no comparison "
                "of json, SQLite compares its text; compare what it holds, with .as_string(), "
                ".as_integer(), .as_float() or .as_boolean()"
            )
        # BETWEEN's right side is the pair of bounds.
        rights = element.right.clauses if isinstance(element.right, ExpressionClauseList) else (element.right,)
        for right in rights:
            left_kind, right_kind = _kind(left.type), _kind(right.type)
            if left_kind is None or right_kind is None or left_kind == right_kind:
                continue
            if isinstance(right, BindParameter) or isinstance(left, BindParameter):
                value, other, must = (
                    (right, left, left_kind) if isinstance(right, BindParameter) else (left, right, right_kind)
                )
                place = _place(binds, value)
                if place is not None:
                    found.append((place, _name(other), _what(other.type, must), False, False, None))
                continue
            how = (
                "SQLite compares their text, PostgreSQL converts one of them"
                if {left_kind, right_kind} <= _TIMES
                else "SQLite would convert one of them, PostgreSQL refuses the comparison"
            )
            raise StepRefused(
                f"the query compares {_side(left, left_kind)} with {_side(right, right_kind)}: "
                f"{how}; compare values of one kind (cast(...) says which)"
            )
    return tuple(found)


def nested_arithmetic(chain: ExpressionClauseList[Any]) -> BinaryExpression[Any]:
    """``a + b + c``, which SQLAlchemy keeps as one list of sides, as the binaries
    ``(a + b) + c`` it computes, each typed as SQLAlchemy types a binary: the checks and
    SQLite's PostgreSQL arithmetic are of binaries, and passed such a chain by."""
    sides: list[ColumnElement[Any]] = list(chain.clauses)
    nested: ColumnElement[Any] = sides[0]
    for side in sides[1:]:
        left = nested if nested is sides[0] else Grouping(nested)
        operator, type_ = left.comparator._adapt_expression(chain.operator, side.comparator)
        nested = BinaryExpression(left, side, operator, type_=type_)
    return cast(BinaryExpression[Any], nested)


def _arithmetic(
    binary: BinaryExpression[Any], cast_to: TypeEngine[Any] | None, binds: list[BindParameter[Any]]
) -> list[_Mismatch]:
    """The checks of ``binary`` (``+ - * / // %``), cast to ``cast_to`` if cast."""
    if cast_to is None:
        _uncast_exact(binary)
        _read_as_another_scale(binary)
    _past_a_float(binary, cast_to)
    return _computed(binary, binds)


def _cast_of(clause: ClauseElement) -> ClauseElement:
    """What a cast of ``clause`` casts the answer of: a window's or a filtered aggregate's
    function (``cast(func.avg(x).over(), ...)``)."""
    inner = clause.element if isinstance(clause, Over) else clause
    return inner.func if isinstance(inner, FunctionFilter) else inner


def _place(binds: list[BindParameter[Any]], bind: object) -> int | None:
    """Where ``bind`` stands among ``binds`` (the same object: equal ones may differ in value)."""
    return next((i for i, b in enumerate(binds) if b is bind), None)


def exact_quotient(binary: BinaryExpression[Any]) -> bool:
    """Whether ``binary`` is a ``*`` of two ``Numeric`` sides or a ``/`` of numbers that
    are no floats (integers or ``Numeric``), which PostgreSQL answers as a ``numeric`` of
    more places than either side (``0.15 * 0.15`` is ``0.0225``, ``0.10 / 3`` is
    ``0.03333333333333333333``; SQLAlchemy's ``/`` of two integers is a ``numeric``
    division there, ``1 / 3`` is ``0.33333333333333333333``): the query's type says the
    left side's scale (none for two integers), and SQLite computed a float."""
    affinities = {binary.left.type._type_affinity, binary.right.type._type_affinity}
    if binary.operator is operators.mul:
        return affinities == {Numeric}
    return binary.operator is operators.truediv and affinities <= {Numeric, Integer}


def _bare(side: ColumnElement[Any]) -> ColumnElement[Any]:
    """``side`` without the parentheses SQLAlchemy groups a nested expression in (the
    ``a + b`` of ``(a + b) * c``)."""
    while isinstance(side, Grouping) and isinstance(side.element, ColumnElement):
        side = side.element
    return side


def computes_a_float(side: ColumnElement[Any]) -> bool:
    """Whether PostgreSQL computes ``side`` as a double precision: a float, or arithmetic
    with one on either side (``amount * weight``, which SQLAlchemy types as the
    ``Numeric``)."""
    if side.type._type_affinity is Float:
        return True
    side = _bare(side)
    return (
        isinstance(side, BinaryExpression)
        and side.operator in _ARITHMETIC
        and (computes_a_float(side.left) or computes_a_float(side.right))
    )


def computed_exactly(binary: BinaryExpression[Any]) -> bool:
    """Whether SQLite computes ``binary`` as PostgreSQL's ``numeric`` does, by the decimal
    values (``_sqlite_functions.exact``): an :func:`exact_quotient`, or ``+ - *`` of a
    ``Numeric`` with a ``Numeric`` or an integer.  SQLite's float was off the decimal
    answer: ``3 * 0.15`` is 0.44999999999999996, cast to one place 0.4 where PostgreSQL's
    0.45 is 0.5, and ``0.10 + 0.20 > 0.30`` held there only."""
    if computes_a_float(binary.left) or computes_a_float(binary.right):
        return False
    if exact_quotient(binary):
        return True
    affinities = {binary.left.type._type_affinity, binary.right.type._type_affinity}
    return binary.operator in _GROWING and Numeric in affinities and affinities <= {Numeric, Integer}


def numeric_scale(side: ColumnElement[Any]) -> int | None:
    """The scale of PostgreSQL's ``numeric`` answer of ``side`` where its types say it (an
    integer's is 0; ``+ - %`` the larger of the sides', ``*`` their sum), else ``None``."""
    affinity = side.type._type_affinity
    side = _bare(side)
    if isinstance(side, BinaryExpression) and side.operator in _ARITHMETIC and affinity in (Numeric, Integer):
        bound = [
            s for s in (side.left, side.right) if isinstance(s, BindParameter) and s.type._type_affinity is Numeric
        ]
        if bound:
            # A Decimal met by a Numeric of a declared scale has no more places (_scale_kept);
            # met by another side, its places are its own.
            other = side.right if side.left is bound[0] else side.left
            kept = _scale_kept(side, other)
            return kept if side.operator in _SCALE_OF_SIDES and kept == numeric_scale(other) else None
        left, right = numeric_scale(side.left), numeric_scale(side.right)
        if left is None or right is None or side.operator in (operators.truediv, operators.floordiv):
            return None
        return left + right if side.operator is operators.mul else max(left, right)
    if affinity is Integer:
        return 0
    scale = getattr(side.type, "scale", None)
    return scale if affinity is Numeric and isinstance(scale, int) else None


def _read_as_another_scale(binary: BinaryExpression[Any]) -> None:
    """The step's refusal of ``binary`` uncast where SQLite would read its answer as
    another number than PostgreSQL's: SQLAlchemy types ``+ - * %`` of two ``Numeric``
    columns as the right one, whose scale SQLite's float is read to (``rate + amount``
    of a ``Numeric(6, 3)`` and a ``Numeric(8, 2)`` read 0.27, PostgreSQL 0.265), types an
    integer ``%`` a ``Numeric`` as an integer (PostgreSQL answers a ``numeric``), and a
    ``Numeric`` with a float as the ``Numeric``, where PostgreSQL answers a float, which
    each database's driver rounds to the scale its own way (2042.175 read 2042.18 and
    2042.17)."""
    if binary.operator is operators.floordiv or exact_quotient(binary):
        return  # a whole number (of any scale, an equal number), or a quotient: _uncast_exact's
    affinity = binary.type._type_affinity
    sides = (binary.left, binary.right)
    sign = _ARITHMETIC[binary.operator]
    what = f"{_side(binary.left, _NUMBER)} {sign} {_side(binary.right, _NUMBER)}"
    if affinity is Numeric and any(computes_a_float(s) for s in sides):
        how = "PostgreSQL answers a float, which each database's driver rounds to the Numeric's scale its own way"
    elif affinity is Integer and any(s.type._type_affinity is Numeric for s in sides):
        how = "PostgreSQL answers a Decimal, SQLAlchemy types it as an integer"
    elif affinity is Numeric:
        declared = getattr(binary.type, "scale", None)
        if declared is None or numeric_scale(binary) == declared:
            return
        how = (
            f"PostgreSQL answers a Decimal of the sides' places, SQLAlchemy types it as one side's {declared} "
            "places, to which SQLite reads it"
        )
    else:
        return
    raise StepRefused(
        f"the query computes {what} uncast: {how}; say what it is (cast(x {sign} y, Numeric(p, s)), "
        "or cast(..., Float))"
    )


def _uncast_exact(binary: BinaryExpression[Any]) -> None:
    """The step's refusal of an :func:`exact_quotient` whose answer is not cast: SQLite
    reads it to the left side's scale (``Item.amount / 3`` of 0.10 was 0.03 there), or,
    of two integers, as a float of 15 digits (``1 / 3`` was 0.333333333333333)."""
    if exact_quotient(binary):
        sign = _ARITHMETIC[binary.operator]
        integers = binary.type._type_affinity is Numeric and {
            binary.left.type._type_affinity,
            binary.right.type._type_affinity,
        } == {Integer}
        how = (
            "PostgreSQL answers a Decimal of 20 places (1 / 3 is 0.33333333333333333333), SQLite a float "
            "of 15 digits (0.333333333333333), Python a float (1 / 3 is 0.3333333333333333)"
            if integers
            else "PostgreSQL answers a Decimal of more places than either side, SQLite reads it to the "
            "first side's scale"
        )
        raise StepRefused(
            f"the query computes {_side(binary.left, _NUMBER)} {sign} {_side(binary.right, _NUMBER)} uncast: "
            f"{how}; say how many places (cast(x {sign} y, Numeric(p, s)))"
        )


#: Digits before the point of the integer types, by PostgreSQL's widths.
_INTEGER_DIGITS: Final = ((BigInteger, 19), (SmallInteger, 5))
#: Operators whose answer may have more digits than either side.
_GROWING: Final = frozenset({operators.add, operators.sub, operators.mul})


def _past_a_float(binary: BinaryExpression[Any], cast_to: TypeEngine[Any] | None) -> None:
    """The step's refusal of ``binary`` (``+ - *`` answering a ``Numeric``, no float among
    its sides) when its answer may have more than :data:`FLOAT_DIGITS` significant digits
    and is not cast to a ``Numeric`` of at most that many: PostgreSQL computes it exactly,
    SQLite as a float (``big + amount`` of 2**53 + 7 and 0.01 was ...999.01 there,
    ...1000.00 here).  Cast to ``Numeric(p, s)`` of ``p`` up to 15, the answer holds on
    both or is the cast's overflow on both.  An :func:`exact_quotient` (refused uncast)
    cast to a ``Numeric`` of more digits, or of no precision, likewise."""
    if binary.type._type_affinity is not Numeric:
        return
    exact = exact_quotient(binary)
    numeric_cast = cast_to is not None and cast_to._type_affinity is Numeric
    precision = getattr(cast_to, "precision", None) if numeric_cast else None
    if isinstance(precision, int) and precision <= FLOAT_DIGITS:
        return
    sign = _ARITHMETIC[binary.operator]
    sides = f"{_side(binary.left, _NUMBER)} {sign} {_side(binary.right, _NUMBER)}"
    if exact:
        if not numeric_cast:
            return  # uncast: _uncast_exact's; cast to a float or text: a float on both
        what = f"casts {sides} to a Numeric of {precision or 'unlimited'} digits"
        scale = getattr(cast_to, "scale", None) or 0
    else:
        bound = _digits(binary) if binary.operator in _GROWING else None
        if bound is None or sum(bound) <= FLOAT_DIGITS:
            return
        what = f"computes {sides}, a Decimal of up to {sum(bound)} significant digits"
        scale = bound[1]
    raise StepRefused(
        f"the query {what}: PostgreSQL answers it exactly, SQLite as a float of {FLOAT_DIGITS} significant "
        f"digits; cast the answer to a Numeric of at most {FLOAT_DIGITS} digits (cast(x {sign} y, "
        f"Numeric({FLOAT_DIGITS}, {min(scale, FLOAT_DIGITS)}))), which both refuse past its digits, or compute "
        "it in Python"
    )


def _digits(side: ColumnElement[Any]) -> tuple[int, int] | None:
    """The most digits before and after the point ``side`` may have, by its type (an
    arithmetic side by its own sides'); ``None`` where a float takes part (each
    database's float answers alike).  A value bound from the input, or a ``Numeric`` of
    no precision, counts as none: its own digits are checked where it is bound."""
    type_ = side.type
    if type_._type_affinity is Float:
        return None
    side = _bare(side)
    if isinstance(side, BinaryExpression) and side.operator in _GROWING:
        left, right = _digits(side.left), _digits(side.right)
        if left is None or right is None:
            return None
        if side.operator is operators.mul:
            return left[0] + right[0], left[1] + right[1]
        return max(left[0], right[0]) + 1, max(left[1], right[1])
    if isinstance(side, BindParameter):
        return 0, 0
    if type_._type_affinity is Integer:
        return next((n for cls, n in _INTEGER_DIGITS if isinstance(type_, cls)), 10), 0
    precision, scale = getattr(type_, "precision", None), getattr(type_, "scale", None) or 0
    if type_._type_affinity is Numeric and isinstance(precision, int):
        return max(precision - scale, 0), scale
    return 0, 0


def _computed(element: BinaryExpression[Any], binds: list[BindParameter[Any]]) -> list[_Mismatch]:
    """The parameter of ``element`` (arithmetic) that must be a number, or the step's
    refusal where a side written in the query is text or true/false."""
    left, right = element.left, element.right
    left_kind, right_kind = _kind(left.type), _kind(right.type)
    if element.operator is operators.mod and any(isinstance(side.type, Float) for side in (left, right)):
        raise StepRefused(
            f"the query computes {_side(left, _NUMBER)} % {_side(right, _NUMBER)} of a float: "
            "PostgreSQL has no % of floats, SQLite made them integers; cast(..., Numeric) them"
        )
    if left_kind not in _PLAIN or right_kind not in _PLAIN:
        return []  # a time, an interval, a decorator: each database's own
    numbers = left_kind == right_kind == _NUMBER
    for value, other, other_kind in ((right, left, left_kind), (left, right, right_kind)):
        if isinstance(value, BindParameter) and not isinstance(other, BindParameter) and other_kind == _NUMBER:
            place = _place(binds, value)
            must = _FINITE if numbers else _NUMBER
            return [] if place is None else [(place, _name(other), must, True, numbers, _scale_kept(element, other))]
    if numbers:
        return []
    raise StepRefused(
        f"the query computes {_side(left, left_kind)} {_ARITHMETIC[element.operator]} "
        f"{_side(right, right_kind)}: SQLite would convert the text or true/false, PostgreSQL "
        "refuses the operator; compute with numbers (cast(...) says which), join text with +"
    )


#: Operators whose ``numeric`` answer PostgreSQL gives the larger scale of its sides (``amount
#: + 1.005`` is 2.015), where SQLite's float is read to the column's (2.01).
_SCALE_OF_SIDES: Final = frozenset({operators.add, operators.sub, operators.mod})


def _scale_kept(element: BinaryExpression[Any], column: ColumnElement[Any]) -> int | None:
    """The scale of ``column``, a ``Numeric`` of a declared scale met by a parameter in
    ``element``: a number of more places is refused, as no database answers it alike (in
    :data:`_SCALE_OF_SIDES`; and a divisor or factor, which SQLAlchemy casts to the
    column's type, was rounded to its places on PostgreSQL only: ``amount / 0.7653``
    divided by 0.77 there)."""
    type_ = column.type
    if type_._type_affinity is not Numeric:
        return None
    scale = getattr(type_, "scale", None)
    return scale if isinstance(scale, int) else None


#: Aggregates PostgreSQL has of numbers only; SQLite read text, a time or a UUID as a
#: number (``sum`` of names was 0.0, ``avg`` of dates their year) where PostgreSQL refused.
_OF_NUMBERS: Final = frozenset({"sum", "avg"})
#: Aggregates PostgreSQL has of numbers, text and times, not of true/false, a UUID or JSON
#: (SQLite answered ``max`` of UUIDs by their text).
_ORDERED: Final = frozenset({"max", "min"})


def _function(fn: FunctionElement[Any], binds: list[BindParameter[Any]]) -> list[_Mismatch]:
    """The parameters of ``coalesce(...)`` of another kind than its first side written in
    the query, or the step's refusal of two such sides, or of ``sum``/``avg``/``max``/``min``
    of true/false: PostgreSQL has neither, SQLite answered with text and numbers mixed or
    true as 1."""
    name = fn.name.lower()
    args: list[ColumnElement[Any]] = list(fn.clauses)
    if name in _OF_NUMBERS or name in _ORDERED:
        for arg in args:
            _aggregated(name, arg)
    if name != "coalesce":
        return []
    written = [
        (arg, kind) for arg in args if (kind := _kind(arg.type)) is not None and not isinstance(arg, BindParameter)
    ]
    if not written:
        return []
    first, must = written[0]
    for arg, kind in written[1:]:
        if kind != must:
            raise StepRefused(
                f"the query's coalesce() takes {_side(first, must)} and {_side(arg, kind)}: SQLite would "
                "answer either kind, PostgreSQL refuses; give it values of one kind (cast(...) says which)"
            )
    found: list[_Mismatch] = []
    for arg in args:
        if isinstance(arg, BindParameter) and _kind(arg.type) not in (None, must):
            place = _place(binds, arg)
            if place is not None:
                found.append((place, _name(first), must, True, False, None))
    return found


#: Functions PostgreSQL answers of a ``numeric`` as a ``numeric`` of its own scale
#: (``round(amount, 1)``, ``sqrt(amount)``), which SQLite computes as a float.
_NUMERIC_MATH: Final = frozenset({"abs", "round", "sign", "sqrt", "power", "floor", "ceil", "ceiling"})


def _exact_math(fn: FunctionElement[Any]) -> None:
    """The step's refusal of ``fn``, a function of :data:`_NUMERIC_MATH` whose answer is
    not cast, of a ``Numeric`` (a ``Decimal`` on PostgreSQL, a float on SQLite, whose
    read cannot tell it from one), and of ``round`` to places of a float, which PostgreSQL
    lacks (SQLite rounded it).  An integer rounded to places is a ``numeric`` there."""
    name = fn.name.lower()
    if name not in _NUMERIC_MATH:
        return
    args: list[ColumnElement[Any]] = list(fn.clauses)
    if not args:
        return
    first = args[0]
    affinity = first.type._type_affinity
    if name == "round" and len(args) > 1 and affinity is Float:
        raise StepRefused(
            f"the query rounds {_side(first, _NUMBER)} of a float to places: PostgreSQL has no round of a "
            "float to places, SQLite rounds it; round a Numeric and cast the answer "
            "(cast(func.round(cast(x, Numeric), n), Numeric(p, s)))"
        )
    exact = any(a.type._type_affinity is Numeric for a in args)
    if exact or (name == "round" and len(args) > 1 and affinity is Integer):
        raise StepRefused(
            f"the query takes {name}() of {_side(first, _NUMBER)} uncast: PostgreSQL answers a Decimal of "
            f"its own scale, SQLite a float; cast the answer (cast(func.{name}(...), Numeric(p, s)))"
        )


def _summed_places(fn: FunctionElement[Any], cast_to: TypeEngine[Any] | None) -> None:
    """The step's refusal of ``avg`` or ``sum`` of integers or a ``Numeric`` whose answer
    the databases read apart: PostgreSQL's is an exact ``Decimal``, SQLite's a float
    (``avg`` of 41.79s was 41.78999999999998, ``sum`` of a hundred 0.1s
    9.99999999999998), which reads alike only rounded to the places the summed values
    have.  So ``avg`` is refused uncast, and either of a ``Numeric`` of no scale, or cast
    to fewer places than the values have (the float's error may cross the half
    PostgreSQL's exact sum is rounded at: ``sum`` of 0.0015 and 1112.19 cast to three
    places read 1112.191 and 1112.192)."""
    name = fn.name.lower()
    args: list[ColumnElement[Any]] = list(fn.clauses)
    if name not in _OF_NUMBERS or len(args) != 1 or computes_a_float(args[0]):
        return
    if args[0].type._type_affinity not in (Integer, Numeric):
        return
    places = numeric_scale(args[0])
    cast_places = _rounded_to(cast_to)
    if places is None:
        what = "of a Numeric of no scale: PostgreSQL sums it exactly, SQLite as floats, whose error no scale rounds"
        how = "declare the places (Numeric(p, s)) of what it sums, or compute it in Python"
    elif cast_to is None and name == "avg":
        what = "uncast: PostgreSQL answers an exact Decimal, SQLite a float"
        how = f"cast the answer (cast(func.avg(...), Numeric(p, {places})))"
    elif cast_places is not None and cast_places < places:
        what = (
            f"cast to {cast_places} places, fewer than the {places} its values have: SQLite sums floats, whose "
            "error may cross the half at which PostgreSQL's exact answer is rounded"
        )
        how = f"cast it to at least {places} places and round in Python"
    else:
        return
    raise StepRefused(f"the query takes {name}() of {_side(args[0], _NUMBER)} {what}; {how}")


def _rounded_to(cast_to: TypeEngine[Any] | None) -> int | None:
    """The places a cast to ``cast_to`` rounds a number to: a ``Numeric(p, s)``'s ``s``, an
    integer's 0; ``None`` for none (a ``Numeric`` of no precision keeps the value)."""
    if cast_to is None:
        return None
    if cast_to._type_affinity is Integer:
        return 0
    if cast_to._type_affinity is Numeric and getattr(cast_to, "precision", None) is not None:
        return getattr(cast_to, "scale", None) or 0
    return None


def _aggregated(name: str, arg: ColumnElement[Any]) -> None:
    """The step's refusal of ``sum``/``avg`` of anything but numbers, and of ``max``/``min``
    of true/false, a UUID or JSON: PostgreSQL has none of them."""
    kind = _kind(arg.type)
    if kind == _BOOL:
        raise StepRefused(
            f"the query takes {name}() of {_side(arg, _BOOL)}: PostgreSQL has no {name} of "
            "true or false, SQLite reads them as 1 and 0; cast(..., Integer) it"
        )
    type_ = arg.type
    if isinstance(type_, (Uuid, JSON)) or (name in _OF_NUMBERS and kind in (_TEXT, *_TIMES)):
        what = "JSON" if isinstance(type_, JSON) else str(kind)
        how = (
            "SQLite reads it as a number; take it of a number (cast(...) says which)"
            if name in _OF_NUMBERS
            else "SQLite compares its text; cast(..., String) it"
        )
        raise StepRefused(f"the query takes {name}() of {_side(arg, what)}: PostgreSQL has no {name} of {what}, {how}")


#: Comparisons a JSON value takes on both databases: IS NULL, IS NOT NULL.
_NULL_TESTS: Final = frozenset({operators.is_, operators.is_not})


def _raw_json(comparison: BinaryExpression[Any]) -> bool:
    """Whether ``comparison`` compares a JSON document or element itself (not PostgreSQL's
    ``JSONB``, which has its comparisons and no SQLite)."""
    if comparison.operator in _NULL_TESTS:
        return False
    return any(
        isinstance(side.type, JSON) and not isinstance(side.type, JSONB) for side in (comparison.left, comparison.right)
    )


def _what(type_: TypeEngine[Any], kind: str) -> str:
    """What a value compared with a side of ``type_`` must be: an ``Enum``'s values, which
    say more than "text"."""
    return f"one of {', '.join(type_.enums)}" if isinstance(type_, Enum) and type_.enums else kind


def _side(side: ColumnElement[Any], kind: str) -> str:
    if isinstance(side, True_):
        return "true"
    if isinstance(side, False_):
        return "false"
    return f"{_name(side)} ({kind})"


def _name(side: ColumnElement[Any]) -> str:
    if isinstance(side, BinaryExpression) and isinstance(side.left, ColumnClause):  # doc["key"]
        return f"{_name(side.left)}[...]"
    if isinstance(side, ColumnClause):
        table = side.table
        return side.name if table is None or not hasattr(table, "name") else f"{table.name}.{side.name}"
    return f"an expression of type {side.type}"
