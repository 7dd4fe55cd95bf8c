"""``app.start_workflow(workflow, ...)`` of a workflow a worker starts: one whose trigger is
``cron(...)`` or ``on_event(...)``.  mypy saw a ``Workflow[P, R]`` like any other (the
trigger's kind is no part of its type), and the App raised ``TypeError`` at the call.

``cron(...)`` and ``on_event(...)`` are typed as a ``Trigger`` that carries how it is
written (in the type's ``extra_attrs``, which mypy's cache keeps, as a feature's name is
carried: ``registration.brand``); ``feature.workflow(trigger=...)`` carries it on to the
``Workflow``, and ``start_workflow`` given such a workflow says what the App would, in the
rule table's words (``kumiko-started-by-trigger``).  A workflow whose trigger the plugin
cannot follow carries nothing and is not checked: a ``Trigger`` annotation, a trigger built
elsewhere than in a call of ``cron``/``on_event``, a union of workflows of different
triggers (mypy erases attributes the items disagree on), so no false error."""

from __future__ import annotations

from typing import Final

from mypy.plugin import FunctionContext, MethodContext
from mypy.types import Instance, LiteralType, Type, get_proper_type

from .. import _errors
from .._rules import rules
from .._typeops.args import arg_expr, arg_type
from .._typeops.literals import literal_str
from .._typeops.reported import fail

#: The attribute a ``Trigger``'s (and then its ``Workflow``'s) type carries the trigger in.
_STARTED = "__kumiko_started_by__"


def _carried(t: Type | None) -> str | None:
    p = get_proper_type(t) if t is not None else None
    held = p.extra_attrs.attrs.get(_STARTED) if isinstance(p, Instance) and p.extra_attrs else None
    literal = get_proper_type(held) if held is not None else None
    return literal.value if isinstance(literal, LiteralType) and isinstance(literal.value, str) else None


def _with(ctx: FunctionContext | MethodContext, ret: Instance, trigger: str) -> Type:
    return ret.copy_with_extra_attr(_STARTED, LiteralType(trigger, ctx.api.named_generic_type("builtins.str", [])))


def _given(ctx: FunctionContext, name: str) -> str | None:
    """A literal text given for parameter ``name`` (``None``: not given, or not literal)."""
    return literal_str(arg_type(ctx, name), arg_expr(ctx, name))


def event_trigger(ctx: FunctionContext) -> Type:
    """``on_event(E)``: a ``Trigger[E]`` that says it is ``on_event(E)``."""
    ret = get_proper_type(ctx.default_return_type)
    payload = get_proper_type(ret.args[0]) if isinstance(ret, Instance) and ret.args else None
    if not isinstance(ret, Instance) or not isinstance(payload, Instance):
        return ctx.default_return_type
    return _with(ctx, ret, rules.trigger_call("event", payload.type.name, None, None))


def cron_trigger(ctx: FunctionContext) -> Type:
    """``cron(expression, timezone=...)``: a ``Trigger[CronTick]`` that says it is that call
    (``cron(...)`` where the expression is no literal)."""
    ret = get_proper_type(ctx.default_return_type)
    if not isinstance(ret, Instance):
        return ctx.default_return_type
    expression = _given(ctx, "expression")
    timezone = _given(ctx, "timezone")
    if timezone is None and arg_expr(ctx, "timezone") is not None:
        expression = None  # a zone the plugin cannot read: the cron without it would misname the trigger
    return _with(ctx, ret, rules.trigger_call("cron", "CronTick", expression, timezone))


def carry_trigger(ctx: MethodContext) -> Type:
    """``feature.workflow(trigger=...)``: the workflow carries its trigger's words on."""
    names = ctx.callee_arg_names
    if "trigger" not in names or not ctx.arg_types[names.index("trigger")]:
        return ctx.default_return_type
    trigger = _carried(ctx.arg_types[names.index("trigger")][0])
    ret = get_proper_type(ctx.default_return_type)
    if trigger is None or not isinstance(ret, Instance):
        return ctx.default_return_type
    return _with(ctx, ret, trigger)


def check_start(ctx: MethodContext) -> Type:
    """``app.start_workflow(workflow, ...)``: refused where ``workflow`` carries a trigger."""
    if not ctx.args or not ctx.args[0] or not ctx.arg_types[0]:
        return ctx.default_return_type
    trigger = _carried(ctx.arg_types[0][0])
    if trigger is not None:
        fail(ctx, f"this workflow {rules.msg_started_by_trigger(trigger)}", ctx.args[0][0], code=_errors.STARTED)
    return ctx.default_return_type


#: The functions whose ``Trigger`` says how it is written (a ``manual`` one carries nothing).
TRIGGER_FUNCTIONS: Final = {
    "kumiko_typed._triggers.on_event": event_trigger,
    "kumiko_typed._triggers.cron": cron_trigger,
}
