"""A key only one side of a conditional expression sets, read after it: mypy's error says
the key does not exist, which the step that sets it seems to contradict.  This adds why:
the pipeline built with the other side has no such step (reading it would raise
``KeyError`` at run time), and what to do instead.

The conditional either chooses the builder mid-chain, ``(p.compute("x", ...) if F else p)``,
or is a branch arm's or loop body's lambda, ``on_true=lambda b: b.compute(...) if F else b``
(keys.common keeps the keys every side sets).  Both are found by walking the chain of steps
the read's step is called on; only errors in that step's own arguments are explained, so
a conditional is always before the read.  A builder variable extended in an ``if``
statement, ``if F: p = p.compute("x", ...)``, is the same mistake, explained alike; so is
one extended in a ``match`` statement's cases, in a ``try`` statement's body or clauses (an
exception may leave the body before the step), or in a loop (which may run no time, or add
the step twice).  Only the statement that decides the key on the read's path is named: the
statements before the read are walked backwards to the last assignment of the variable,
so an ``if`` followed by a builder of its own (``p = shop.pipeline(...)``), or the ``if``
whose other path the read is on, is not blamed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

from mypy.checker import TypeChecker
from mypy.nodes import (
    AssignmentStmt,
    CallExpr,
    ConditionalExpr,
    Expression,
    ForStmt,
    IfStmt,
    LambdaExpr,
    MatchStmt,
    MemberExpr,
    NameExpr,
    Statement,
    TryStmt,
    WhileStmt,
    WithStmt,
)
from mypy.patterns import AsPattern
from mypy.plugin import CheckerPluginInterface, MethodContext
from mypy.types import Instance, Type, get_proper_type

from .._names import STEPS_ARG
from .._typeops.callbacks import chosen_steps
from .._typeops.keys import keys_of
from .._typeops.reported import recorded_in
from .._typeops.statements import blocks, chain_root, scope_body, statements

_UNKNOWN_KEY: Final = re.compile(r'^"(?P<key>.*?)" is not a valid TypedDict key; expected one of \(')
_WHY: Final = "is set on one side of the conditional expression"
#: In every explanation: an error explained once (by the step, or a pass before) is not again.
_EXPLAINED: Final = '" is set '


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
        and _EXPLAINED not in info.message
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
            blamed = _decider(ctx.api, chain_root(call.callee.expr), key, call.line)
            if blamed is not None:
                info.message += f'; "{key}" ' + _why_statement(blamed, branch)


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


@dataclass(frozen=True)
class _Blame:
    """The statement that decides whether a key exists: ``kind`` is ``if``, ``match``,
    ``try``, ``try-body`` (a ``try`` body an exception may leave before it sets the key),
    ``try-except`` (the same, read in an ``except`` clause), ``loop``, or ``conditional`` (an
    expression assigned, ``p = p.compute(...) if F else p``)."""

    kind: str
    line: int


#: What a statement does to the variable's key, read backwards from the read: ``_Blame``
#: (decided on some paths only), "sets" (on every path), "stop" (a builder of its own
#: without the key: nothing before matters), "on" (look at the statements before).
_Verdict = _Blame | Literal["sets", "stop", "on"]


def _why_statement(blamed: _Blame, branch: str) -> str:
    if blamed.kind == "conditional":
        return (
            f"{_WHY} on line {blamed.line} only: the pipeline built with the other side has no such step; "
            f"set it on both sides{branch}"
        )
    if blamed.kind == "try-body":
        return (
            f"is set in the body of the try statement on line {blamed.line} only: an exception may leave the "
            "body before the step is added, and the pipeline built when an except clause runs then has no such "
            "step; set it on every path (in each except clause too, or after the try statement)"
        )
    if blamed.kind == "try-except":
        return (
            f"is set in the try statement on line {blamed.line}, whose body an exception may leave before the "
            "step is added: the pipeline an except clause reads may have no such step, nor may the one the "
            "finally block reads (it runs after an exception no clause catches too); set it before the try "
            "statement to read it there"
        )
    if blamed.kind == "loop":
        return (
            f"is set in the loop on line {blamed.line} only: the pipeline built when it runs no time has no "
            "such step, and one built when it runs twice has two; set it once, before or after the loop, or "
            "use a for_each step, whose body's keys are None when it does not run"
        )
    return (
        f"is set on some paths of the {blamed.kind} statement on line {blamed.line} only: the pipeline built "
        f"on the others has no such step; set it on every path{branch}"
    )


def _decider(api: CheckerPluginInterface, root: Expression, key: str, line: int) -> _Blame | None:
    """The ``if``, ``match``, ``try`` or loop that decides whether variable ``root`` holds a builder
    with ``key`` where line ``line`` reads it: the statements before the read are walked
    backwards (those of its block, then of each block around it), to the last that assigns
    the variable; an ``if`` around the read, or one before a builder of its own is assigned,
    decides nothing."""
    if not (isinstance(root, NameExpr) and isinstance(api, TypeChecker)):
        return None
    for before in _before(scope_body(api), line):
        if isinstance(before, _Handled):
            verdict = _handled(api, before, root.name, key)
        else:
            verdict = _back(api, before, root.name, key)
        if verdict != "on":
            return verdict if isinstance(verdict, _Blame) else None
    return None


@dataclass(frozen=True)
class _Handled:
    """What ran before an ``except`` clause (``finally`` unset) or the ``finally`` block of
    ``stmt``: its body, part way (an exception left it), or, for ``finally``, any path of the
    ``try`` statement."""

    stmt: TryStmt
    in_finally: bool


def _before(body: list[Statement], line: int) -> list[list[Statement] | _Handled]:
    """The statements before line ``line`` in its block, then in each block around it; in an
    ``except`` clause or a ``finally`` block, what of its ``try`` statement may have run."""
    for index, stmt in enumerate(body):
        if stmt.line <= line <= (stmt.end_line or stmt.line):
            inner = [b for b in blocks(stmt, loops=True) if b.body and b.body[0].line <= line]
            nested: list[list[Statement] | _Handled] = _before(inner[-1].body, line) if inner else []
            if isinstance(stmt, TryStmt) and inner and inner[-1] is not stmt.body and inner[-1] is not stmt.else_body:
                nested.append(_Handled(stmt, in_finally=inner[-1] is stmt.finally_body))
            return [*nested, body[:index]]
    return []


def _handled(api: TypeChecker, handled: _Handled, name: str, key: str) -> _Verdict:
    """A read in an ``except`` clause: the body may have stopped before any of its steps, so a
    body that sets the key decides nothing ("try-except"); nor, for a read in ``finally``, does
    a clause or the ``else`` block: it runs after an exception no clause catches too."""
    stmt = handled.stmt
    tried = [stmt.body, *([*stmt.handlers, stmt.else_body] if handled.in_finally else [])]
    for block in tried:
        if block is not None and _back(api, block.body, name, key) != "on":
            return _Blame("try-except", stmt.line)
    return "on"


def _back(api: TypeChecker, body: list[Statement], name: str, key: str) -> _Verdict:
    for stmt in reversed(body):
        verdict = _verdict(api, stmt, name, key)
        if verdict != "on":
            return verdict
    return "on"


def _verdict(api: TypeChecker, stmt: Statement, name: str, key: str) -> _Verdict:
    if isinstance(stmt, AssignmentStmt):
        if not _assigns(stmt, name):
            return "on"
        if _has_key(api, stmt.rvalue, key):
            return "sets"
        if isinstance(stmt.rvalue, ConditionalExpr):  # p = p.compute(...) if F else p
            for line, sides, _ in _keyed(api, stmt.rvalue, chained=True):
                if any(key in keys for keys in sides):
                    return _Blame("conditional", line)
        extended = chain_root(stmt.rvalue)
        return "on" if isinstance(extended, NameExpr) and extended.name == name else "stop"
    if not any(isinstance(s, AssignmentStmt) and _assigns(s, name) for s in statements([stmt], loops=True)):
        return "on"
    if isinstance(stmt, (IfStmt, MatchStmt)):
        paths = [_back(api, block.body, name, key) for block in blocks(stmt, loops=False)]
        if not _exhaustive(stmt):
            paths.append("on")  # the path that runs no block
        return _either(paths, _Blame("if" if isinstance(stmt, IfStmt) else "match", stmt.line))
    if isinstance(stmt, (ForStmt, WhileStmt)):
        inside = _back(api, stmt.body.body, name, key)
        return _Blame("loop", stmt.line) if inside == "sets" or isinstance(inside, _Blame) else "on"
    if isinstance(stmt, WithStmt):
        return _back(api, stmt.body.body, name, key)
    if isinstance(stmt, TryStmt):
        return _try(api, stmt, name, key)
    return "stop"  # no other statement holds an assignment (a def's are its own)


def _either(paths: list[_Verdict], blame: _Blame) -> _Verdict:
    """The verdict of a statement one of whose ``paths`` runs: a path's own blame first, then
    ``blame`` (the statement's) where some paths set the key and others do not."""
    blamed = next((v for v in paths if isinstance(v, _Blame)), None)
    if blamed is not None:
        return blamed
    if "sets" in paths:
        return "sets" if all(v == "sets" for v in paths) else blame
    return "stop" if all(v == "stop" for v in paths) else "on"


def _try(api: TypeChecker, stmt: TryStmt, name: str, key: str) -> _Verdict:
    """A ``try`` statement read backwards from after it: its ``finally`` block ran on every
    path; before that, either the body ran to its end and then the ``else`` block, or an
    exception left the body part way and an ``except`` clause ran (one no clause catches
    never reaches the read).  A body left part way may or may not have set the key, so a
    body that sets it decides nothing on a clause's path that does not ("try-body")."""
    if stmt.finally_body is not None:
        last = _back(api, stmt.finally_body.body, name, key)
        if last != "on":
            return last
    body = _back(api, stmt.body.body, name, key)
    completed = _back(api, stmt.else_body.body, name, key) if stmt.else_body is not None else "on"
    paths = [body if completed == "on" else completed]
    for handler in stmt.handlers:
        caught = _back(api, handler.body, name, key)
        if caught != "on":
            paths.append(caught)
        elif body == "sets" or isinstance(body, _Blame):
            paths.append(_Blame("try-body", stmt.line))  # before the step, or after it
        else:
            paths.append("on")  # a body that assigns no builder, or one of its own, part way: either
    return _either(paths, _Blame("try", stmt.line))


def _exhaustive(stmt: IfStmt | MatchStmt) -> bool:
    """Whether one of the statement's blocks always runs: an ``else``, a last ``case _`` (or capture)."""
    if isinstance(stmt, IfStmt):
        return stmt.else_body is not None
    last = stmt.patterns[-1] if stmt.patterns else None
    return isinstance(last, AsPattern) and last.pattern is None and stmt.guards[-1] is None


def _assigns(stmt: AssignmentStmt, name: str) -> bool:
    return any(isinstance(lv, NameExpr) and lv.name == name for lv in stmt.lvalues)


def _has_key(api: TypeChecker, value: Expression, key: str) -> bool:
    """Whether ``value`` is a builder that has ``key``."""
    given = get_proper_type(api.lookup_type_or_none(value))
    if isinstance(given, Instance) and len(given.args) > STEPS_ARG:
        keys = keys_of(given.args[STEPS_ARG])
        return isinstance(keys, dict) and key in keys
    return False
