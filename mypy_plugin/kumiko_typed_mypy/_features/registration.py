"""Registering pipelines: a handler needs a finished pipeline, a workflow a pipeline
whose payload is its trigger's.  mypy's own check already rejects both (as an
argument type error, or as a type variable it cannot solve); this adds the sentence
that says what to do, at the argument that is wrong."""

from __future__ import annotations

from mypy.plugin import MethodContext
from mypy.subtypes import is_same_type
from mypy.types import Instance, ProperType, Type, get_proper_type

from .. import _errors
from .._names import FINISHED, TRIGGER
from .._rules import rules
from ._context import arg_expr, arg_type


def check_handler_pipeline(ctx: MethodContext) -> Type:
    given = get_proper_type(arg_type(ctx, "pipeline"))
    expr = arg_expr(ctx, "pipeline")
    if isinstance(given, Instance) and expr is not None and not given.type.has_base(FINISHED):
        ctx.api.fail(rules.msg_no_return(given.type.name), expr, code=_errors.NO_RETURN)
    return ctx.default_return_type


def _own_type(ctx: MethodContext, name: str) -> ProperType | None:
    """An argument's type on its own: when mypy could not solve the call's type
    variable, the argument types it hands the hook are erased to ``Any``."""
    expr = arg_expr(ctx, name)
    if expr is None:
        return None
    with ctx.api.msg.filter_errors():
        return get_proper_type(ctx.api.get_expression_type(expr))


def check_trigger_payload(ctx: MethodContext) -> Type:
    trigger = _own_type(ctx, "trigger")
    pipeline = _own_type(ctx, "pipeline")
    expr = arg_expr(ctx, "pipeline")
    if not (isinstance(trigger, Instance) and isinstance(pipeline, Instance) and expr is not None):
        return ctx.default_return_type
    if not (trigger.type.fullname == TRIGGER and trigger.args and pipeline.args):
        return ctx.default_return_type
    given, wanted = get_proper_type(trigger.args[0]), get_proper_type(pipeline.args[0])
    if not is_same_type(given, wanted):
        message = rules.msg_trigger_payload(_short(given), _short(wanted))
        ctx.api.fail(message, expr, code=_errors.TRIGGER_PAYLOAD)
    return ctx.default_return_type


def _short(t: ProperType) -> str:
    return t.type.name if isinstance(t, Instance) else str(t)
