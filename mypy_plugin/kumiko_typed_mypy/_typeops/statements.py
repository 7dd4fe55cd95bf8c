"""A walk over the statements of a body and the blocks nested in it, for the features
that look at how a builder variable is assigned (mypy's ``TraverserVisitor`` is compiled:
a plugin cannot subclass it)."""

from __future__ import annotations

from collections.abc import Iterator

from mypy.nodes import Block, ForStmt, IfStmt, MatchStmt, Statement, TryStmt, WhileStmt, WithStmt


def statements(body: list[Statement], *, loops: bool) -> Iterator[Statement]:
    """Each statement of ``body``, then those of its ``if``/``match``/``with``/``try``
    blocks, and of its ``for``/``while`` blocks when ``loops`` is set."""
    for stmt in body:
        yield stmt
        blocks: list[Block | None] = []
        if isinstance(stmt, IfStmt):
            blocks += [*stmt.body, stmt.else_body]
        elif isinstance(stmt, WithStmt):
            blocks.append(stmt.body)
        elif isinstance(stmt, MatchStmt):
            blocks += stmt.bodies
        elif isinstance(stmt, TryStmt):
            blocks += [stmt.body, *stmt.handlers, stmt.else_body, stmt.finally_body]
        elif loops and isinstance(stmt, (ForStmt, WhileStmt)):
            blocks += [stmt.body, stmt.else_body]
        for block in blocks:
            if block is not None:
                yield from statements(block.body, loops=loops)
