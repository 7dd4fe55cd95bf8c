"""Values checked against what their columns can hold, before the database sees them.

SQLite stores almost anything (41 characters in a ``String(40)``, a NUL, a 64-bit integer
in an ``Integer``); PostgreSQL refuses much of it, with an error that cannot say which
field of the input it was.  Checking here, by the column's declared type, gives both
databases the same answer: a ``validation_error`` naming the payload field the value
came from.  Untrusted JSON gets the checks no column can make up for (a lone surrogate,
NaN, nesting without end) at the payload converter, through :func:`json_problems`.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Final

import attrs
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Enum,
    Float,
    Integer,
    Interval,
    LargeBinary,
    Numeric,
    Select,
    SmallInteger,
    String,
    Table,
    Time,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import BinaryExpression, BindParameter, ClauseElement
from sqlalchemy.types import TypeDecorator, TypeEngine

from ._errors import Problem, Unfit
from ._jsonable import JSON_KEYS, KeyCollision, Unjsonable, colliding_keys, jsonable

__all__ = [
    "FLOAT_DIGITS",
    "MAX_COMPARED",
    "MAX_DEPTH",
    "Check",
    "bound_values",
    "check_of",
    "decimal_problem",
    "json_problems",
    "key_collision",
    "moment_problem",
    "nested_without_end",
    "number_problem",
    "path_children",
    "path_step",
    "read_check",
    "read_problems",
    "refuse",
    "refuse_compared",
    "row_count_problems",
    "source_path",
    "stored_json",
    "text_problem",
    "unfit_json",
    "unfit_values",
]

#: Deepest nesting of arrays and objects accepted in a payload or a stored JSON value:
#: far beyond any sensible document, far below Python's recursion limit.
MAX_DEPTH: Final = 64
#: Problems reported per value at most (a huge bad document would list them all).
_MAX_PROBLEMS: Final = 20

Check = Callable[[object], "str | None"]


# --- single values -----------------------------------------------------------------


def text_problem(value: str) -> str | None:
    """What neither database stores as text (PostgreSQL refuses NUL, both lone surrogates)."""
    if "\x00" in value:
        return "must not contain NUL characters (U+0000)"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "is not valid Unicode (it holds a lone surrogate)"
    return None


def _finite(value: object) -> str | None:
    if isinstance(value, Decimal):
        finite = value.is_finite()
    elif isinstance(value, float):
        finite = math.isfinite(value)
    else:
        return None
    return None if finite else "must be a finite number (not NaN or infinity)"


#: Digits PostgreSQL's ``numeric`` holds before the decimal point and after it.
NUMERIC_WHOLE_DIGITS: Final = 131072
NUMERIC_FRACTION_DIGITS: Final = 16383


def decimal_problem(value: Decimal) -> str | None:
    """A finite ``Decimal`` past what PostgreSQL's ``numeric`` holds: neither database can
    be given it as a parameter alike (PostgreSQL refuses it, SQLite's float makes it
    infinity or 0), and Python's decimal arithmetic overflows (``1e999999999 * 2``) or
    flushes it to zero (``1e-999999999 / 2``) where a value within it does not (its
    exponent limit, 999999, is far beyond)."""
    if not value.is_finite():
        return None
    if value.adjusted() >= NUMERIC_WHOLE_DIGITS:
        return f"must have at most {NUMERIC_WHOLE_DIGITS} digits before the decimal point"
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and -exponent > NUMERIC_FRACTION_DIGITS:
        return f"must have at most {NUMERIC_FRACTION_DIGITS} digits after the decimal point"
    return None


def number_problem(value: int) -> str | None:
    """An integer with more digits than Python writes as text (``sys.set_int_max_str_digits``):
    the JSON encoder refuses it, wherever it is stored."""
    limit = sys.get_int_max_str_digits()
    # Below 3 bits per allowed digit it has fewer digits than the limit: no conversion to try.
    if not limit or value.bit_length() <= 3 * limit:
        return None
    try:
        str(value)
    except ValueError:
        return f"must have at most {limit} digits"
    return None


def moment_problem(value: datetime) -> str | None:
    """An aware datetime whose UTC time is before year 1 or after 9999: PostgreSQL stores
    it, but no Python datetime — nor SQLite's UTC column — can hold it."""
    if value.tzinfo is None:
        return None
    try:
        value.astimezone(UTC)
    except OverflowError:
        return "must be between years 1 and 9999 in UTC"
    return None


#: Where a value is in a document, made into text only for a value with a problem (a
#: document is mostly without): the document's root path, or (parent, key).
_Where = str | tuple[Any, object]


def _path(where: _Where) -> str:
    """The text of a place: ``$.key`` under an object, ``$[2]`` in an array."""
    keys: list[object] = []
    while isinstance(where, tuple):
        where, key = where
        keys.append(key)
    for key in reversed(keys):
        where += path_step(key)
    return where


