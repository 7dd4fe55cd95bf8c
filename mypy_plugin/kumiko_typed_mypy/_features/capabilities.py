"""Tier-2 capabilities: ``Feature(requires=[...])`` → ``Feature[Literal[...]]``, and each
tier-2 step checked against the literals its builder carries."""

from __future__ import annotations

from mypy.maptype import map_instance_to_supertype
from mypy.nodes import Context, Expression, ListExpr, SetExpr, StarExpr, TupleExpr
from mypy.plugin import FunctionContext, MethodContext
from mypy.typeops import make_simplified_union
from mypy.types import (
    AnyType,
    Instance,
    LiteralType,
    ProperType,
    TupleType,
    Type,
    TypeVarType,
    UninhabitedType,
    UnionType,
    get_proper_type,
)

from .. import _errors
from .._names import CAPS_ARG, FEATURE
from .._rules import rules
from .._typeops.args import where
from .._typeops.literals import literal_str_expr
from .._typeops.reported import fail


def feature_capabilities(ctx: FunctionContext) -> Type:
    ret = get_proper_type(ctx.default_return_type)
    if not isinstance(ret, Instance) or "requires" not in ctx.callee_arg_names:
        return ctx.default_return_type
    index = ctx.callee_arg_names.index("requires")
    exprs = ctx.args[index]
    kinds: list[str] = []
    if exprs:
        expr = exprs[0]
        if not isinstance(expr, (ListExpr, TupleExpr, SetExpr)):
            # Not written out: a constant whose type names its kinds (a Final tuple of
            # literals, a list typed list[Literal[...]]) says as much as a display.
            known = _named_by_type(ctx.arg_types[index][0])
            if known is None:
                fail(
                    ctx,
                    'requires= must be a list of string literals (e.g. requires=["mail.send"]), or a constant '
                    'whose type names them (KINDS: Final = ("mail.send",)), so that the plugin can check each '
                    "tier-2 step",
                    expr,
                    code=_errors.TIER,
                )
                return ctx.default_return_type
            kinds += _checked(ctx, known, expr)
            items: list[Expression] = []
        else:
            items = expr.items
        for item in items:
            if isinstance(item, StarExpr):  # [*KINDS, "mail.send"]: read by its type too
                starred = _named_by_type(ctx.api.get_expression_type(item.expr))
                kinds += _checked(ctx, starred, item) if starred is not None else _refused_entry(ctx, item)
                continue
            kind = literal_str_expr(item)
            if kind is None:
                _refused_entry(ctx, item)
            else:
                kinds += _checked(ctx, [kind], item)
    str_type = ctx.api.named_generic_type("builtins.str", [])
    caps: Type = (
        make_simplified_union([LiteralType(k, str_type) for k in sorted(set(kinds))]) if kinds else UninhabitedType()
    )
    return ret.copy_modified(args=[caps])


def subclass_capabilities(ctx: FunctionContext) -> Type:
    """A subclass constructed by ``Feature.__init__``: its capabilities as ``Feature``'s,
    when its one type parameter is ``Feature``'s (``class Team(Feature[C])``); a subclass
    that fixes them (``class Mailer(Feature[Literal["mail.send"]])``) keeps its own."""
    ret = get_proper_type(ctx.default_return_type)
    if not isinstance(ret, Instance) or len(ret.args) != 1:
        return ctx.default_return_type
    feature = next(base for base in ret.type.mro if base.fullname == FEATURE)
    if map_instance_to_supertype(ret, feature).args != ret.args:
        return ctx.default_return_type
    return feature_capabilities(ctx)


def _checked(ctx: FunctionContext, named: list[str], where: Context) -> list[str]:
    """The tier-2 kinds among ``named``; each other one is reported at ``where``."""
    for kind in named:
        if kind not in rules.TIER2_KINDS:
            fail(ctx, rules.msg_unknown_capability(kind), where, code=_errors.TIER)
    return [kind for kind in named if kind in rules.TIER2_KINDS]


def _refused_entry(ctx: FunctionContext, item: Expression) -> list[str]:
    fail(
        ctx,
        'requires= entries must be string literals or Final constants (e.g. requires=["mail.send"]) '
        "so that the plugin can check each tier-2 step",
        item,
        code=_errors.TIER,
    )
    return []


def _named_by_type(given: Type) -> list[str] | None:
    """The string literals a collection's type names: each item of a tuple (a ``Final``
    tuple keeps its items' literal values), or the item type of an iterable
    (``list[Literal["mail.send"]]``); ``None`` when the type does not name them."""
    p = get_proper_type(given)
    if isinstance(p, TupleType):
        items = [_literal(t) for t in p.items]
        return [i for i in items if i is not None] if None not in items else None
    if not isinstance(p, Instance) or not p.type.has_base("typing.Iterable"):
        return None
    iterable = next(base for base in p.type.mro if base.fullname == "typing.Iterable")
    item = get_proper_type(map_instance_to_supertype(p, iterable).args[0])
    named = [_literal(t) for t in (item.items if isinstance(item, UnionType) else [item])]
    return [n for n in named if n is not None] if None not in named else None


def _literal(t: Type) -> str | None:
    p = get_proper_type(t)
    literal = p.last_known_value if isinstance(p, Instance) else p
    return literal.value if isinstance(literal, LiteralType) and isinstance(literal.value, str) else None


def _declared(caps: ProperType) -> set[str] | None:
    """The literal kinds a capability type names; ``None`` when it names none precisely."""
    if isinstance(caps, UninhabitedType):
        return set()
    items = caps.items if isinstance(caps, UnionType) else [caps]
    out: set[str] = set()
    for item in map(get_proper_type, items):
        literal = item.last_known_value if isinstance(item, Instance) else item
        if not (isinstance(literal, LiteralType) and isinstance(literal.value, str)):
            return None
        out.add(literal.value)
    return out


def check_tier(kind: str, ctx: MethodContext) -> Type:
    receiver = get_proper_type(ctx.type)
    if not isinstance(receiver, Instance) or len(receiver.args) <= CAPS_ARG:
        return ctx.default_return_type
    caps = get_proper_type(receiver.args[CAPS_ARG])
    if isinstance(caps, AnyType):
        return ctx.default_return_type
    method = rules.RULES_BY_KIND[kind].method
    declared = _declared(caps)
    if declared is None:
        fail(ctx, _undecidable(kind, caps, receiver.type.name), where(ctx), code=_errors.TIER)
    elif kind not in declared:
        fail(ctx, rules.msg_tier(kind, method, declared), where(ctx), code=_errors.TIER)
    return ctx.default_return_type


def _undecidable(kind: str, caps: ProperType, builder: str) -> str:
    """Why the step cannot be checked, and the fix: a helper generic over the capabilities
    cannot name them (the caller's feature decides), so it gives up the check explicitly."""
    if isinstance(caps, TypeVarType):
        return (
            f'Cannot tell whether the feature declares "{kind}": the capabilities are the type variable '
            f"{caps.name} of a generic helper; give the builder Any capabilities there "
            f"({builder}[P, S, Sc, Any]) and the App's boot validation checks the step"
        )
    return (
        f'Cannot tell whether the feature declares "{kind}" (its capabilities are {caps}); '
        'create it as Feature("name", requires=["..."]) with string literals'
    )
