"""Step names and item names: string literals, ``Final`` constants holding one, or
members of a ``StrEnum`` (keyed by their value, as at run time)."""

from __future__ import annotations

from mypy.nodes import Expression, MemberExpr, NameExpr, RefExpr, StrExpr, TypeInfo, Var
from mypy.types import Instance, LiteralType, Type, get_proper_type


def literal_str(arg_type: Type | None, expr: Expression | None) -> str | None:
    if arg_type is not None:
        p = get_proper_type(arg_type)
        if isinstance(p, Instance) and p.last_known_value is not None:
            p = p.last_known_value
        if isinstance(p, LiteralType) and isinstance(p.value, str):
            return enum_value(p.fallback.type, p.value) if p.is_enum_literal() else p.value
    if expr is not None:
        return literal_str_expr(expr)
    return None


def literal_str_expr(expr: Expression) -> str | None:
    if isinstance(expr, StrExpr):
        return expr.value
    if isinstance(expr, MemberExpr) and expr.name == "value" and enum_member(expr.expr) is not None:
        return literal_str_expr(expr.expr)  # ``Key.TOTAL.value``, as enum_keys writes a key read
    var = expr.node if isinstance(expr, (NameExpr, MemberExpr)) else None
    owner = expr.expr.node if isinstance(expr, MemberExpr) and isinstance(expr.expr, RefExpr) else None
    if isinstance(owner, TypeInfo) and isinstance(expr, MemberExpr):
        if owner.is_enum:
            return enum_value(owner, expr.name)
        # ``Names.TOTAL``: semantic analysis binds a module's attribute to its node, not a class's.
        symbol = owner.get(expr.name)
        var = symbol.node if symbol is not None else None
    if isinstance(var, Var) and var.is_final and isinstance(var.final_value, str):
        return var.final_value
    return None


def enum_member(expr: Expression) -> tuple[TypeInfo, str] | None:
    """``Key.TOTAL`` as the enum class and the member's name; ``None`` for anything else."""
    if isinstance(expr, MemberExpr) and isinstance(expr.expr, RefExpr):
        owner = expr.expr.node
        if isinstance(owner, TypeInfo) and owner.is_enum:
            return owner, expr.name
    return None


def enum_value(info: TypeInfo, member: str) -> str | None:
    """The value of ``info.member`` when it is a string: written literally, or ``auto()``
    of a ``StrEnum`` (the member's name in lower case).  Read from the member's type,
    which mypy's cache keeps (a class body read from the cache is empty)."""
    symbol = info.names.get(member)
    var = symbol.node if symbol is not None else None
    if not (isinstance(var, Var) and var.type is not None and info.has_base("builtins.str")):
        return None
    value = get_proper_type(var.type)
    if isinstance(value, Instance) and value.last_known_value is not None:
        value = value.last_known_value
    if isinstance(value, LiteralType) and isinstance(value.value, str):
        return value.value
    if isinstance(value, Instance) and value.type.fullname == "enum.auto" and info.has_base("enum.StrEnum"):
        return member.lower()
    return None
