"""``call_feature``'s ``handler=`` given something other than a write handler: a query handler,
a workflow, a pipeline.  mypy's error said ``expected "WriteHandler[Order, Never]"``, the
``Never`` being the result type it had not solved, as if the handler had to return nothing;
one sentence says what was given and what the step takes instead."""

from __future__ import annotations

from mypy.messages import format_type_bare
from mypy.plugin import MethodContext
from mypy.types import Instance, Type, get_proper_type

from .._names import WRITE_HANDLER
from .._rules import rules
from .._typeops.args import arg_expr, arg_type
from .._typeops.refused import reword


def explain(ctx: MethodContext) -> Type:
    given, expr = get_proper_type(arg_type(ctx, "handler")), arg_expr(ctx, "handler")
    if isinstance(given, Instance) and expr is not None and not given.type.has_base(WRITE_HANDLER):
        shown = format_type_bare(given, ctx.api.options)
        reword(ctx, expr, rules.msg_call_feature_handler(shown), lambda _: False)
    return ctx.default_return_type
