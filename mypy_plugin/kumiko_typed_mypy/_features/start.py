"""A new pipeline starts with no keys: ``NoSteps``/``NoScope`` become empty ``TypedDict``s.

The markers subclass ``Any`` so that, without the plugin, nothing is a false error.
With the plugin that would be a silent ``Any``: ``c.steps["nope"]`` in a first step,
or ``c.scope["x"]`` outside every loop, would pass.  As empty ``TypedDict``s, mypy
reports the key and lists the valid ones (none).
"""

from __future__ import annotations

from mypy.plugin import MethodContext
from mypy.types import Instance, Type, get_proper_type

from .._names import SCOPE_ARG, STEPS_ARG
from .._typeops.keys import EMPTY_MARKERS, make


def empty_keys(ctx: MethodContext) -> Type:
    ret = get_proper_type(ctx.default_return_type)
    if not isinstance(ret, Instance) or len(ret.args) <= SCOPE_ARG:
        return ctx.default_return_type
    args = list(ret.args)
    for index in (STEPS_ARG, SCOPE_ARG):
        marker = get_proper_type(args[index])
        if isinstance(marker, Instance) and marker.type.fullname in EMPTY_MARKERS:
            args[index] = make(ctx.api, {})
    return ret.copy_modified(args=args)
