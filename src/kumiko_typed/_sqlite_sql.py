"""The SQL the App's SQLite engine writes: SQLite's, with PostgreSQL's answers where the
two differ (a LIKE's escape, a JSON element, a division by zero, text cast to a number,
arithmetic past its type, a ``Numeric``'s product and quotient, math functions, a JSON
column's declared type, where NULLs sort).  Installed on the engine by ``_engine``."""

from __future__ import annotations

from typing import Any, Final, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    Integer,
    Numeric,
    SmallInteger,
    String,
    Uuid,
    func,
)
from sqlalchemy.dialects.sqlite.base import SQLiteCompiler, SQLiteTypeCompiler
from sqlalchemy.sql import operators
from sqlalchemy.sql.compiler import OPERATORS
from sqlalchemy.sql.elements import ClauseList, ColumnClause, ColumnElement, FunctionFilter, UnaryExpression
from sqlalchemy.sql.functions import FunctionElement

from ._kinds import computed_exactly, computes_a_float, exact_quotient, nested_arithmetic, numeric_scale
from ._sqlite_functions import (
    CAST_NUMBER,
    CAST_NUMERIC,
    CAST_TEXT,
    DIVISOR,
    EXACT,
    FINITE,
    JSON_AS,
    MATH,
    REMAINDER,
    SUBSTR,
    UUID_TEXT,
    WHOLE,
)

__all__ = ["JSON_TEXT", "SQLiteStatements", "SQLiteTypes"]


#: The declared type of a JSON column in a table this engine creates on SQLite.  SQLite
#: picks a column's affinity from its declared type's name, and ``JSON`` (SQLAlchemy's
#: name) has NUMERIC affinity: a JSON text that is a bare number was stored as a number,
#: so ``1.0`` read back as ``1``, ``-0.0`` as ``0`` and ``2**64`` as a float, where
#: PostgreSQL gives the value written.  A name holding ``TEXT`` has TEXT affinity, which
#: keeps the text as bound; SQLite's JSON functions read it as before.
JSON_TEXT: Final = "JSONTEXT"


class SQLiteTypes(SQLiteTypeCompiler):
    """This engine's DDL types: SQLite's, but a JSON column as ``JSONTEXT``."""

    def visit_JSON(self, type_: Any, **kw: Any) -> str:
        return JSON_TEXT


#: PostgreSQL's escape character of a LIKE pattern that names none.
_LIKE_ESCAPE: Final = " ESCAPE '\\'"


#: What ``as_string()``, ``as_integer()``, ``as_float()`` and ``as_boolean()`` of a JSON
#: element read, by :func:`~._sqlite_functions.json_as`.
_JSON_TARGETS: Final[dict[type[Any], str]] = {String: "text", Integer: "integer", Float: "float", Boolean: "boolean"}


