"""A ``wait``'s duration or a ``wait_for_event``'s timeout written as a text: it must be an
ISO-8601 duration (``"PT30M"``, ``"P1D"``), which the App parses at boot.  mypy saw a ``str``
and accepted ``"1h"`` or ``"P1M"`` (months are refused: their length depends on the date);
the plugin reads a literal text (or a ``Final`` one) with the rule table's grammar and says
what the boot would, at the step (``kumiko-duration``).

One given as a number (``wait(5)``), which mypy refused showing the whole type expected (with
the callable's context type), is said in the plugin's words: the step does not read it as
seconds; write ``timedelta(seconds=5)`` or ``"PT5S"`` (still mypy's ``arg-type`` error: the
type is wrong, one error for the mistake)."""

from __future__ import annotations

from typing import Final

from mypy.nodes import Expression, FloatExpr
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
_NUMBERS: Final = frozenset({"builtins.int", "builtins.float"})


def check(method: str, ctx: MethodContext) -> Type:
    argument = ARGUMENTS[method]
    expr = arg_expr(ctx, argument)
    if expr is None:
        return ctx.default_return_type
    text = literal_str_expr(expr)
    problem = rules.duration_problem(text) if text is not None else None
    if problem is not None:
        fail(ctx, f'{argument}= of step "{method}": {problem}', expr, code=_errors.DURATION)
    elif _number(arg_type(ctx, argument)):
        message = rules.msg_duration_number(method, argument, _literal_number(expr, arg_type(ctx, argument)))
        reword(ctx, expr, message, lambda _: False)  # a value has no lambda to repeat it
    return ctx.default_return_type


def _number(given: Type | None) -> bool:
    """Whether ``given`` is an ``int`` or a ``float`` (a ``bool`` is no number of seconds)."""
    proper = get_proper_type(given) if given is not None else None
    return isinstance(proper, Instance) and proper.type.fullname in _NUMBERS


def _literal_number(expr: Expression, given: Type | None) -> str | None:
    """A positive number written literally (or held by a ``Final`` constant), as written into
    the fix (``5``, ``1.5``); ``None`` for another."""
    if isinstance(expr, FloatExpr):
        return repr(expr.value)
    proper = get_proper_type(given) if given is not None else None
    if isinstance(proper, Instance) and proper.last_known_value is not None:
        value = proper.last_known_value.value
        return str(value) if isinstance(value, int) and value > 0 else None
    return None
