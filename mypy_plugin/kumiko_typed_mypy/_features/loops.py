"""``for_each`` and ``retry`` bodies.

- Before the call (signature hook) the body's scope marker ``AddScope[Sc, I]``
  becomes ``Sc`` plus ``{item: <element type of over=>}``.
- After the call, a loop's body keys become ``T | None`` (zero iterations leave
  them unset); a retry body's keys stay ``T`` (the body ran to completion).
"""

from __future__ import annotations

from mypy.maptype import map_instance_to_supertype
from mypy.plugin import MethodContext, MethodSigContext
from mypy.type_visitor import TypeTranslator
from mypy.typeops import make_simplified_union
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    NoneType,
    Type,
    TypeAliasType,
    TypeOfAny,
    get_proper_type,
)

from .. import _errors
from .._literals import literal_str_expr
from .._names import ADD_SCOPE, LOOP, RETRY, STEPS_ARG
from .._rules import rules
from .._typeddicts import Unknown, keys_of, make
from ._context import arg_expr, receiver_steps, where, with_arg
from .step_keys import unknown_steps


class _ScopeRewriter(TypeTranslator):
    def __init__(self, ctx: MethodSigContext, item: str, item_type: Type) -> None:
        super().__init__()
        self.ctx = ctx
        self.item = item
        self.item_type = item_type

    def visit_type_alias_type(self, t: TypeAliasType) -> Type:
        return t.copy_modified(args=[a.accept(self) for a in t.args])

    def visit_instance(self, t: Instance) -> Type:
        if t.type.fullname != ADD_SCOPE:
            return super().visit_instance(t)
        keys = keys_of(t.args[0])
        if isinstance(keys, Unknown):
            return t.args[0]
        keys[self.item] = self.item_type
        return make(self.ctx.api, keys)


def _item_type(ctx: MethodSigContext) -> Type:
    """The element type of what ``over=`` returns, worked out before the call is checked.

    Leaving the body's item type as a type variable to be solved with the call does
    not work: mypy first checks the ``do=`` lambda with that variable erased to
    ``Any`` and keeps the body keys it inferred then.  So ``over=`` is typed here,
    against its own parameter type, with its messages held back (the call's own
    check reports them once).
    """
    sig = ctx.default_signature
    expr = arg_expr(ctx, "over")
    if expr is None or "over" not in sig.arg_names:
        return AnyType(TypeOfAny.from_error)
    context = sig.arg_types[sig.arg_names.index("over")]
    with ctx.api.msg.filter_errors():
        over = get_proper_type(ctx.api.get_expression_type(expr, type_context=context))
    if isinstance(over, CallableType):
        returned = get_proper_type(over.ret_type)
        iterable = ctx.api.named_generic_type("typing.Iterable", [AnyType(TypeOfAny.special_form)]).type
        if isinstance(returned, Instance) and returned.type.has_base("typing.Iterable"):
            return map_instance_to_supertype(returned, iterable).args[0]
        if isinstance(returned, AnyType):
            return returned
    ctx.api.fail(
        f"for_each over= must be a function returning an iterable (got {over}); e.g. over=lambda c: c.payload.lines",
        expr,
        code=_errors.UNANALYZABLE,
    )
    return AnyType(TypeOfAny.from_error)


def scope_signature(ctx: MethodSigContext) -> CallableType:
    expr = arg_expr(ctx, "item")
    item = literal_str_expr(expr) if expr is not None else None
    if item is None:
        ctx.api.fail(rules.msg_step_name("for_each"), where(ctx, "item"), code=_errors.STEP_NAME)
        return ctx.default_signature
    sig = ctx.default_signature
    rewriter = _ScopeRewriter(ctx, item, _item_type(ctx))
    return sig.copy_modified(arg_types=[t.accept(rewriter) for t in sig.arg_types])


def _body_keys(ctx: MethodContext, marker_name: str, optional: bool) -> Type:
    ret = get_proper_type(ctx.default_return_type)
    if not isinstance(ret, Instance):
        return ctx.default_return_type
    marker = get_proper_type(ret.args[STEPS_ARG])
    if not (isinstance(marker, Instance) and marker.type.fullname == marker_name):
        return ctx.default_return_type
    before, body = keys_of(receiver_steps(ctx)), keys_of(marker.args[0])
    for keys in (before, body):
        if isinstance(keys, Unknown):
            return with_arg(ret, STEPS_ARG, unknown_steps(ctx, keys, "for_each" if optional else "retry"))
    assert not isinstance(before, Unknown) and not isinstance(body, Unknown)
    merged = dict(before)
    for name, value in body.items():
        if name not in before:
            merged[name] = make_simplified_union([value, NoneType()]) if optional else value
    return with_arg(ret, STEPS_ARG, make(ctx.api, merged))


def loop_keys(ctx: MethodContext) -> Type:
    return _body_keys(ctx, LOOP, optional=True)


def retry_keys(ctx: MethodContext) -> Type:
    return _body_keys(ctx, RETRY, optional=False)
