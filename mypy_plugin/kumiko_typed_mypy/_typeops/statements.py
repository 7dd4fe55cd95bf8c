"""A walk over the statements of a body and the blocks nested in it, for the features
that look at how a builder variable is assigned (mypy's ``TraverserVisitor`` is compiled:
a plugin cannot subclass it)."""

from __future__ import annotations

from collections.abc import Iterator

from mypy.checker import TypeChecker
from mypy.nodes import (
    Block,
    CallExpr,
    Expression,
    ForStmt,
    FuncDef,
    IfStmt,
    MatchStmt,
    MemberExpr,
    MypyFile,
    Statement,
    TryStmt,
    TypeInfo,
    WhileStmt,
    WithStmt,
)


def statements(body: list[Statement], *, loops: bool) -> Iterator[Statement]:
    """Each statement of ``body``, then those of its ``if``/``match``/``with``/``try``
    blocks, and of its ``for``/``while`` blocks when ``loops`` is set."""
    for stmt in body:
        yield stmt
        for block in blocks(stmt, loops=loops):
            yield from statements(block.body, loops=loops)


def blocks(stmt: Statement, *, loops: bool) -> list[Block]:
    """The blocks of a compound statement (of a loop only when ``loops`` is set); none for a simple one."""
    found: list[Block | None] = []
    if isinstance(stmt, IfStmt):
        found += [*stmt.body, stmt.else_body]
    elif isinstance(stmt, WithStmt):
        found.append(stmt.body)
    elif isinstance(stmt, MatchStmt):
        found += stmt.bodies
    elif isinstance(stmt, TryStmt):
        found += [stmt.body, *stmt.handlers, stmt.else_body, stmt.finally_body]
    elif loops and isinstance(stmt, (ForStmt, WhileStmt)):
        found += [stmt.body, stmt.else_body]
    return [block for block in found if block is not None]


def scope_body(api: TypeChecker) -> list[Statement]:
    """The statements of the function, class body or module the checker is in (not a lambda's)."""
    for node in reversed(api.scope.stack):
        if isinstance(node, FuncDef):
            return node.body.body
        if isinstance(node, TypeInfo):
            return node.defn.defs.body
        if isinstance(node, MypyFile):
            return node.defs
    return []


def chain_root(expr: Expression) -> Expression:
    """The expression a chain of steps starts from (``p`` of ``p.compute(...).guard(...)``)."""
    while isinstance(expr, CallExpr) and isinstance(expr.callee, MemberExpr):
        expr = expr.callee.expr
    return expr
