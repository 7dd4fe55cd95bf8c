"""``wait_for_event``: what ``key=`` and ``event_key=`` return must be able to be equal.

A run waits for an event whose ``event_key(e)`` equals its ``key(c)`` (as Python's ``==``
says, docs/workflows.md).  Two types no value of which can be equal, a ``UUID`` and its
text, an ``int`` and a ``str``, a tuple and a list, match no event: the run waits until its
timeout every time, with no error anywhere (the App cannot tell at boot, the worker only
finds no match).  mypy says of such a comparison ``Non-overlapping equality check`` under
``--strict-equality``; here the comparison is the worker's, so the plugin says it at the
step, with mypy's test of overlapping types (``1`` and ``1.0`` overlap, as they match).
"""

from __future__ import annotations

from mypy import errorcodes
from mypy.meet import is_overlapping_types
from mypy.messages import format_type_bare
from mypy.plugin import MethodContext
from mypy.types import CallableType, Type, get_proper_type

from .._rules import rules
from .._typeops.args import arg_expr, arg_type
from .._typeops.callbacks import each_called, passed, returned, wrong_count
from .._typeops.reported import fail


def _result(ctx: MethodContext, name: str) -> Type | None:
    """What resolver ``name`` returns; ``None`` for a value given where the function belongs
    (mypy's own error says so) or a function of another number of parameters
    (``resolvers.explain_parameters`` says so)."""
    given = arg_type(ctx, name)
    if given is None:
        return None
    called = each_called(get_proper_type(given), passed(ctx, name))
    if not called or not all(isinstance(fn, CallableType) and wrong_count(fn) is None for fn in called):
        return None
    return returned(ctx, name)


def check(ctx: MethodContext) -> Type:
    key, event_key = _result(ctx, "key"), _result(ctx, "event_key")
    expr = arg_expr(ctx, "event_key")
    if key is None or event_key is None or expr is None or is_overlapping_types(key, event_key):
        return ctx.default_return_type
    options = ctx.api.options
    message = rules.msg_wait_keys(format_type_bare(key, options), format_type_bare(event_key, options))
    fail(ctx, message, expr, code=errorcodes.ARG_TYPE)
    return ctx.default_return_type
