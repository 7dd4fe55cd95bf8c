"""Step names and item names: string literals, ``Final`` constants holding one, or
members of a ``StrEnum`` (keyed by their value, as at run time)."""

from __future__ import annotations

from mypy.nodes import CastExpr, Expression, MemberExpr, RefExpr, StrExpr, SymbolNode, TypeAlias, TypeInfo, Var
from mypy.plugin import CheckerPluginInterface
from mypy.subtypes import is_subtype
from mypy.types import AnyType, Instance, LiteralType, Type, TypeOfAny, UnionType, get_proper_type

from .._rules import rules


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


def name_refused_by_mypy(api: CheckerPluginInterface, given: Type | None) -> bool:
    """Whether mypy reports the name argument itself: missing (``compute(lambda c: 1)``),
    not a ``str`` (``compute(1, ...)``), or an error's ``Any`` (an undefined name, a
    misspelt member ``Key.TOTL``).  A ``kumiko-step-name`` error there would only repeat it."""
    if given is None:
        return True
    proper = get_proper_type(given)
    if isinstance(proper, AnyType):
        return proper.type_of_any == TypeOfAny.from_error
    return not is_subtype(given, api.named_generic_type("builtins.str", []))


def plain_enum_member(given: Type | None) -> tuple[TypeInfo, str] | None:
    """A name that is a member of an enum that is no ``str`` (``class Item(enum.Enum)``), as
    the enum class and the member's name; mypy refuses it (its parameter is a ``str``), and
    says only that the enum is no ``str``.  ``None`` for anything else."""
    proper = get_proper_type(given) if given is not None else None
    if isinstance(proper, Instance) and proper.last_known_value is not None:
        proper = proper.last_known_value
    if isinstance(proper, LiteralType) and proper.is_enum_literal() and isinstance(proper.value, str):
        info, member = proper.fallback.type, proper.value
    elif isinstance(proper, Instance) and proper.type.is_enum and proper.type.enum_members:
        info, member = proper.type, proper.type.enum_members[0]
    else:
        return None
    return (info, member) if not info.has_base("builtins.str") else None


def plain_enum_message(method: str, member: tuple[TypeInfo, str]) -> str:
    info, name = member
    return rules.msg_plain_enum_name(method, info.name, name, _member_value(info, name))


def unnamed_message(method: str, given: Type | None) -> str:
    """The ``kumiko-step-name`` message for a ``str`` name the plugin cannot read: a union of
    literals (``Literal["y", "z"]``, each a literal, but which one only the run knows), a
    name typed as a ``str`` enum class, not one member (``LINE: Final[Item] = Item.LINE``), or
    a name chosen at run time."""
    proper = get_proper_type(given)
    if isinstance(proper, Instance) and proper.type.is_enum and proper.type.enum_members:
        return rules.msg_enum_typed_name(method, proper.type.name, proper.type.enum_members[0])
    items = [get_proper_type(i) for i in proper.items] if isinstance(proper, UnionType) else []
    names = list(dict.fromkeys(literal_str(item, None) for item in items))
    known = [name for name in names if name is not None]
    if len(known) > 1 and len(known) == len(names):
        return rules.msg_literal_choice(method, known)
    return rules.msg_run_time_name(method)


def literal_str_expr(expr: Expression) -> str | None:
    if isinstance(expr, StrExpr):
        return expr.value
    if isinstance(expr, CastExpr):  # a Final[str] name as enum_keys casts it in a key read
        return final_str(expr.expr)
    if isinstance(expr, MemberExpr) and expr.name == "value" and enum_member(expr.expr) is not None:
        return literal_str_expr(expr.expr)  # ``Key.TOTAL.value``, as enum_keys writes a key read
    member = enum_member(expr)
    if member is not None:
        return enum_value(*member)
    var = _referenced(expr)
    if isinstance(var, Var) and var.is_final and isinstance(var.final_value, str):
        return var.final_value
    return None


def final_str(expr: Expression) -> str | None:
    """The value of a ``Final`` name declared ``str`` (``COUNT: Final[str] = "count"``),
    which mypy types ``str``, not as the literal it holds; ``None`` for anything else."""
    var = _referenced(expr)
    if not (isinstance(var, Var) and var.is_final and isinstance(var.final_value, str) and var.type is not None):
        return None
    declared = get_proper_type(var.type)
    if not isinstance(declared, Instance) or declared.last_known_value is not None:
        return None  # a Final without a declared type is typed as its literal already
    return var.final_value if declared.type.fullname == "builtins.str" else None


