"""Callbacks that determine a step's type, typed from the callback itself: branch arms,
loop and retry bodies, and ``compute``'s ``fn``.

The builders declare e.g. ``on_true: Callable[[SubPipeline[..., S, ...]], SubPipeline[..., S1, ...]]``
and ``compute(name, fn: Callable[..., R])``, with ``S1``/``R`` type variables of the call.
A call generic in a callback's return type makes mypy check that lambda three times
(inference, second inference pass, final check), and a lambda nested inside it three
times per check: nesting cost 3^depth.  Before the call the plugin replaces those
variables by ``object`` (the call is then not generic and each lambda is checked once per
check of its enclosing call) and, after it, reads the type from the callback's own
inferred return type.
"""

from __future__ import annotations

from mypy.plugin import MethodSigContext
from mypy.types import CallableType

from .._typeops.callbacks import detach


def detach_arms(ctx: MethodSigContext) -> CallableType:
    return detach(ctx.api, ctx.default_signature, ("on_true", "on_false"))


def detach_body(ctx: MethodSigContext) -> CallableType:
    return detach(ctx.api, ctx.default_signature, ("do",))


def detach_result(ctx: MethodSigContext) -> CallableType:
    return detach(ctx.api, ctx.default_signature, ("fn",))