#: The longest key a path quotes whole.  A path is sent back to the caller (a detail's
#: ``path``), so a hostile key must not come back as it was sent: 100 KB of it in each
#: of a hundred details, or a terminal's escape sequence.
MAX_PATH_KEY: Final = 40


def path_step(key: object, *, bracketed: bool = False) -> str:
    """One step of a path: ``.key`` for a text key (unless ``bracketed``), ``[2]`` for an
    index, ``['key']`` for any other key.  A key longer than :data:`MAX_PATH_KEY` or
    holding a character that is not printable is written as its ``repr`` (control
    characters escaped), cut after that many characters and marked ``...``."""
    if isinstance(key, str) and not bracketed and len(key) <= MAX_PATH_KEY and key.isprintable():
        return f".{key}"
    shown = repr(key)
    return f"[{shown}]" if len(shown) <= MAX_PATH_KEY + 2 else f"[{shown[:MAX_PATH_KEY]}...]"


def json_problems(
    value: object, path: str = "$", *, max_depth: int | None = MAX_DEPTH, as_written: bool = False
) -> Iterator[tuple[str, str, object]]:
    """``(path, message, offending value)`` for what a JSON column (or a JSON reader) cannot
    take: strings and keys failing :func:`text_problem`, non-finite numbers, integers too long
    to write (:func:`number_problem`), nesting deeper than ``max_depth`` (``None``: no
    limit, for a document the framework itself nested).  ``as_written``: ``value`` goes to
    ``json.dumps`` as it is (a JSON column), so a value it cannot write is a problem too
    (a ``Decimal``, a date, a set, bytes, a mapping that is no dict, a key that is no
    scalar); elsewhere such values are converted first.  Iterative: a document nested
    thousands deep is no recursion.  Every value a workflow stores passes here: a path
    is written out only for a problem."""
    if not isinstance(value, _CONTAINERS) or (as_written and _unwritable(value)):
        problem = _unwritable(value) if as_written else None
        problem = problem or _value_problem(value)
        if problem is not None:
            yield path, problem, value
        return
    if max_depth is not None and max_depth <= 0:
        yield path, f"is nested deeper than {max_depth} levels", value
        return
    # Depth first, in document order: an array or object is entered where it is met, the
    # rest of its parent's items taken after it (the parent's iterator kept on the stack).
    # A key's problem is the object's that holds it: its offending value is that object.
    stack: list[tuple[_Where, object, Iterator[tuple[object, object]], int]] = [(path, value, _items(value), 1)]
    checked: set[int] | None = None  # the objects whose keys' JSON texts were compared
    while stack:
        where, node, items, depth = stack[-1]
        for key, child in items:
            if isinstance(key, str):
                problem = text_problem(key)
                if problem is not None:
                    yield _path(where), f"has a key that {problem}", node
                    continue
            elif as_written and type(node) not in _ARRAYS:  # an array's index is no key
                if not isinstance(key, (int, float, type(None))):  # json.dumps' other keys
                    yield _path(where), f"has a key of type {type(key).__name__}, not text", node
                    continue
                # Only a key that is no text can share its JSON text with another: an
                # object of text keys (most) is never looked at twice.
                checked = checked if checked is not None else set()
                if id(node) not in checked and isinstance(node, Mapping):
                    checked.add(id(node))
                    if len({_dumped_key(k) for k in node}) != len(node):
                        first, second = colliding_keys(node, _dumped_key)
                        yield _path(where), key_collision(first, second), node
            # Most values are scalars: no ABC check (``Mapping``) for them.
            if as_written and type(child) not in _SCALARS:
                problem = _unwritable(child)
                if problem is not None:
                    yield _path((where, key)), problem, child
                    continue
            if type(child) not in _SCALARS and isinstance(child, _CONTAINERS):
                if max_depth is not None and depth >= max_depth:
                    yield _path((where, key)), f"is nested deeper than {max_depth} levels", child
                    continue
                stack.append(((where, key), child, _items(child), depth + 1))
                break
            problem = _value_problem(child)
            if problem is not None:
                yield _path((where, key)), problem, child
        else:
            stack.pop()


def key_collision(first: object, second: object) -> str:
    """The problem of an object two of whose keys JSON writes as one text: its keys shown
    as a path shows them (a hostile one cut), not its values."""
    shown = [path_step(k, bracketed=True)[1:-1] for k in (first, second)]
    return (
        f"has the keys {shown[0]} and {shown[1]}, which JSON writes as one text: the later would silently"
        " replace the earlier; give each key its own text (convert the keys to str first)"
    )


