"""``Branch[S, S1, S2]``: keys both arms set keep their type; one-arm keys become ``T | None``."""

from __future__ import annotations

from mypy.plugin import MethodContext
from mypy.types import AnyType, Instance, Type, TypeOfAny, get_proper_type

from .._names import BRANCH, STEPS_ARG
from .._typeops.args import receiver_steps, with_arg
from .._typeops.callbacks import body_steps
from .._typeops.keys import Unknown, either, keys_of, make, open_if_any, unknown_steps


def merge_arms(ctx: MethodContext) -> Type:
    ret = get_proper_type(ctx.default_return_type)
    if not isinstance(ret, Instance):
        return ctx.default_return_type
    marker = get_proper_type(ret.args[STEPS_ARG])
    if not (isinstance(marker, Instance) and marker.type.fullname == BRANCH):
        return ctx.default_return_type
    before = receiver_steps(ctx)
    on_true = body_steps(ctx, "on_true") or AnyType(TypeOfAny.from_error)
    on_false = body_steps(ctx, "on_false") or before  # no else-arm: it adds nothing
    base = keys_of(before)
    if isinstance(base, Unknown):
        return with_arg(ret, STEPS_ARG, unknown_steps(ctx, base, "branch"))
    yes, no = open_if_any(keys_of(on_true)), open_if_any(keys_of(on_false))
    for keys in (yes, no):
        if isinstance(keys, Unknown):
            return with_arg(ret, STEPS_ARG, unknown_steps(ctx, keys, "branch"))
    assert not isinstance(yes, Unknown) and not isinstance(no, Unknown)
    # An arm typed Any keeps the keys before the branch exact; only its own are Any.
    return with_arg(ret, STEPS_ARG, make(ctx.api, either(base, [yes, no])))
