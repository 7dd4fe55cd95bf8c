"""Reading ``SomeSteps[TypedDict(...)]``: a known key has its type, any other is ``Any``.

The steps type becomes ``SomeSteps`` after a branch arm or loop body the user typed
``Any``; the keys from before it stay exact instead of the whole mapping turning ``Any``.
"""

from __future__ import annotations

from mypy.plugin import MethodContext
from mypy.types import AnyType, Instance, Type, TypeOfAny, get_proper_type

from .._typeops.keys import keys_of
from .._typeops.literals import literal_str


def read_key(ctx: MethodContext) -> Type:
    receiver = get_proper_type(ctx.type)
    if not (isinstance(receiver, Instance) and receiver.args and ctx.arg_types and ctx.arg_types[0]):
        return ctx.default_return_type
    known = keys_of(receiver.args[0])
    key = literal_str(ctx.arg_types[0][0], ctx.args[0][0] if ctx.args[0] else None)
    if isinstance(known, dict) and key is not None and key in known:
        return known[key]
    return AnyType(TypeOfAny.special_form)