def _dumped_key(key: object) -> str:
    """A key as ``json.dumps`` writes it (text, a float, an int, ``None`` or a bool)."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return repr(key) if math.isfinite(key) else "NaN" if math.isnan(key) else "Infinity" if key > 0 else "-Infinity"
    if key is None or isinstance(key, bool):
        return JSON_KEYS[key]
    if isinstance(key, int):
        return int.__repr__(key)
    return f"\0{id(key)}"  # a key json.dumps refuses (reported apart): none of its texts


#: What JSON nests: the exact types first, then no ABC check for them.
_ARRAYS: Final = frozenset({list, tuple})
_CONTAINERS: Final = (dict, list, tuple, Mapping)
#: JSON's scalars, by exact type: none of them nests.
_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def _items(node: Mapping[object, object] | list[object] | tuple[object, ...]) -> Iterator[tuple[object, object]]:
    return iter(node.items()) if isinstance(node, (dict, Mapping)) else enumerate(node)


def _unwritable(node: object) -> str | None:
    """What ``json.dumps`` refuses: a value that is none of JSON's (subclasses of its
    scalars, such as a ``StrEnum`` member, it writes as the scalar)."""
    if node is None or isinstance(node, (str, int, float, dict, list, tuple)):
        return None
    shown = type(node).__name__
    if isinstance(node, Mapping):
        return f"is of type {shown}, not a dict: a JSON column stores dicts, lists, text, numbers, booleans and null"
    return f"is of type {shown}, which is no JSON value: convert it (to text or a number) before storing it"


def _value_problem(node: object) -> str | None:
    """What is wrong with a value that nests nothing (most often: nothing)."""
    if isinstance(node, str):
        return text_problem(node)
    if isinstance(node, int):  # before float: no value is both (bool is an int)
        return number_problem(node)
    if isinstance(node, (float, Decimal)):
        return _finite(node)
    return None


# --- columns -----------------------------------------------------------------------


def _text(length: int | None, *, decorated: bool = False) -> Check:
    """A text column's value.  Only text: SQLite stored ``True`` as ``'1'`` and ``5.0`` as
    ``'5.0'`` where PostgreSQL stored ``'true'`` and ``'5'``, and kept bytes as a BLOB
    (read back as bytes) where PostgreSQL stored the text ``"\\x6162"``.  A
    ``TypeDecorator``'s value may be anything its ``process_bind_param`` turns into text
    (SQLAlchemy's JSON-as-text recipe takes a dict): only bytes are refused there."""

    def check(value: object) -> str | None:
        if not isinstance(value, str):
            if isinstance(value, (bytes, bytearray, memoryview)):
                return "must be text, not bytes"
            return None if decorated or value is None else f"must be text, not {_kind_of(value)}"
        if length is not None and len(value) > length:
            return f"must be at most {length} characters long, not {len(value)}"
        return text_problem(value)

    return check


def _integer(bits: int) -> Check:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def check(value: object) -> str | None:
        if isinstance(value, float):  # a projector's ``/``: SQLite keeps 2.5, PostgreSQL rounds it
            if not value.is_integer():
                return "must be a whole number"
        elif isinstance(value, Decimal):  # SQLite cannot bind one, PostgreSQL rounds it
            return "must be an int, not a Decimal"
        elif isinstance(value, bool):
            return _NOT_A_BOOL
        elif isinstance(value, str):
            return _NOT_TEXT
        elif not isinstance(value, int):
            return None
        if not low <= value <= high:
            return f"must be between {low} and {high}"
        return None

    return check


def _kind_of(value: object) -> str:
    """What ``value`` is, in the words of a problem's message."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float, Decimal)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    return f"a {type(value).__name__}"


#: Text in a number column: SQLite stored "abc" as it is, PostgreSQL refused it with an
#: error naming no field (and read "5" as 5, which SQLite kept as text only if it was no number).
_NOT_TEXT: Final = "must be a number, not text"
#: A bool is an int to Python and SQLite (stored as 1), a type of its own to PostgreSQL,
#: which refused it in a number column with an error naming no field.
_NOT_A_BOOL: Final = "must be a number, not true or false"


def _float(value: object) -> str | None:
    if isinstance(value, str):
        return _NOT_TEXT
    if isinstance(value, int):
        return _integer(64)(value)  # SQLite binds an int as a 64-bit integer
    return _finite(value)


def _numeric(precision: int | None, scale: int | None) -> Check:
    def check(value: object) -> str | None:
        if isinstance(value, bool):
            return _NOT_A_BOOL
        if isinstance(value, str):
            return _NOT_TEXT
        problem = _finite(value)
        if problem is not None or not isinstance(value, (int, float, Decimal)) or not value:
            return problem
        # A float (a Numeric with asdecimal=False) by its shortest repr: 0.1, not its binary value.
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        digits = _significant(number)
        if digits > FLOAT_DIGITS:
            # SQLite keeps a NUMERIC as a float, which holds 15 digits exactly; PostgreSQL
            # would keep the rest: refused on both, or they would read back different values.
            return f"must have at most {FLOAT_DIGITS} significant digits, not {digits}"
        if precision is None:
            # What SQLite's floating point and PostgreSQL's numeric both hold.
            if not _SMALLEST_EXPONENT <= number.adjusted() < 308:
                return "must be between 1e-300 and 1e308 in magnitude, or 0"
            return None
        allowed = precision - (scale or 0)
        if number.adjusted() + 1 > allowed:
            return f"must have at most {allowed} digits before the decimal point"
        # PostgreSQL rounds further decimals away (and may overflow doing so), SQLite keeps
        # them: the row would no longer be what the event or payload said.
        if _decimals(number) > (scale or 0):
            return f"must have at most {scale or 0} digits after the decimal point"
        return None

    return check


#: The smallest power of ten a number column takes and a compared ``Decimal`` may have
#: (but 0): far above a float's smallest (about 1e-324), below which SQLite's float is 0.
_SMALLEST_EXPONENT: Final = -300

#: Significant decimal digits a float keeps exactly (C's ``DBL_DIG``).
FLOAT_DIGITS: Final = 15


def _significant(number: Decimal) -> int:
    """Digits from the first to the last that is not zero (``0.0120`` has two)."""
    digits = "".join(map(str, number.as_tuple().digits)).strip("0")
    return len(digits)


def _decimals(number: Decimal) -> int:
    """Digits after the point that are not trailing zeros (``4.200`` has one)."""
    _sign, digits, exponent = number.as_tuple()
    if not isinstance(exponent, int) or exponent >= 0:
        return 0
    trailing = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    return max(0, -exponent - trailing)


def _moment(value: object) -> str | None:
    return moment_problem(value) if isinstance(value, datetime) else None


def _written_moment(value: object) -> str | None:
    """A ``DateTime`` column's value: PostgreSQL casts ISO text, SQLite's type refused it
    with an ``internal_error``."""
    return "must be a datetime, not text" if isinstance(value, str) else _moment(value)


def _day(value: object) -> str | None:
    """A ``Date`` column's value.  A datetime is a date to Python, but its time of day is
    dropped (PostgreSQL takes an aware one's UTC date, SQLite its own), and the event kept
    it, which the replay could not read back as a date."""
    if isinstance(value, datetime):
        return "must be a date, not a datetime (its time of day would be dropped)"
    return "must be a date, not text" if isinstance(value, str) else None


def _zoned_time_of_day(value: object) -> str | None:
    """A ``Time(timezone=True)`` column's value.  PostgreSQL's ``timetz`` kept its offset,
    SQLite kept none: ``12:00-05:00`` read back as such there and as ``12:00`` here.  Both
    read a naive time back in UTC (the App's UTC session; the engine's SQLite ``TIME``), so
    a time without a zone, or in UTC, is taken and any other offset refused."""
    if isinstance(value, str):
        return "must be a time, not text"
    if isinstance(value, time) and value.utcoffset() not in (None, timedelta(0)):
        return (
            "must be a time in UTC or without a time zone (read back in UTC): SQLite keeps no other offset;"
            " store the zone in a column of its own, or the instant in a DateTime(timezone=True)"
        )
    return None


def _time_of_day(value: object) -> str | None:
    """A ``Time`` column's value.  Neither database keeps a time's zone there: both stored
    ``12:00-05:00`` as ``12:00`` (an instant it was not), and its event kept the zone, so the
    row and its replay differed.  A time of day with a zone has no UTC time to convert it
    to (the offset changes with the date), so it is refused, not converted."""
    if isinstance(value, str):
        return "must be a time, not text"
    if isinstance(value, time) and value.tzinfo is not None:
        return "must be a time without a time zone, which the column does not keep (give value.replace(tzinfo=None))"
    return None


def _of_kinds(check: Check, kinds: tuple[type[Any], ...], expected: str) -> Check:
    """``check``, and a value of none of ``kinds`` refused: a number or a time given to a
    column of the other (a datetime in an ``Integer``, a number in a ``DateTime``), bytes,
    a container, a UUID or an enum member in either.  Both databases refused most of them
    with an ``internal_error`` worded by their driver (SQLite's binding, PostgreSQL's
    cast), and one took some: SQLite kept bytes in an ``Integer`` column as a BLOB, read
    back as bytes, and PostgreSQL cast a datetime in a ``Time`` column to its time of day,
    whose event could then not be read back."""

    def of_kinds(value: object) -> str | None:
        problem = check(value)
        if problem is not None or isinstance(value, kinds):
            return problem
        return f"must be {expected}, not {_kind_of(value)}"

    return of_kinds


def _json(value: object) -> str | None:
    for where, problem, _ in json_problems(value):
        return problem if where == "$" else f"{problem} (at {where})"
    return None


def _enum(type_: Enum) -> Check:
    try:
        return _ENUM_CHECKS[type_]
    except KeyError:
        check = _ENUM_CHECKS[type_] = _enum_check(type_)
        return check


#: Per enum type: its check, made once (a read asks for it at every comparison).
_ENUM_CHECKS: dict[Enum, Check] = {}


def _enum_check(type_: Enum) -> Check:
    """A member of the column's enum class, or the text of one of its values.  SQLAlchemy
    binds any other text as it is: PostgreSQL's enum type refuses it, SQLite stored it, and
    reading the row back raised ``LookupError`` ever after."""
    members, stored = type_.enum_class, frozenset(type_.enums)
    expected = f"must be one of {', '.join(type_.enums)}"

    def check(value: object) -> str | None:
        if members is not None and isinstance(value, members):
            return None
        return None if isinstance(value, str) and value in stored else expected

    return check


def _boolean(value: object) -> str | None:
    # SQLAlchemy binds a bool, or 0 and 1; anything else was a TypeError deep in the statement.
    return None if isinstance(value, bool) or (type(value) is int and value in (0, 1)) else "must be true or false"


def _true_or_false(value: object) -> str | None:
    """A value compared with a boolean column: PostgreSQL refuses ``boolean = integer``."""
    return None if value is None or isinstance(value, bool) else "must be true or false"


def _binary(value: object) -> str | None:
    return None if isinstance(value, (bytes, bytearray, memoryview)) else "must be bytes"


#: The interval SQLite can store: it keeps one as the moment that long after 1970-01-01,
#: which must lie in years 1 to 9999; PostgreSQL's interval reaches further.
_SHORTEST: Final = datetime.min - datetime(1970, 1, 1)
_LONGEST: Final = datetime.max - datetime(1970, 1, 1)


def _interval(value: object) -> str | None:
    if not isinstance(value, timedelta):
        return "must be a timedelta"
    if not _SHORTEST <= value <= _LONGEST:
        return f"must be between {_SHORTEST.days} and {_LONGEST.days} days"
    return None


#: The UUID text PostgreSQL's ``uuid`` takes: 32 hex digits, a hyphen after any group of
#: four, in a pair of braces or none.  ``uuid.UUID`` takes more (``urn:uuid:``, any hyphens,
#: one brace, and through ``int`` spaces, a sign, underscores, other scripts' digits),
#: which SQLite then stored and PostgreSQL refused naming no field.
_UUID_TEXT: Final = re.compile(r"[0-9a-fA-F]{4}(?:-?[0-9a-fA-F]{4}){7}")


def _uuid(value: object) -> str | None:
    """Text given for a ``Uuid`` column must be a UUID both databases take: PostgreSQL's
    cast and SQLite's binding refused other text with no word of the field it came from."""
    if not isinstance(value, str):
        # A number or bytes: refused by both with no field named (an expression is the database's).
        return "must be a UUID" if isinstance(value, (int, float, bytes)) else None
    digits = value[1:-1] if value[:1] == "{" and value[-1:] == "}" else value
    return None if _UUID_TEXT.fullmatch(digits) else "must be a UUID"


def _check_for(type_: TypeEngine[Any]) -> Check | None:
    if isinstance(type_, Interval):  # a TypeDecorator over a time, on SQLite
        return _interval
    decorated = isinstance(type_, TypeDecorator)
    if isinstance(type_, TypeDecorator):
        type_ = type_.impl_instance
    if isinstance(type_, Enum):
        return _enum(type_)
    if isinstance(type_, String):
        return _text(type_.length, decorated=decorated)
    if isinstance(type_, Boolean):
        return _boolean
    if isinstance(type_, LargeBinary):
        return _binary
    if isinstance(type_, JSON):
        return _json
    kinded = _kinded(type_)
    if kinded is not None:
        check, kinds, expected = kinded
        # A TypeDecorator's process_bind_param may take other kinds (a Money as cents).
        return check if decorated else _of_kinds(check, kinds, expected)
    if isinstance(type_, Uuid):
        return _uuid
    return None


_NUMBERS: Final = (int, float, Decimal)


def _kinded(type_: TypeEngine[Any]) -> tuple[Check, tuple[type[Any], ...], str] | None:
    """A number or time column's own check, the kinds of value it takes and their name."""
    if isinstance(type_, Integer):
        bits = 16 if isinstance(type_, SmallInteger) else 64 if isinstance(type_, BigInteger) else 32
        return _integer(bits), (int, float), "a number"
    if isinstance(type_, Float):
        return _float, _NUMBERS, "a number"
    if isinstance(type_, Numeric):
        return _numeric(type_.precision, type_.scale), _NUMBERS, "a number"
    if isinstance(type_, DateTime):
        return _written_moment, (date,), "a datetime"  # a date is midnight, alike on both
    if isinstance(type_, Date):
        return _day, (date,), "a date"
    if isinstance(type_, Time):
        return (_zoned_time_of_day if type_.timezone else _time_of_day), (time,), "a time"
    return None


#: Per column: its check (``None``: nothing to check), worked out once.
_CHECKS: dict[Column[Any], Check | None] = {}


def check_of(column: Column[Any]) -> Check | None:
    try:
        return _CHECKS[column]
    except KeyError:
        check = _check_for(column.type)
        width = _index_width(column)
        if check is not None and width and _is_text(column.type):
            check = _indexed_text(check, _INDEX_ROW_BYTES // width)
        _CHECKS[column] = check
        return check


#: What PostgreSQL's B-tree index holds of one row: a third of its 8 kB page (2,704
#: bytes, less the row's header), shared by the index's columns.  SQLite's index has no
#: such limit, so a longer text (one that does not compress: a token, a hash list) was
#: stored there and an ``internal_error`` here.
_INDEX_ROW_BYTES: Final = 2_600


def _is_text(type_: TypeEngine[Any]) -> bool:
    inner = type_.impl_instance if isinstance(type_, TypeDecorator) else type_
    return isinstance(inner, String) and not isinstance(inner, Enum)


def _index_width(column: Column[Any]) -> int:
    """How many columns the widest index holding ``column`` has (0: none does)."""
    table: Table | None = getattr(column, "table", None)  # unset on a column of no table
    if table is None:
        return 0
    held = [len(table.primary_key.columns)] if column.primary_key else []
    held += [len(i.columns) for i in table.indexes if column in i.columns.values()]
    held += [
        len(c.columns) for c in table.constraints if isinstance(c, UniqueConstraint) and column in c.columns.values()
    ]
    return max(held, default=0)


def _indexed_text(check: Check, limit: int) -> Check:
    def indexed(value: object) -> str | None:
        problem = check(value)
        # Four bytes a character at most: a shorter text needs no encoding to tell.
        if problem is None and isinstance(value, str) and len(value) * 4 > limit:
            size = len(value.encode())
            if size > limit:
                return f"must be at most {limit} bytes long in UTF-8 (an index of it holds no more), not {size}"
        return problem

    return indexed


# --- where a value came from -------------------------------------------------------


def path_children(node: object, path: str) -> Iterator[tuple[str, object]]:
    """``node``'s fields, items and elements, each with its path below ``path``."""
    cls = type(node)
    if attrs.has(cls):
        for field in attrs.fields(cls):
            yield f"{path}.{field.name}", getattr(node, field.name)
    elif isinstance(node, Mapping):
        for key, child in node.items():
            yield path + path_step(key), child
    elif isinstance(node, (list, tuple)):
        for index, child in enumerate(node):
            yield f"{path}[{index}]", child


def source_path(payload: object, value: object) -> str:
    """The path of the payload field ``value`` was taken from: the same object, else an
    equal value of the same type (nearest the root first); ``$`` if none holds it."""
    equal: str | None = None
    level: list[tuple[str, object]] = [("$", payload)]
    for _ in range(MAX_DEPTH):
        following: list[tuple[str, object]] = []
        for path, node in level:
            for child_path, child in path_children(node, path):
                if child is value:
                    return child_path
                if equal is None and type(child) is type(value):
                    try:
                        if child == value:
                            equal = child_path
                    except (ArithmeticError, RecursionError):  # a signalling NaN; a document nested past the limit
                        pass
                following.append((child_path, child))
        if not following:
            break
        level = following
    return equal or "$"


def unfit_values(values: Mapping[Column[Any], object], payload: object) -> list[Problem]:
    """The problems of ``values`` (column → value about to be written)."""
    problems: list[Problem] = []
    for column, value in values.items():
        if value is None:
            continue
        check = check_of(column)
        if check is None:
            continue
        if check is _json:  # name the field inside the document, not the whole document
            problems += unfit_json(value, _label(column), payload)
            continue
        problem = check(value)
        if problem is not None:
            problems.append({"path": source_path(payload, value), "message": problem, "column": _label(column)})
    return problems[:_MAX_PROBLEMS]


def _label(column: Column[Any]) -> str:
    """``table.column``: made only for a problem (formatting the names is most of a
    check that finds none)."""
    return f"{column.table.name}.{column.name}" if column.table is not None else column.name


def unfit_json(value: object, column: str, payload: object) -> list[Problem]:
    """The problems of a JSON document about to be stored in ``column``."""
    problems: list[Problem] = []
    for where, problem, offending in json_problems(value, as_written=True):
        message = problem if where == "$" else f"{problem} (at {where})"
        path = source_path(payload, offending)
        if path == "$":  # past the depth source_path searches (a document nested too deep): its field
            path = source_path(payload, value)
        problems.append({"path": path, "message": message, "column": column})
        if len(problems) >= _MAX_PROBLEMS:
            break
    return problems


def stored_json(value: object, column: str, payload: object) -> Any:
    """``value`` as the JSON document stored in ``column``, refused (``Unfit``) if it does
    not fit. A value that holds itself, or nests past Python's recursion limit, makes the
    conversion recurse until ``RecursionError``: the same problem as nesting past the
    depth limit, given the same answer instead of an internal error."""
    try:
        stored = jsonable(value)
    except RecursionError:
        raise nested_without_end(column, value, payload, jsonable) from None
    except KeyCollision as exc:  # two keys of one text: the mapping's field, and where in the document
        where = source_path(value, exc.value)
        message = key_collision(*exc.keys)
        message = message if where == "$" else f"{message} (at {where})"
        raise Unfit([{"path": source_path(payload, exc.value), "message": message, "column": column}]) from None
    except Unjsonable as exc:  # a resolver's own object: the field it came from, if any
        message = f"holds a value of type {type(exc.value).__name__}, which has no JSON form: convert it first"
        raise Unfit([{"path": source_path(payload, exc.value), "message": message, "column": column}]) from None
    refuse(unfit_json(stored, column, payload))
    return stored


def nested_without_end(column: str, value: object, payload: object, convert: Callable[[Any], object]) -> Unfit:
    """The refusal of ``value`` for ``column``, whose ``convert``-ing recursed without end:
    at the payload field of the first of its parts whose conversion recurses too (the
    document's place within it, past the depth a path is searched to, cannot be named)."""
    message = f"is nested deeper than {MAX_DEPTH} levels (does it hold itself?)"
    path = "$"
    for _, part in path_children(value, "$"):
        try:
            convert(part)
        except RecursionError:
            path = source_path(payload, part)
            break
    return Unfit([{"path": path, "message": message, "column": column}])


#: The largest ``LIMIT`` or ``OFFSET`` both databases bind (a 64-bit integer).
_MAX_ROW_COUNT: Final = 2**63 - 1


def row_count_problems(stmt: Select[Any], payload: object) -> list[Problem]:
    """A negative ``LIMIT`` or ``OFFSET`` of a read's select: SQLite reads it as no limit
    or no offset, PostgreSQL refuses it (with no word of the field it came from); and one
    past 64 bits, which both refused as "the database refused a value" at ``$``."""
    problems: list[Problem] = []
    for clause, value in (("LIMIT", stmt._limit_clause), ("OFFSET", stmt._offset_clause)):
        count = getattr(value, "_limit_offset_value", None)  # an expression has none: the database's to check
        if not isinstance(count, int):
            continue
        if count < 0:
            message = f"must not be negative (the query's {clause}), not {count}"
        elif count > _MAX_ROW_COUNT:
            message = f"must be at most {_MAX_ROW_COUNT} (the query's {clause})"
        else:
            continue
        problems.append({"path": source_path(payload, count), "message": message, "column": clause})
    return problems


# --- a read's values ----------------------------------------------------------------

_ANY_TEXT: Final = _text(None)
_ANY_DECORATED_TEXT: Final = _text(None, decorated=True)
_WIDTHS: Final = {bits: _integer(bits) for bits in (16, 32, 64)}


def read_check(type_: TypeEngine[Any]) -> Check | None:
    """What a read's value compared with a column of ``type_`` is checked for: only what
    one database refuses and the other compares.  PostgreSQL casts each parameter to its
    column's type (an integer past the column's width is an error there, no match on
    SQLite) and takes no NUL; SQLite cannot bind a time outside UTC's years, nor keep NaN
    or a number of more than 15 significant digits; neither encodes a lone surrogate.  A
    text longer than its column is no error: no row holds it, so none matches, on both;
    but a text that is none of an enum's values is (PostgreSQL's enum type refuses it)."""
    decorated = isinstance(type_, TypeDecorator)
    if isinstance(type_, TypeDecorator):
        type_ = type_.impl_instance
    if isinstance(type_, Enum):
        return _enum(type_)
    if isinstance(type_, String):
        return _ANY_DECORATED_TEXT if decorated else _ANY_TEXT
    if isinstance(type_, Boolean):
        return _true_or_false
    if isinstance(type_, Integer):
        return _WIDTHS[16 if isinstance(type_, SmallInteger) else 64 if isinstance(type_, BigInteger) else 32]
    if isinstance(type_, DateTime):
        return _compared_moment
    if isinstance(type_, Date):
        return _compared_day
    if isinstance(type_, Uuid):
        return _uuid
    if isinstance(type_, Float):
        return _compared_float
    if isinstance(type_, Numeric):
        return _compared_decimal
    return None


def _compared_moment(value: object) -> str | None:
    """A value in a ``DateTime`` column's ``IN`` list whose first item is ``None`` (the list
    is bound as the column's type; otherwise as its first item's, which ``_kinds`` refuses
    in the words used here): PostgreSQL cast ISO text, SQLite's type failed on it."""
    if isinstance(value, str) or (isinstance(value, date) and not isinstance(value, datetime)):
        return "must be a datetime"
    return _moment(value)


def _compared_day(value: object) -> str | None:
    """A value in a ``Date`` column's ``IN`` list, as :func:`_compared_moment`."""
    return "must be a date" if isinstance(value, (str, datetime)) else None


def _compared_float(value: object) -> str | None:
    """A float compared with a number column: SQLite binds NaN as NULL (no row matches),
    PostgreSQL orders NaN above every number (``x < nan`` matched every row)."""
    return _NAN if isinstance(value, float) and math.isnan(value) else None


def _compared_decimal(value: object) -> str | None:
    """A ``Decimal`` compared with a number column: NaN as a float's, and more significant
    digits than SQLite's float keeps: SQLite rounded ``1.1000000000000000001`` to the
    ``1.10`` a row holds and matched it, PostgreSQL compared it exactly.  Nor one past
    PostgreSQL's ``numeric`` (refused there, infinity or 0 on SQLite), or so small that
    SQLite's float makes it 0 (``0 < 1e-400`` held on PostgreSQL only)."""
    if not isinstance(value, Decimal):
        return _compared_float(value)
    if value.is_nan():
        return _NAN
    problem = decimal_problem(value)
    if problem is not None:
        return problem
    if value.is_finite() and value and value.adjusted() < _SMALLEST_EXPONENT:
        return "must be 0 or at least 1e-300 in magnitude"
    digits = _significant(value) if value.is_finite() else 0
    if digits > FLOAT_DIGITS:
        return f"must have at most {FLOAT_DIGITS} significant digits, not {digits}"
    return None


_NAN: Final = "must be a number, not NaN"


#: Most values one read (or a projection delete's condition) compares: each is a
#: parameter of the statement, and PostgreSQL takes at most 65535 of them, SQLite (as
#: built by default) 32766; past either the database refuses the statement as a whole.
#: Below both, with room for the read's own (its tenant, limit, offset), so that both
#: databases give the same answer.
MAX_COMPARED: Final = 32_000


def read_problems(
    binds: Iterable[tuple[BindParameter[Any], object]], where: ClauseElement, payload: object
) -> list[Problem]:
    """The problems of the bound ``(parameter, value)`` pairs of ``where`` (a read's
    select, a delete's condition; the values of an ``IN`` list one by one), so that a value
    its column cannot hold is the same ``validation_error`` on both databases, naming the
    payload field, as in a write; and more values than :data:`MAX_COMPARED`, named by
    the longest ``IN`` list.  ``LIMIT`` and ``OFFSET`` are :func:`row_count_problems`'."""
    problems: list[Problem] = []
    compared = 0
    longest: tuple[int, BindParameter[Any] | None, object] = (0, None, None)
    for bind, value in binds:
        if bind.expanding and isinstance(value, (list, tuple)):
            compared += len(value)
            if len(value) > longest[0]:
                longest = (len(value), bind, value)
        else:
            compared += 1
        check = read_check(bind.type)
        if check is None or value is None or hasattr(bind, "_limit_offset_value"):
            continue
        for item in value if bind.expanding and isinstance(value, (list, tuple)) else (value,):
            problem = check(item)
            if problem is None and isinstance(item, str) and item.endswith("\\"):  # rare: look closer
                problem = _dangling_escape(item, where, bind)
            if problem is not None:
                path = source_path(payload, item)
                problems.append({"path": path, "message": problem, "column": _compared_with(where, bind)})
    count, in_list, values = longest
    if compared > MAX_COMPARED and in_list is not None:
        message = (
            f"holds {count} values, and a read compares at most {MAX_COMPARED} "
            "(each is a parameter of the statement); read in batches"
        )
        column = _compared_with(where, in_list)
        problems.insert(0, {"path": source_path(payload, values), "message": message, "column": column})
    return problems[:_MAX_PROBLEMS]


#: The operators whose pattern escapes with a backslash unless ``escape=`` names another.
_LIKES: Final = frozenset({operators.like_op, operators.not_like_op, operators.ilike_op, operators.not_ilike_op})


def _dangling_escape(value: str, where: ClauseElement, bind: BindParameter[Any]) -> str | None:
    """A LIKE pattern ending in an escape that escapes nothing: PostgreSQL raises an
    error once a row's text reaches it, SQLite finds no match.  Refused on both."""
    if (len(value) - len(value.rstrip("\\"))) % 2 == 0:
        return None
    for element in visitors.iterate(where):
        if (
            isinstance(element, BinaryExpression)
            and element.operator in _LIKES
            and element.modifiers.get("escape") is None
            and any(e is bind for e in visitors.iterate(element.right))
        ):
            return "must not end with a lone backslash (a LIKE pattern's escape character); write \\\\ for one"
    return None


def refuse_compared(binds: Iterable[tuple[BindParameter[Any], object]], where: ClauseElement, payload: object) -> None:
    """Raise :class:`Unfit` for the :func:`read_problems` of ``binds``."""
    problems = read_problems(binds, where, payload)
    if problems:
        raise Unfit(problems, "a value cannot be compared with its column")


def bound_values(where: ClauseElement) -> list[tuple[BindParameter[Any], object]]:
    """Every parameter of ``where`` with its value, by a walk of it (a select's cache
    key lists them without one)."""
    return [(e, e.effective_value) for e in visitors.iterate(where) if isinstance(e, BindParameter)]


def _compared_with(where: ClauseElement, bind: BindParameter[Any]) -> str:
    """``table.column`` that ``bind`` is compared with in ``where`` (looked for only for a
    problem: walking the statement costs more than checking every value)."""
    for element in visitors.iterate(where):
        if isinstance(element, BinaryExpression) and element.right is bind and isinstance(element.left, Column):
            return _label(element.left)
    return f"the parameter {bind._orig_key!r}" if isinstance(bind._orig_key, str) else "a parameter"


def refuse(problems: list[Problem]) -> None:
    if problems:
        raise Unfit(problems)
