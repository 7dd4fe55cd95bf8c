"""``app.dispatch(handler, payload)`` (``query``, ``start_workflow``): the payload type is the handler's.

mypy solves the payload's type variable from both arguments, and a handler's payload type is
invariant: a payload of another class left it unsolved, and the only error was ``Cannot infer
value of type parameter "P" of "dispatch" of "App"``, naming neither the payload nor the type
wanted (pyright says ``"SignedUp" is not assignable to "Order"``).  Read off the handler first,
the type variable is no longer to be solved, and mypy's own ``arg-type`` error names both:
``Argument 2 to "dispatch" of "App" has incompatible type "SignedUp"; expected "Order"``.
"""

from __future__ import annotations

from typing import Final

from mypy.expandtype import expand_type
from mypy.maptype import map_instance_to_supertype
from mypy.plugin import MethodSigContext
from mypy.typeops import get_all_type_vars
from mypy.types import AnyType, CallableType, Instance, TypeVarType, get_proper_type

#: The ``App`` methods whose first argument is a handler (or workflow) and second its payload.
APP_METHODS: Final = (
    "kumiko_typed._app.App.dispatch",
    "kumiko_typed._app.App.query",
    "kumiko_typed._app.App.start_workflow",
)


def payload_of_handler(ctx: MethodSigContext) -> CallableType:
    sig = ctx.default_signature
    if len(ctx.args) < 2 or len(ctx.args[0]) != 1 or not sig.arg_types:
        return sig
    wanted = get_proper_type(sig.arg_types[0])
    if not isinstance(wanted, Instance) or not wanted.args:
        return sig
    variable = get_proper_type(wanted.args[0])
    if not isinstance(variable, TypeVarType) or variable.id not in {v.id for v in sig.variables}:
        return sig
    with ctx.api.msg.filter_errors():
        given = get_proper_type(ctx.api.get_expression_type(ctx.args[0][0]))
    if not isinstance(given, Instance) or not given.type.has_base(wanted.type.fullname):
        return sig  # not a handler: mypy's own error says so
    payload = map_instance_to_supertype(given, wanted.type).args[0]
    if isinstance(get_proper_type(payload), AnyType) or get_all_type_vars(payload):
        return sig  # nothing exact to check the payload against: mypy solves it as before
    return expand_type(sig, {variable.id: payload}).copy_modified(
        variables=[v for v in sig.variables if v.id != variable.id]
    )
