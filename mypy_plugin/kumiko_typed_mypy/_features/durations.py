"""A ``wait``'s duration or a ``wait_for_event``'s timeout written as a text: it must be an
ISO-8601 duration (``"PT30M"``, ``"P1D"``), which the App parses at boot.  mypy saw a ``str``
and accepted ``"1h"`` or ``"P1M"`` (months are refused: their length depends on the date);
the plugin reads a literal text (or a ``Final`` one) with the rule table's grammar and says
what the boot would, at the step (``kumiko-duration``)."""

from __future__ import annotations

from typing import Final

from mypy.plugin import MethodContext
from mypy.types import Type

from .. import _errors
from .._rules import rules
from .._typeops.args import arg_expr
from .._typeops.literals import literal_str_expr
from .._typeops.reported import fail

#: The argument that may be a duration text, by step method.
ARGUMENTS: Final = {"wait": "duration", "wait_for_event": "timeout"}


def check(method: str, ctx: MethodContext) -> Type:
    argument = ARGUMENTS[method]
    expr = arg_expr(ctx, argument)
    text = literal_str_expr(expr) if expr is not None else None
    problem = rules.duration_problem(text) if text is not None else None
    if expr is not None and problem is not None:
        fail(ctx, f'{argument}= of step "{method}": {problem}', expr, code=_errors.DURATION)
    return ctx.default_return_type