class SQLiteStatements(SQLiteCompiler):
    r"""This engine's SQL: SQLite's, but a ``LIKE`` (and ``ILIKE``, which SQLite compiles
    to one) without an ``escape=`` escapes with a backslash, as PostgreSQL's does.  SQLite
    has no escape character by default, so ``like(r"50\%")`` found "50%" on PostgreSQL
    only, and "50\x" on SQLite only."""

    def visit_like_op_binary(self, binary: Any, operator: Any, **kw: Any) -> str:
        return _escaped(binary, cast(Any, super()).visit_like_op_binary(binary, operator, **kw))  # untyped

    def visit_not_like_op_binary(self, binary: Any, operator: Any, **kw: Any) -> str:
        return _escaped(binary, cast(Any, super()).visit_not_like_op_binary(binary, operator, **kw))

    def visit_json_getitem_op_binary(self, binary: Any, operator: Any, _cast_applied: Any = False, **kw: Any) -> str:
        kw["_cast_applied"] = _cast_applied
        return self._json_element(binary, operator, cast(Any, super()).visit_json_getitem_op_binary, kw)

    def visit_json_path_getitem_op_binary(
        self, binary: Any, operator: Any, _cast_applied: Any = False, **kw: Any
    ) -> str:
        kw["_cast_applied"] = _cast_applied
        return self._json_element(binary, operator, cast(Any, super()).visit_json_path_getitem_op_binary, kw)

    def visit_truediv_binary(self, binary: Any, operator: Any, **kw: Any) -> str:
        if computed_exactly(binary):
            return self._exact(binary, "/", kw)
        divided = str(cast(Any, super()).visit_truediv_binary(_checked_divisor(binary), operator, **kw))
        return _finite(binary.type, divided)

    def visit_expression_clauselist(self, clauselist: Any, **kw: Any) -> str:
        """``a + b + c`` (one list to SQLAlchemy) as the binaries it computes, each as
        :meth:`visit_add_binary` writes it: written as a list, SQLite computed it in floats
        and 64 bits (``n + n + n`` past 32 bits answered, ``0.10 + 0.10 + 0.10 > 0.30``
        held)."""
        if clauselist.operator in _ARITHMETIC:
            return self.process(nested_arithmetic(clauselist), **kw)
        return str(cast(Any, super()).visit_expression_clauselist(clauselist, **kw))

    def visit_add_binary(self, binary: Any, operator: Any, **kw: Any) -> str:
        return self._float_arithmetic(binary, operator, kw)

    visit_sub_binary = visit_mul_binary = visit_add_binary

    def visit_sum_func(self, fn: Any, **kw: Any) -> str:
        """``sum``/``avg``/``total`` of a float past its range: PostgreSQL's overflow, not
        SQLite's infinity."""
        bare = kw.pop(_BARE, False)
        computed = f"{fn.name}{self.function_argspec(fn, **kw)}"
        return computed if bare else _finite(_summed(fn), computed)

    visit_avg_func = visit_total_func = visit_sum_func

    def visit_funcfilter(self, funcfilter: Any, **kw: Any) -> str:
        """``sum(x) FILTER (WHERE ...)``, checked around the whole, as in a window."""
        bare = kw.pop(_BARE, False)
        text = str(cast(Any, super()).visit_funcfilter(funcfilter, **kw, **{_BARE: True}))
        return text if bare else _finite_aggregate(funcfilter, text)

    def _exact(self, binary: Any, sign: str, kw: dict[str, Any]) -> str:
        """``binary``, :func:`~._kinds.computed_exactly`, as PostgreSQL's ``numeric``
        computes it (:func:`~._sqlite_functions.exact`), given each side's scale where
        its type says one."""
        sides = (binary.left, binary.right)
        scales = ", ".join(str(_scale(side.type)) for side in sides)
        operands = ", ".join(self.process(side, **kw) for side in sides)
        return f"{EXACT}('{sign}', {scales}, {operands})"

    def _float_arithmetic(self, binary: Any, operator: Any, kw: dict[str, Any]) -> str:
        """``a + b``, ``a - b``, ``a * b`` as SQLite writes them, through
        :func:`~._sqlite_functions.finite` when a float: past its range SQLite made it
        infinity, PostgreSQL refuses it; of integers, through
        :func:`~._sqlite_functions.whole` with PostgreSQL's width of the result (SQLite
        computes in 64 bits and made a float past them).  Of a ``Numeric`` (with a
        ``Numeric`` or an integer) PostgreSQL's decimal answer: where the types say its
        places, SQLite's float rounded to them by its own ``ROUND`` (the float is within
        far less than half a place of that answer, of at most 15 digits, and ``ROUND``
        gives the float nearest it, at C's speed: ``0.10 + 0.20`` was 0.30000000000000004);
        else :func:`~._sqlite_functions.exact`."""
        text = str(cast(Any, self)._generate_generic_binary(binary, OPERATORS[operator], **kw))
        if computed_exactly(binary):
            places = None if exact_quotient(binary) else numeric_scale(binary)
            return self._exact(binary, _SIGNS[operator], kw) if places is None else f"ROUND({text}, {places})"
        bits = _integer_bits(binary)
        return _finite(binary.type, text) if bits is None else f"{WHOLE}({bits}, {text})"

    def visit_floordiv_binary(self, binary: Any, operator: Any, **kw: Any) -> str:
        """``a // b``: of two integers SQLAlchemy's ``/`` (truncating toward zero on both),
        else PostgreSQL's ``floor`` of the quotient (:meth:`visit_round_func`): SQLite's
        ``FLOOR`` of a float quotient was an integer (``x // 2`` read 1, PostgreSQL's 1.0)
        and of a ``Numeric`` one a float's (``0.30 // 0.1`` was 2, PostgreSQL's 3)."""
        if {binary.left.type._type_affinity, binary.right.type._type_affinity} == {Integer}:
            return str(cast(Any, super()).visit_floordiv_binary(_checked_divisor(binary), operator, **kw))
        return self.process(func.floor(operators.truediv(binary.left, binary.right)), **kw)

    def visit_mod_binary(self, binary: Any, operator: Any, **kw: Any) -> str:
        """``a % b`` with the divisor checked; of a ``Numeric``, PostgreSQL's remainder
        (:func:`~._sqlite_functions.remainder`): SQLite's ``%`` makes both sides integers,
        so ``5.5 % 2`` was 1 and ``x % 0.3`` NULL (a division by the integer 0)."""
        if Numeric in (binary.left.type._type_affinity, binary.right.type._type_affinity):
            return f"{REMAINDER}({self.process(binary.left, **kw)}, {self.process(binary.right, **kw)})"
        return str(cast(Any, super()).visit_mod_binary(_checked_divisor(binary), operator, **kw))

    def visit_cast(self, cast: Any, **kwargs: Any) -> str:
        """A cast as PostgreSQL's, where SQLite's answers otherwise: text to a number or
        true/false by PostgreSQL's input rules (``_sqlite_functions``; SQLite made ``'5.5'``
        a 5 and ``'abc'`` a 0), a number to an integer rounded (SQLite truncated 1.5 to
        1), true/false to ``'true'``/``'false'`` (SQLite: ``'1'``/``'0'``), and a time to a
        date or back by SQLite's date functions (SQLite's ``CAST(... AS DATE)`` made the
        text ``'2024-03-10 ...'`` the number 2024, which the read then failed on), a number
        to a ``Numeric(p, s)`` refused past its digits (SQLite's has no limit), a UUID to
        its hyphenated text (SQLite: the 32 hex digits it stores)."""
        into, source = cast.type._type_affinity, cast.clause.type._type_affinity
        target = _CAST_TARGETS.get(into)
        if into is Integer:
            target = _integer(cast.type)
        if target is not None and source is String:
            return f"{CAST_TEXT}('{target}', {self.process(cast.clause, **kwargs)})"
        if into is Integer and source in (Numeric, Float):
            exact = int(source is Numeric)
            return f"{CAST_NUMBER}('{target}', {exact}, {self.process(cast.clause, **kwargs)})"
        if into is String and source is Boolean:
            return f"CASE {self.process(cast.clause, **kwargs)} WHEN 1 THEN 'true' WHEN 0 THEN 'false' END"
        if into is Numeric and cast.type.precision is not None and source is not String:
            inner = self.process(cast.clause, **kwargs)
            scale = cast.type.scale or 0
            into_type = self.dialect.type_compiler_instance.process(cast.type)
            inexact = int(source is not Numeric or computes_a_float(cast.clause))
            return f"CAST({CAST_NUMERIC}({cast.type.precision}, {scale}, {inexact}, {inner}) AS {into_type})"
        if into is String and source is Uuid:
            return f"{UUID_TEXT}({self.process(cast.clause, **kwargs)})"
        if into is Date and source is DateTime:
            return f"DATE({self.process(cast.clause, **kwargs)})"
        if into is DateTime and source is Date:
            return f"DATETIME({self.process(cast.clause, **kwargs)})"
        untyped: Any = super().visit_cast  # SQLAlchemy's compiler is untyped
        return str(untyped(cast, **kwargs))

    def order_by_clause(self, select: Any, **kw: Any) -> str:
        """``ORDER BY`` with NULLs where PostgreSQL puts them when the query does not say:
        last in ascending order, first in descending.  SQLite's default is the reverse, so
        one query paged the rows in another order on each database."""
        clauses = [_nulls_as_postgresql(c) for c in select._order_by_clauses]
        order_by: str = cast(Any, self)._generate_delimited_list(clauses, ", ", **kw)  # untyped
        return " ORDER BY " + order_by if order_by else ""

    def visit_over(self, over: Any, **kw: Any) -> str:
        """A window's ``ORDER BY``, as :meth:`order_by_clause` (``row_number()`` numbered
        the NULL rows first on SQLite only); its ``sum``/``avg`` checked around the whole
        window expression, as :meth:`visit_sum_func` checks a plain one: SQLite takes no
        ``OVER`` after a plain function (``kumiko_finite(sum(x)) OVER (...)``)."""
        if over.order_by is not None and len(over.order_by):
            over = over._clone()
            over.order_by = ClauseList(*(_nulls_as_postgresql(c) for c in over.order_by))
        kw.pop(_BARE, None)
        return _finite_aggregate(over.element, str(cast(Any, super()).visit_over(over, **kw, **{_BARE: True})))

    def visit_substr_func(self, fn: Any, **kw: Any) -> str:
        """PostgreSQL's ``substr`` (:func:`~._sqlite_functions.substr`): SQLite counted a
        negative start from the end and took a negative length."""
        return f"{SUBSTR}{self.function_argspec(fn, **kw)}"

    visit_substring_func = visit_substr_func

    def visit_round_func(self, fn: Any, **kw: Any) -> str:
        """PostgreSQL's ``round``, ``sign``, ``sqrt``, ``power``, ``floor`` and ``ceil``
        (:func:`~._sqlite_functions.math_`), of a ``numeric`` (an integer rounded to
        places is one to PostgreSQL) or else of a double precision."""
        args = list(fn.clauses)
        exact = any(a.type._type_affinity is Numeric for a in args) or (fn.name.lower() == "round" and len(args) > 1)
        arguments = "".join(f", {self.process(a, **kw)}" for a in args)
        return f"{MATH}('{fn.name.lower()}', {int(exact)}{arguments})"

    visit_sign_func = visit_sqrt_func = visit_power_func = visit_round_func
    visit_floor_func = visit_ceil_func = visit_ceiling_func = visit_round_func

    def _json_element(self, binary: Any, operator: Any, compile_: Any, kw: dict[str, Any]) -> str:
        """``doc["key"]`` as PostgreSQL reads it.  As JSON it is SQL NULL where the document
        has no such key, as PostgreSQL's ``->``: SQLAlchemy's ``JSON_QUOTE(JSON_EXTRACT(...))``
        made it the text ``'null'``, so ``doc["key"].is_(None)`` found the rows without the
        key on PostgreSQL only (a key holding JSON's null stays ``'null'`` on both).  As
        text, a number or true/false it is :func:`~._sqlite_functions.json_as`'s."""
        affinity = binary.type._type_affinity
        target = _JSON_TARGETS.get(affinity)
        if target is None:
            compiled = str(compile_(binary, operator, **kw))
            if affinity is not JSON:
                return compiled  # as_numeric(): SQLAlchemy's cast
        kw.pop("_cast_applied")
        left, right = self.process(binary.left, **kw), self.process(binary.right, **kw)
        if target is not None:
            return f"{JSON_AS}('{target}', JSON_TYPE({left}, {right}), JSON_EXTRACT({left}, {right}))"
        return f"CASE WHEN JSON_TYPE({left}, {right}) IS NULL THEN NULL ELSE {compiled} END"


