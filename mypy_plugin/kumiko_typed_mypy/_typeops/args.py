"""A hook's call: the expression and type given for a parameter, where to report, the receiver's steps."""

from __future__ import annotations

from mypy.argmap import ArgTypeExpander
from mypy.infer import ArgumentInferContext
from mypy.nodes import ARG_NAMED, ARG_STAR, ARG_STAR2, Context, Expression
from mypy.plugin import FunctionContext, MethodContext, MethodSigContext
from mypy.types import AnyType, Instance, Type, TypeOfAny, get_proper_type

from .._names import STEPS_ARG


def arg_expr(ctx: MethodContext | FunctionContext | MethodSigContext, name: str) -> Expression | None:
    """The expression passed for formal parameter ``name``, if any."""
    names = ctx.default_signature.arg_names if isinstance(ctx, MethodSigContext) else ctx.callee_arg_names
    if name not in names:
        return None
    exprs = ctx.args[names.index(name)]
    return exprs[0] if exprs else None


def arg_type(ctx: MethodContext | FunctionContext, name: str) -> Type | None:
    """The type given for formal parameter ``name``.  From an unpacked ``*args`` or
    ``**kwargs`` that is the item reaching it, as mypy's own check maps it: the hook is
    handed the whole tuple or mapping (``compute("x", **resolvers)`` read the dict's type
    as the step's result)."""
    if name not in ctx.callee_arg_names:
        return None
    index = ctx.callee_arg_names.index(name)
    types = ctx.arg_types[index]
    if not types:
        return None
    if ctx.arg_kinds[index][0] not in (ARG_STAR, ARG_STAR2):
        return types[0]
    anything = AnyType(TypeOfAny.special_form)
    expander = ArgTypeExpander(
        ArgumentInferContext(
            ctx.api.named_generic_type("typing.Mapping", [anything, anything]),
            ctx.api.named_generic_type("typing.Iterable", [anything]),
        )
    )
    # In the formals' order, as mypy does: the items of one unpacked tuple are dealt out in turn.
    for formal in range(index + 1):
        for given, kind in zip(ctx.arg_types[formal], ctx.arg_kinds[formal], strict=True):
            item = expander.expand_actual_type(given, kind, ctx.callee_arg_names[formal], ARG_NAMED)
            if formal == index:
                return item
    return None


def where(ctx: MethodContext | MethodSigContext, *preferred: str) -> Context:
    """Where to report: the first given argument (its line is the step's own line,
    whereas a chained call's own line is the first line of the whole chain)."""
    for name in preferred:
        expr = arg_expr(ctx, name)
        if expr is not None:
            return expr
    for exprs in ctx.args:
        if exprs:
            return exprs[0]
    return ctx.context


def with_arg(instance: Instance, index: int, value: Type) -> Instance:
    args = list(instance.args)
    args[index] = value
    return instance.copy_modified(args=args)


def receiver_steps(ctx: MethodContext) -> Type:
    """The steps type of the builder the method is called on."""
    receiver = get_proper_type(ctx.type)
    if isinstance(receiver, Instance) and len(receiver.args) > STEPS_ARG:
        return receiver.args[STEPS_ARG]
    return AnyType(TypeOfAny.special_form)
