"""A ``wait``'s duration or a ``wait_for_event``'s timeout written as a text: it must be an
ISO-8601 duration (``"PT30M"``, ``"P1D"``), which the App parses at boot.  mypy saw a ``str``
and accepted ``"1h"`` or ``"P1M"`` (months are refused: their length depends on the date);
the plugin reads a literal text (or a ``Final`` one) with the rule table's grammar and says
what the boot would, at the step (``kumiko-duration``).

One given as a number (``wait(5)``), which mypy refused showing the whole type expected (with
the callable's context type), is said in the plugin's words: the step does not read it as
seconds; write ``timedelta(seconds=5)`` or ``"PT5S"`` (still mypy's ``arg-type`` error: the
type is wrong, one error for the mistake).  So is a ``bool`` (``wait(True)``) and a negative
number (``wait(-5)``), which no fix with the same number would mend.  A ``timedelta(...)``
written with literal numbers that is negative (``timedelta(seconds=-1)``), which the boot
refuses, is a ``kumiko-duration`` error.  The words are the rule table's, which the boot
says too (``number_as_duration``, ``negative_duration``)"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from mypy.nodes import ARG_NAMED, ARG_POS, CallExpr, Expression, FloatExpr, IntExpr, RefExpr, UnaryExpr
from mypy.plugin import MethodContext
from mypy.types import Instance, Type, get_proper_type

from .. import _errors
from .._rules import rules
from .._typeops.args import arg_expr, arg_type
from .._typeops.literals import literal_str_expr
from .._typeops.refused import reword
from .._typeops.reported import fail

#: The argument that may be a duration text, by step method.
ARGUMENTS: Final = {"wait": "duration", "wait_for_event": "timeout"}
_NUMBERS: Final = frozenset({"builtins.int", "builtins.float", "builtins.bool"})
_TIMEDELTA: Final = "datetime.timedelta"


def check(method: str, ctx: MethodContext) -> Type:
    argument = ARGUMENTS[method]
    expr = arg_expr(ctx, argument)
    if expr is None:
        return ctx.default_return_type
    text = literal_str_expr(expr)
    problem = rules.duration_problem(text) if text is not None else None
    given = _literal_timedelta(expr)
    negative = rules.negative_duration(given) if given is not None else None
    if problem is not None:
        fail(ctx, f'{argument}= of step "{method}": {problem}', expr, code=_errors.DURATION)
    elif negative is not None:
        fail(ctx, f'{argument}= of step "{method}" {negative}', expr, code=_errors.DURATION)
    elif _number(arg_type(ctx, argument)):
        message = rules.msg_duration_number(method, argument, _literal_number(expr, arg_type(ctx, argument)))
        reword(ctx, expr, message, lambda _: False)  # a value has no lambda to repeat it
    return ctx.default_return_type


def _number(given: Type | None) -> bool:
    """Whether ``given`` is an ``int``, a ``float`` or a ``bool`` (mypy refuses each)."""
    proper = get_proper_type(given) if given is not None else None
    return isinstance(proper, Instance) and proper.type.fullname in _NUMBERS


def _literal_number(expr: Expression, given: Type | None) -> int | float | None:
    """A number (or ``bool``) written literally, or held by a ``Final`` constant; ``None`` for
    another."""
    written = _written_number(expr)
    if written is not None:
        return written
    proper = get_proper_type(given) if given is not None else None
    if isinstance(proper, Instance) and proper.last_known_value is not None:
        value = proper.last_known_value.value
        return value if isinstance(value, int | float) else None
    return None


def _written_number(expr: Expression) -> int | float | None:
    """``5``, ``1.5``, ``-5``, ``-1.5`` as written (``None``: no number literal)."""
    if isinstance(expr, IntExpr | FloatExpr):
        return expr.value
    if isinstance(expr, UnaryExpr) and expr.op in ("-", "+"):
        inner = _written_number(expr.expr)
        if inner is not None:
            return -inner if expr.op == "-" else inner
    return None


def _literal_timedelta(expr: Expression) -> timedelta | None:
    """The value of ``timedelta(...)`` written with number literals only (``timedelta(-1)``,
    ``timedelta(seconds=-1.5)``); ``None`` for anything else, or what ``timedelta`` refuses."""
    if not (isinstance(expr, CallExpr) and isinstance(expr.callee, RefExpr) and expr.callee.fullname == _TIMEDELTA):
        return None
    positional: list[int | float] = []
    named: dict[str, int | float] = {}
    for arg, kind, name in zip(expr.args, expr.arg_kinds, expr.arg_names, strict=True):
        value = _written_number(arg)
        if value is None or kind not in (ARG_POS, ARG_NAMED):
            return None
        if kind == ARG_POS:
            positional.append(value)
        elif name is not None:
            named[name] = value
    try:
        return timedelta(*positional, **named)
    except (TypeError, OverflowError, ValueError):
        return None  # mypy's own error (an unknown keyword), or no timedelta at all
