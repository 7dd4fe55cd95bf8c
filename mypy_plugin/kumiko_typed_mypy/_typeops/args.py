"""A hook's call: the expression and type given for a parameter, where to report, the receiver's steps."""

from __future__ import annotations

from mypy.nodes import Context, Expression
from mypy.plugin import MethodContext, MethodSigContext
from mypy.types import AnyType, Instance, Type, TypeOfAny, get_proper_type

from .._names import STEPS_ARG


def arg_expr(ctx: MethodContext | MethodSigContext, name: str) -> Expression | None:
    """The expression passed for formal parameter ``name``, if any."""
    names = ctx.callee_arg_names if isinstance(ctx, MethodContext) else ctx.default_signature.arg_names
    if name not in names:
        return None
    exprs = ctx.args[names.index(name)]
    return exprs[0] if exprs else None


def arg_type(ctx: MethodContext, name: str) -> Type | None:
    if name not in ctx.callee_arg_names:
        return None
    types = ctx.arg_types[ctx.callee_arg_names.index(name)]
    return types[0] if types else None


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