_NULLS: Final = (operators.nulls_first_op, operators.nulls_last_op)
_SIGNS: Final = {operators.add: "+", operators.sub: "-", operators.mul: "*"}
_ARITHMETIC: Final = frozenset({*_SIGNS, operators.truediv, operators.floordiv, operators.mod})


def _nulls_as_postgresql(clause: Any) -> Any:
    """``clause`` of an ORDER BY with PostgreSQL's NULL order written out, unless it says
    its own or sorts a NOT NULL column (whose NULL order cannot matter: its SQL stays as
    written).  SQLite still reads a ``NULLS LAST`` order from an index (no sort step)."""
    if not isinstance(clause, ColumnElement) or (isinstance(clause, UnaryExpression) and clause.modifier in _NULLS):
        return clause  # SQL text is the database's, as everywhere
    descending = isinstance(clause, UnaryExpression) and clause.modifier is operators.desc_op
    sorted_by = clause.element if isinstance(clause, UnaryExpression) and clause.modifier is not None else clause
    if isinstance(sorted_by, ColumnClause) and getattr(sorted_by, "nullable", True) is False:
        return clause
    return clause.nulls_first() if descending else clause.nulls_last()


#: A compiler keyword: render a ``sum``/``avg``/``total`` unchecked, the ``OVER`` or
#: ``FILTER`` around it being checked instead.
_BARE: Final = "kumiko_bare_aggregate"
_SUMS: Final = frozenset({"sum", "avg", "total"})


