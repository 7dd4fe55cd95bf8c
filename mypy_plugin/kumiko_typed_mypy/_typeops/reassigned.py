"""A builder variable assigned back to its own name after a step named at run time,
``p = p.compute(name, ...)``: that step's keys are open (``SomeSteps``), and mypy narrows
the variable to them from its first, exact type, which gives keys ``Never``.  Every later
step on the variable would then report ``kumiko-unanalyzable``, a second error for the
mistake the step's ``kumiko-step-name`` error already names (and says how to fix): this
tells such a step so that it keeps quiet."""

from __future__ import annotations

from mypy.checker import TypeChecker
from mypy.nodes import AssignmentStmt, CallExpr, Expression, ExpressionStmt, MemberExpr, NameExpr, ReturnStmt, Statement
from mypy.plugin import MethodContext

from .._rules import rules
from .reported import recorded
from .statements import chain_root, scope_body, statements


def after_reported_name(ctx: MethodContext) -> bool:
    """Whether the step's builder (or the builder whose arm or body it is in) is a variable
    whose keys are unknown because an earlier assignment to it, or to the variable it extends
    or copies (``p = p.compute(...)``, ``q = p``), holds a step whose name was reported as
    ``kumiko-step-name``."""
    api, call = ctx.api, ctx.context
    if not (isinstance(api, TypeChecker) and isinstance(call, CallExpr)):
        return False
    body = list(statements(scope_body(api), loops=True))
    holder = _holding(body, call.line)
    if holder is None:
        return False
    root = chain_root(call.callee.expr) if isinstance(call.callee, MemberExpr) else None
    if not (isinstance(root, NameExpr) and any(isinstance(s, AssignmentStmt) and _assigns(s, root.name) for s in body)):
        # An arm's or body's builder (a lambda's parameter): the builder its step is on.
        root = chain_root(_expression(holder))
    if not isinstance(root, NameExpr):
        return False
    reported = [
        info.line
        for info in recorded(api.msg.errors)
        if info.code is not None and info.code.code == rules.CODE_STEP_NAME
    ]
    if isinstance(holder, AssignmentStmt) and _assigns(holder, root.name) and _within(holder, reported):
        return True  # mypy's second check of the same statement (a class attribute, a loop's body)
    name, line = root.name, holder.line
    while True:
        # The last assignment to the variable before the line, and so back along what it extends.
        stmt = max(
            (s for s in body if isinstance(s, AssignmentStmt) and s.line < line and _assigns(s, name)),
            key=lambda s: s.line,
            default=None,
        )
        if stmt is None:
            return False
        if _within(stmt, reported):
            return True
        extended = chain_root(stmt.rvalue)
        if not isinstance(extended, NameExpr):
            return False  # a builder of its own: its keys are not that step's consequence
        name, line = extended.name, stmt.line


def _holding(body: list[Statement], line: int) -> Statement | None:
    """The innermost simple statement whose lines hold ``line``."""
    found = [
        s
        for s in body
        if isinstance(s, (AssignmentStmt, ExpressionStmt, ReturnStmt)) and s.line <= line <= (s.end_line or s.line)
    ]
    return max(found, key=lambda s: s.line, default=None)


def _expression(stmt: Statement) -> Expression:
    if isinstance(stmt, AssignmentStmt):
        return stmt.rvalue
    if isinstance(stmt, ExpressionStmt):
        return stmt.expr
    assert isinstance(stmt, ReturnStmt)
    return stmt.expr if stmt.expr is not None else NameExpr("")


def _assigns(stmt: AssignmentStmt, name: str) -> bool:
    return any(isinstance(lv, NameExpr) and lv.name == name for lv in stmt.lvalues)


def _within(stmt: Statement, lines: list[int]) -> bool:
    return any(stmt.line <= at <= (stmt.end_line or stmt.line) for at in lines)