def enum_member(expr: Expression) -> tuple[TypeInfo, str] | None:
    """``Key.TOTAL`` (also through an alias of the class, ``K = Key``; ``K.TOTAL``) or a
    ``Final`` name holding a member (``TOTAL: Final = Key.TOTAL``, ``Names.TOTAL``) as the
    enum class and the member's name; ``None`` for anything else."""
    if isinstance(expr, MemberExpr) and isinstance(expr.expr, RefExpr):
        owner = _class_of(expr.expr.node)
        if owner is not None and owner.is_enum:
            return owner, expr.name
    var = _referenced(expr)
    if isinstance(var, Var) and var.is_final and var.type is not None:
        held = get_proper_type(var.type)
        if isinstance(held, Instance) and held.last_known_value is not None:
            held = held.last_known_value
        if isinstance(held, LiteralType) and held.is_enum_literal() and isinstance(held.value, str):
            return held.fallback.type, held.value
    return None


def _referenced(expr: Expression) -> SymbolNode | None:
    """What a name or an attribute refers to (semantic analysis binds a module's attribute
    to its node, but not a class's: ``Names.TOTAL`` is looked up in the class)."""
    if isinstance(expr, MemberExpr) and isinstance(expr.expr, RefExpr):
        owner = _class_of(expr.expr.node)
        if owner is not None:
            symbol = owner.get(expr.name)
            return symbol.node if symbol is not None else None
    return expr.node if isinstance(expr, RefExpr) else None


def _class_of(node: SymbolNode | None) -> TypeInfo | None:
    """A class, or the class a plain alias names (``K = Key``)."""
    if isinstance(node, TypeAlias):
        target = get_proper_type(node.target)
        return target.type if isinstance(target, Instance) and not target.args else None
    return node if isinstance(node, TypeInfo) else None


def opaque_member(arg_type: Type | None, expr: Expression | None) -> bool:
    """Whether the name is a member of a ``str`` enum whose value mypy does not know (an
    ``auto()`` of a class with its own ``_generate_next_value_``, a computed value): a
    constant, so no mistake, but its key is unknown.  Its users read it as ``Any``."""
    member = enum_member(expr) if expr is not None else None
    if member is None and arg_type is not None:
        p = get_proper_type(arg_type)
        if isinstance(p, Instance) and p.last_known_value is not None:
            p = p.last_known_value
        if isinstance(p, LiteralType) and p.is_enum_literal() and isinstance(p.value, str):
            member = p.fallback.type, p.value
    if member is None:
        return False
    owner, name = member
    return owner.has_base("builtins.str") and name in owner.names and enum_value(owner, name) is None


def enum_value(info: TypeInfo, member: str) -> str | None:
    """The value of ``info.member`` when it is a string: written literally, or ``auto()``
    of a ``StrEnum`` (the member's name in lower case, unless a class of the enum's defines
    its own ``_generate_next_value_``, whose result mypy does not know).  Read from the
    member's type, which mypy's cache keeps (a class body read from the cache is empty)."""
    if not info.has_base("builtins.str"):
        return None
    value = _member_value(info, member)
    if value is not None:
        return value
    symbol = info.names.get(member)
    var = symbol.node if symbol is not None else None
    declared = get_proper_type(var.type) if isinstance(var, Var) and var.type is not None else None
    auto = isinstance(declared, Instance) and declared.type.fullname == "enum.auto"
    if auto and _generated_by(info) == "enum.StrEnum":
        return member.lower()
    return None


def _member_value(info: TypeInfo, member: str) -> str | None:
    """The value of ``info.member`` when it is written as a string literal."""
    symbol = info.names.get(member)
    var = symbol.node if symbol is not None else None
    if not (isinstance(var, Var) and var.type is not None):
        return None
    value = get_proper_type(var.type)
    if isinstance(value, Instance) and value.last_known_value is not None:
        value = value.last_known_value
    return value.value if isinstance(value, LiteralType) and isinstance(value.value, str) else None


def _generated_by(info: TypeInfo) -> str | None:
    """The class whose ``_generate_next_value_`` gives the enum's ``auto()`` values."""
    for base in info.mro:
        if "_generate_next_value_" in base.names:
            return base.fullname
    return None
