"""The method calls of a fluent chain, read back from its end: the one walk the features
share to find what came before a step (its siblings, the loop whose item it reads, the
feature a pipeline was started from)."""

from __future__ import annotations

from collections.abc import Iterator

from mypy.nodes import CallExpr, Expression, MemberExpr

__all__ = ["calls_back"]


def calls_back(expr: Expression) -> Iterator[tuple[CallExpr, MemberExpr]]:
    """Each ``x.method(...)`` call of the chain ending at ``expr``, with its callee, from
    ``expr`` back to the first: ``b.compute(...).for_each(...)`` gives the ``for_each``
    call, then the ``compute`` call; it stops at anything else (a name, a conditional)."""
    while isinstance(expr, CallExpr) and isinstance(expr.callee, MemberExpr):
        yield expr, expr.callee
        expr = expr.callee.expr