def _summed(fn: Any) -> Any:
    """The type whose range a ``sum``/``avg``/``total`` of ``fn``'s arguments may pass."""
    return next((c.type for c in fn.clauses if _is_float(c.type)), fn.type)


def _finite_aggregate(element: Any, text: str) -> str:
    """``text`` (a window or a filtered aggregate over ``element``) checked as
    :meth:`SQLiteStatements.visit_sum_func` checks a plain ``sum``, if ``element`` is one."""
    fn = element.func if isinstance(element, FunctionFilter) else element
    if not isinstance(fn, FunctionElement) or fn.name.lower() not in _SUMS:
        return text
    return _finite(_summed(fn), text)


def _is_float(type_: Any) -> bool:
    return type_._type_affinity is Float


def _finite(type_: Any, text: str) -> str:
    """``text``, a computed value of ``type_``, refused past a float's range if a float."""
    return f"{FINITE}({text})" if _is_float(type_) else text


def _scale(type_: Any) -> int:
    """A side's scale as its type declares it (an integer's is 0); -1 where it declares
    none (the value's own places are taken)."""
    if type_._type_affinity is Integer:
        return 0
    scale = getattr(type_, "scale", None)
    return -1 if scale is None else int(scale)


def _integer_bits(binary: Any) -> int | None:
    """PostgreSQL's width of ``binary`` (``+ - *``) if it computes integers: its widest
    side's (a function's taken as 64 bits: ``count()`` is a ``bigint`` there)."""
    widths = [_bits(side) for side in (binary.left, binary.right)]
    if None in widths or binary.type._type_affinity is not Integer:
        return None
    return max(cast(list[int], widths))


