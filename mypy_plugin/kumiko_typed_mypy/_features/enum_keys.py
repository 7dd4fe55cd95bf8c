"""``c.steps[Key.TOTAL]``: a key read by the ``StrEnum`` member that named its step.

A step may be named by a member of a ``StrEnum`` (or a ``str`` mix-in ``Enum``); its key is
the member's value, and at run time the member, being that string, finds it.  mypy reads a
``TypedDict`` key from a literal's value, and the value of an enum member's literal type is
its *name*: ``c.steps[Key.TOTAL]`` was the error ``"TOTAL" is not a valid TypedDict key``,
and ``c.steps.get(Key.TOTAL)`` an unchecked ``object``.

No plugin hook sees a subscript of a ``TypedDict``.  So before a step's call is checked
(signature hook), the key reads in its lambdas, ``<param>.steps[<member>]``,
``<param>.scope[<member>]`` and their ``.get(<member>)``, get the member's value in place
of the member: ``Key.TOTAL.value``, which mypy types as the literal it holds and works
out again at every check (so ``dmypy`` follows a changed value), or, for an ``auto()``
member whose ``value`` mypy types only ``str``, the string ``auto()`` gives it (its name
in lower case).  A member whose value mypy does not know (an ``auto()`` of a class with
its own ``_generate_next_value_``) reads as ``Any``, as its step's key does.  Only reads
through the parameter of a lambda the step passes a ``Ctx`` are rewritten (a lambda of an
arm is its own step's call): any other mapping keyed by an enum, an event's say, keeps
mypy's reading.

A ``Final`` name declared ``str`` (``COUNT: Final[str] = "count"``) names a step by its
value (``literals.literal_str``), but mypy types the name ``str``, which it refuses as a
``TypedDict`` key: ``c.steps[COUNT]`` was ``TypedDict key must be a string literal``.  Such
a read gets a cast of the name to the literal it holds; the cast keeps the name, so a
re-check (``dmypy``) finds it and casts it to the value the name holds then.
"""

from __future__ import annotations

from typing import TypeGuard

from mypy.nodes import (
    CallExpr,
    CastExpr,
    Expression,
    IndexExpr,
    LambdaExpr,
    MemberExpr,
    NameExpr,
    StrExpr,
    TypeInfo,
    Var,
)
from mypy.plugin import CheckerPluginInterface, MethodSigContext
from mypy.server.subexpr import get_subexpressions
from mypy.types import AnyType, CallableType, Instance, LiteralType, Type, TypeOfAny, UnionType, get_proper_type

from .._names import CTX
from .._typeops.literals import enum_member, enum_value, final_str, opaque_member


def by_value(ctx: MethodSigContext) -> CallableType:
    """Rewrite the enum-member key reads in the call's arguments (see the module docstring)."""
    sig = ctx.default_signature
    for formal, exprs in zip(sig.arg_types, ctx.args, strict=False):
        if not _takes_ctx(formal):
            continue
        for expr in exprs:
            if not (isinstance(expr, LambdaExpr) and expr.arguments):
                continue
            param = expr.arguments[0].variable
            for e in get_subexpressions(expr):  # every expression in it, nested lambdas' too
                if isinstance(e, IndexExpr) and _keys_of(e.base, param):
                    if opaque_member(None, e.index):
                        e.base = _as_any(e.base)
                    e.index = _valued(ctx.api, e.index)
                elif isinstance(e, CallExpr) and e.args and _is_get(e.callee, param):
                    if opaque_member(None, e.args[0]):
                        e.callee.expr = _as_any(e.callee.expr)
                    e.args[0] = _valued(ctx.api, e.args[0])
    return sig


def _takes_ctx(formal: Type) -> bool:
    """Whether the parameter is a resolver: a function of a ``Ctx`` or of its subclass
    ``WorkflowCtx`` (maybe in a union with a plain value, as a mail subject).  An arm's or a
    body's builder, or an event, is not."""
    p = get_proper_type(formal)
    for item in map(get_proper_type, p.items if isinstance(p, UnionType) else [p]):
        if isinstance(item, CallableType) and item.arg_types:
            first = get_proper_type(item.arg_types[0])
            if isinstance(first, Instance) and first.type.has_base(CTX):
                return True
    return False


def _is_get(callee: Expression, param: Var) -> TypeGuard[MemberExpr]:
    return isinstance(callee, MemberExpr) and callee.name == "get" and _keys_of(callee.expr, param)


def _keys_of(expr: Expression, param: Var) -> bool:
    """``<param>.steps`` or ``<param>.scope``, ``<param>`` the resolver's own parameter."""
    return (
        isinstance(expr, MemberExpr)
        and expr.name in ("steps", "scope")
        and isinstance(expr.expr, NameExpr)
        and expr.expr.node is param
    )


def _as_any(keys: Expression) -> Expression:
    """``<param>.steps`` read as ``Any``: for a member whose value mypy does not know
    (``opaque_member``), so neither its name nor a guess is taken for the key."""
    cast = CastExpr(keys, AnyType(TypeOfAny.special_form))
    cast.set_line(keys)
    return cast


def _valued(api: CheckerPluginInterface, key: Expression) -> Expression:
    """``key``, or the value of the enum member ``key`` names, or a ``Final[str]`` name cast
    to the literal it holds (see the module docstring)."""
    if isinstance(key, CastExpr) and final_str(key.expr) is not None:
        key = key.expr  # cast by an earlier check: cast again, to the value the name holds now
    member = enum_member(key)
    if member is None:
        return _as_literal(api, key)
    owner, name = member
    value = enum_value(owner, name)
    if value is None:
        return key
    replaced: Expression = MemberExpr(key, "value") if _typed_literally(owner, name) else StrExpr(value)
    replaced.set_line(key)
    return replaced


def _typed_literally(owner: TypeInfo, member: str) -> bool:
    """Whether the member's value is written as a string literal (not ``auto()``)."""
    symbol = owner.names.get(member)
    var = symbol.node if symbol is not None else None
    value = get_proper_type(var.type) if isinstance(var, Var) and var.type is not None else None
    if isinstance(value, Instance) and value.last_known_value is not None:
        value = value.last_known_value
    return isinstance(value, LiteralType)


def _as_literal(api: CheckerPluginInterface, key: Expression) -> Expression:
    """A name ``Final`` but declared ``str``, cast to the literal it holds; ``key`` itself
    when it is anything else (a ``Final`` without a declared type is typed as its literal
    already)."""
    value = final_str(key)
    if value is None:
        return key
    cast = CastExpr(key, LiteralType(value, api.named_generic_type("builtins.str", [])))
    cast.set_line(key)
    return cast
