"""A key only one side of a conditional expression sets, read after it: mypy's error says
the key does not exist, which the step that sets it seems to contradict.  This adds why:
the pipeline built with the other side has no such step (reading it would raise
``KeyError`` at run time), and what to do instead.

The conditional either chooses the builder mid-chain, ``(p.compute("x", ...) if F else p)``,
or is a branch arm's or loop body's lambda, ``on_true=lambda b: b.compute(...) if F else b``
(keys.common keeps the keys every side sets).  Both are found by walking the chain of steps
the read's step is called on; only errors in that step's own arguments are explained, so
a conditional is always before the read."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from mypy.nodes import CallExpr, ConditionalExpr, Expression, LambdaExpr, MemberExpr
from mypy.plugin import CheckerPluginInterface, MethodContext
from mypy.types import Type

from .._typeops.callbacks import chosen_steps
from .._typeops.keys import keys_of
from .._typeops.reported import recorded_in

_UNKNOWN_KEY: Final = re.compile(r'^"(?P<key>.*?)" is not a valid TypedDict key; expected one of \(')
_WHY: Final = "is set on one side of the conditional expression"


def explain(ctx: MethodContext) -> None:
    call = ctx.context
    if not (isinstance(call, CallExpr) and isinstance(call.callee, MemberExpr)):
        return
    own = (call.callee.end_line or call.line, call.callee.end_column or 0)
    unknown = [
        (info, match["key"])
        for info in recorded_in(ctx.api.msg.errors, call)
        if info.severity == "error"
        and (info.line, info.column) >= own
        and _WHY not in info.message
        and (match := _UNKNOWN_KEY.match(info.message)) is not None
    ]
    if not unknown:
        return
    conditionals = list(_conditionals(ctx.api, call.callee.expr))
    for info, key in unknown:
        for line, sides, chained in conditionals:
            if any(key in keys for keys in sides) and not all(key in keys for keys in sides):
                # Mid-chain, a branch does what was meant; in an arm, the branch is there already.
                fix = ", or use a branch step, whose arm that does not run sets it to None" if chained else ""
                info.message += (
                    f'; "{key}" {_WHY} on line {line} only: the pipeline built with the other side has no '
                    f"such step; set it on both sides{fix}"
                )
                break


def _conditionals(api: CheckerPluginInterface, expr: Expression) -> Iterator[tuple[int, list[dict[str, Type]], bool]]:
    """The conditional expressions of the chain of steps ``expr`` (the receiver) is, newest
    first, with the keys each side's builder has, and whether it is in the chain itself
    (not an arm's or body's lambda)."""
    while True:
        if isinstance(expr, ConditionalExpr):
            yield from _keyed(api, expr, chained=True)
            return
        if not (isinstance(expr, CallExpr) and isinstance(expr.callee, MemberExpr)):
            return
        for arg in expr.args:
            if isinstance(arg, LambdaExpr) and isinstance(arg.expr(), ConditionalExpr):
                yield from _keyed(api, arg.expr(), chained=False)
        expr = expr.callee.expr


def _keyed(
    api: CheckerPluginInterface, expr: Expression, *, chained: bool
) -> Iterator[tuple[int, list[dict[str, Type]], bool]]:
    steps = chosen_steps(api, expr)
    sides = [keys_of(s) for s in steps or ()]
    known = [k for k in sides if isinstance(k, dict)]
    if len(known) > 1 and len(known) == len(sides):
        yield expr.line, known, chained