def _bits(side: Any) -> int | None:
    type_ = side.type
    if type_._type_affinity is not Integer or computes_a_float(side):
        return None  # not an integer, or one SQLAlchemy types so that PostgreSQL computes as a float (n // x)
    if isinstance(side, FunctionElement) or isinstance(type_, BigInteger):
        return 64
    return 16 if isinstance(type_, SmallInteger) else 32


def _checked_divisor(binary: Any) -> Any:
    """``binary`` (a division or modulo) with its divisor refused when zero, as PostgreSQL
    does: SQLite's ``7 / 0`` is NULL.  Given the dividend too: ``NULL / 0`` is NULL on
    PostgreSQL, whose operators are not called with a NULL."""
    checked = binary._clone()
    checked.right = getattr(func, DIVISOR)(binary.right, binary.left, type_=binary.right.type)
    return checked


#: Casts of text :func:`~._sqlite_functions.cast_text` reads.
_CAST_TARGETS: Final[dict[type[Any], str]] = {Float: "float", Boolean: "boolean"}


def _integer(type_: Any) -> str:
    """PostgreSQL's integer type a cast to ``type_`` names."""
    if isinstance(type_, BigInteger):
        return "bigint"
    return "smallint" if isinstance(type_, SmallInteger) else "integer"


def _escaped(binary: Any, text: str) -> str:
    """``text``, a compiled LIKE, with PostgreSQL's escape character unless it names one."""
    return text if binary.modifiers.get("escape") is not None else text + _LIKE_ESCAPE
