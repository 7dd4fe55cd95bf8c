"""Sibling steps of a workflow that share a name one of them gives with ``name=`` (a wait's,
a branch's, a retry's): a stored run's path names its step by it, so boot refuses them
(``kumiko_typed._compat.ambiguous_names``); here the later step is reported.

The siblings are read from the chain of calls the step is made on, back to the start of
its block (the builder a feature, an arm or a body gave); a pipeline continued from a
variable is checked from there on.  A retry body is a ``SubPipeline``, as a handler's arms
are, so its steps are checked from the ``retry`` call, which is a workflow's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from mypy.nodes import ARG_NAMED, ARG_POS, CallExpr, Expression, LambdaExpr, MemberExpr
from mypy.plugin import MethodContext
from mypy.types import Type

from .. import _errors
from .._rules import rules
from .._typeops.chain import calls_back
from .._typeops.literals import literal_str_expr
from .._typeops.reported import fail

_BY_METHOD = {r.method: r for r in rules.STEP_RULES}


class _Named(NamedTuple):
    name: str
    kind: str
    #: Named by its ``name=`` (not by the key or the loop item it sets).
    by_argument: bool
    expr: Expression


def check(ctx: MethodContext) -> Type:
    call = ctx.context
    if isinstance(call, CallExpr):
        _check_step(ctx, call)
        if isinstance(call.callee, MemberExpr) and call.callee.name == "retry":
            _check_block(ctx, _argument(call, "do", None))
    return ctx.default_return_type


def _check_step(ctx: MethodContext, call: CallExpr) -> None:
    step = _named(call)
    if step is None:
        return
    first = next((s for s in map(_named, reversed(list(_earlier(call)))) if s and s.name == step.name), None)
    if first is None or not (first.by_argument or step.by_argument):
        return  # two keys of one name are kumiko-duplicate-step
    renamed = step if step.by_argument else first
    message = rules.msg_ambiguous_name(
        f'{first.kind} "{first.name}"', f'{step.kind} "{step.name}"', step.name, renamed.kind
    )
    fail(ctx, f"Sibling {message}", step.expr, code=_errors.DUPLICATE_STEP)


def _check_block(ctx: MethodContext, body: Expression | None) -> None:
    """Every step of a sub-pipeline lambda, and of the arms and bodies inside it."""
    if not isinstance(body, LambdaExpr):
        return
    last = body.expr()
    if not isinstance(last, CallExpr):
        return
    for call in [last, *_earlier(last)]:
        _check_step(ctx, call)
        for arm in ("on_true", "on_false", "do"):
            _check_block(ctx, _argument(call, arm, None))


def _earlier(call: CallExpr) -> Iterator[CallExpr]:
    """The step calls before ``call`` in its chain, the nearest first."""
    if not isinstance(call.callee, MemberExpr):
        return
    for earlier, callee in calls_back(call.callee.expr):
        if callee.name not in _BY_METHOD:
            return
        yield earlier


def _named(call: CallExpr) -> _Named | None:
    rule = _BY_METHOD.get(call.callee.name) if isinstance(call.callee, MemberExpr) else None
    if rule is None:
        return None
    if rule.key in ("name", "body"):  # its key, or its loop item: the first argument
        expr = _argument(call, "item" if rule.key == "body" else "name", 0)
    else:
        expr = _argument(call, "name", None)
    name = literal_str_expr(expr) if expr is not None else None
    if expr is None or not name:
        return None
    return _Named(name, rule.kind, rule.key not in ("name", "body"), expr)


def _argument(call: CallExpr, name: str, position: int | None) -> Expression | None:
    for i, (kind, given) in enumerate(zip(call.arg_kinds, call.arg_names, strict=True)):
        if (kind == ARG_NAMED and given == name) or (kind == ARG_POS and i == position):
            return call.args[i]
    return None
