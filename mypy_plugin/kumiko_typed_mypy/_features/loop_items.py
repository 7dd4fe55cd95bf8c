"""``c.scope["line"]`` in a step after the ``for_each`` whose item ``line`` is: the item
exists only inside the loop body, but mypy's error said only ``"line" is not a valid
TypedDict key; expected one of ()``, which reads as a typo.  After mypy has checked a
step's lambdas, this hook adds which loop's item it was and how to read the loop's
results after it (the keys its body set, ``T | None`` there).

The loops are read from the chain of calls the step is made on, back to the start of its
block (as ``sibling_names`` reads siblings); a read is matched to the scope by the keys
mypy listed, which are the receiver's scope's.
"""

from __future__ import annotations

import re
from typing import Final

from mypy.checker import TypeChecker
from mypy.messages import format_item_name_list
from mypy.nodes import ARG_NAMED, ARG_POS, CallExpr, Expression, MemberExpr
from mypy.plugin import MethodContext
from mypy.types import Instance, get_proper_type

from .._names import SCOPE_ARG, STEPS_ARG
from .._rules import rules
from .._typeops.chain import calls_back
from .._typeops.keys import keys_of
from .._typeops.literals import literal_str_expr
from .._typeops.reported import recorded_in

_UNKNOWN_KEY: Final = re.compile(r'^"(?P<key>.*?)" is not a valid TypedDict key; expected one of (?P<listed>\(.*?\))')
#: In every explanation: an error explained once (by the step, or a pass before) is not again.
_EXPLAINED: Final = '" is the item of the for_each on line '


def explain(ctx: MethodContext) -> None:
    call = ctx.context
    checker = ctx.api
    receiver = get_proper_type(ctx.type)
    if not (
        isinstance(call, CallExpr)
        and isinstance(call.callee, MemberExpr)
        and isinstance(checker, TypeChecker)
        and isinstance(receiver, Instance)
        and len(receiver.args) > SCOPE_ARG
    ):
        return
    scope, steps = keys_of(receiver.args[SCOPE_ARG]), keys_of(receiver.args[STEPS_ARG])
    if not isinstance(scope, dict):
        return
    listed = format_item_name_list(list(scope))
    own = (call.callee.end_line or call.line, call.callee.end_column or 0)
    for info in recorded_in(checker.msg.errors, call):
        match = _UNKNOWN_KEY.match(info.message)
        if (
            info.severity != "error"
            or (info.line, info.column) < own
            or _EXPLAINED in info.message
            or match is None
            or match["listed"] != listed
            # Then the read may be of c.steps: no telling which.
            or (isinstance(steps, dict) and format_item_name_list(list(steps)) == listed)
        ):
            continue
        loop = _loop_of(call.callee.expr, match["key"])
        if loop is not None:
            line = loop.callee.end_line or loop.line  # the chain's first line is the call's own
            message = rules.msg_loop_item_after_loop(match["key"], line, _body_keys(checker, loop))
            info.message += f"; {message}"


def _loop_of(receiver: Expression, item: str) -> CallExpr | None:
    """The nearest ``for_each`` call before the step in its chain whose item is ``item``."""
    for call, callee in calls_back(receiver):
        named = _item(call) if callee.name == "for_each" else None
        if named is not None and literal_str_expr(named) == item:
            return call
    return None


def _item(call: CallExpr) -> Expression | None:
    for i, (kind, name) in enumerate(zip(call.arg_kinds, call.arg_names, strict=True)):
        if (kind == ARG_NAMED and name == "item") or (kind == ARG_POS and i == 0):
            return call.args[i]
    return None


def _body_keys(checker: TypeChecker, loop: CallExpr) -> list[str]:
    """The keys the loop's body set: those it has that its receiver had not."""
    assert isinstance(loop.callee, MemberExpr)
    before, after = (get_proper_type(checker.lookup_type_or_none(e)) for e in (loop.callee.expr, loop))
    if not (isinstance(before, Instance) and isinstance(after, Instance)):
        return []
    had, has = keys_of(before.args[STEPS_ARG]), keys_of(after.args[STEPS_ARG])
    if not (isinstance(had, dict) and isinstance(has, dict)):
        return []
    return [key for key in has if key not in had]
