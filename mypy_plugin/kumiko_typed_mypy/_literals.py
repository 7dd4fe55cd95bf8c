"""Step names and item names: string literals, or ``Final`` constants holding one."""

from __future__ import annotations

from mypy.nodes import Expression, MemberExpr, NameExpr, StrExpr, Var
from mypy.types import Instance, LiteralType, Type, get_proper_type


def literal_str(arg_type: Type | None, expr: Expression | None) -> str | None:
    if arg_type is not None:
        p = get_proper_type(arg_type)
        if isinstance(p, Instance) and p.last_known_value is not None:
            p = p.last_known_value
        if isinstance(p, LiteralType) and isinstance(p.value, str):
            return p.value
    if expr is not None:
        return literal_str_expr(expr)
    return None


def literal_str_expr(expr: Expression) -> str | None:
    if isinstance(expr, StrExpr):
        return expr.value
    if isinstance(expr, (NameExpr, MemberExpr)) and isinstance(expr.node, Var):
        var = expr.node
        if var.is_final and isinstance(var.final_value, str):
            return var.final_value
    return None
