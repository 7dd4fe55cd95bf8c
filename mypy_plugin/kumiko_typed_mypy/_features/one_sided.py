"""A key only one side of a conditional expression sets, read after it: mypy's error says
the key does not exist, which the step that sets it seems to contradict.  This adds why:
the pipeline built with the other side has no such step (reading it would raise
``KeyError`` at run time), and what to do instead.

The conditional either chooses the builder mid-chain, ``(p.compute("x", ...) if F else p)``,
or is a branch arm's or loop body's lambda, ``on_true=lambda b: b.compute(...) if F else b``
(keys.common keeps the keys every side sets).  Both are found by walking the chain of steps
the read's step is called on; only errors in that step's own arguments are explained, so
a conditional is always before the read.  A builder variable extended in an ``if``
statement, ``if F: p = p.compute("x", ...)``, is the same mistake: the ``if`` statements of
the enclosing function (or module, or class body) before the read that set the key on some
of their paths are explained alike."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from mypy.checker import TypeChecker
from mypy.nodes import (
    AssignmentStmt,
    CallExpr,
    ConditionalExpr,
    Expression,
    FuncDef,
    IfStmt,
    LambdaExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    Statement,
    TypeInfo,
)
from mypy.plugin import CheckerPluginInterface, MethodContext
from mypy.types import Instance, Type, get_proper_type

from .._names import STEPS_ARG
from .._typeops.callbacks import chosen_steps
from .._typeops.keys import keys_of
from .._typeops.reported import recorded_in
from .._typeops.statements import statements

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
    branch = ", or use a branch step, whose arm that does not run sets it to None"
    for info, key in unknown:
        for line, sides, chained in conditionals:
            if any(key in keys for keys in sides) and not all(key in keys for keys in sides):
                # Mid-chain, a branch does what was meant; in an arm, the branch is there already.
                fix = branch if chained else ""
                info.message += (
                    f'; "{key}" {_WHY} on line {line} only: the pipeline built with the other side has no '
                    f"such step; set it on both sides{fix}"
                )
                break
        else:
            at = _if_setting(ctx.api, _root(call.callee.expr), key, call.line)
            if at is not None:
                info.message += (
                    f'; "{key}" is set on some paths of the if statement on line {at} only: the pipeline '
                    f"built on the others has no such step; set it on every path{branch}"
                )


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


def _root(expr: Expression) -> Expression:
    """The expression a chain of steps starts from (``p`` of ``p.compute(...).guard(...)``)."""
    while isinstance(expr, CallExpr) and isinstance(expr.callee, MemberExpr):
        expr = expr.callee.expr
    return expr


def _if_setting(api: CheckerPluginInterface, root: Expression, key: str, before: int) -> int | None:
    """The line of an ``if`` statement before line ``before`` that assigns to variable ``root``
    a builder with ``key`` on some of its paths but not on all (an ``if`` without ``else``
    has a path that assigns nothing)."""
    if not (isinstance(root, NameExpr) and isinstance(api, TypeChecker)):
        return None
    for stmt in statements(_scope_body(api), loops=True):
        if isinstance(stmt, IfStmt) and stmt.line < before:
            paths = [*stmt.body, stmt.else_body]
            sets = [block is not None and _sets(api, block.body, root.name, key) for block in paths]
            if any(sets) and not all(sets):
                return stmt.line
    return None


def _scope_body(api: TypeChecker) -> list[Statement]:
    """The statements of the function, class body or module the checker is in (not a lambda's)."""
    for node in reversed(api.scope.stack):
        if isinstance(node, FuncDef):
            return node.body.body
        if isinstance(node, TypeInfo):
            return node.defn.defs.body
        if isinstance(node, MypyFile):
            return node.defs
    return []


def _sets(api: TypeChecker, body: list[Statement], name: str, key: str) -> bool:
    """Whether ``body`` assigns to ``name`` a builder that has ``key``."""
    for stmt in statements(body, loops=True):
        if isinstance(stmt, AssignmentStmt) and any(
            isinstance(lv, NameExpr) and lv.name == name for lv in stmt.lvalues
        ):
            given = get_proper_type(api.lookup_type_or_none(stmt.rvalue))
            if isinstance(given, Instance) and len(given.args) > STEPS_ARG:
                keys = keys_of(given.args[STEPS_ARG])
                if isinstance(keys, dict) and key in keys:
                    return True
    return False
