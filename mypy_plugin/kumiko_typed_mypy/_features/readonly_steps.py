"""A ``def`` resolver whose steps (or scope) are typed with a ``TypedDict`` of the user's own,
``def doubled(c: Ctx[Order, NeedsCount, Any])``, whose keys are not ``ReadOnly``.

The plugin's steps and scope are ``TypedDict``s whose keys are all read-only (a resolver
reads, only steps write), and mypy refuses a read-only key where the function declares a
writable one: its ``arg-type`` error shows two ``TypedDict``s that differ only by a ``=``
after each key, and no fix (without the plugin the same function is accepted).  After mypy
has checked the call, such an error gets the fix: which keys to declare ``ReadOnly[...]``.
Only an error the read-only keys alone cause is amended; a missing key or another type is
mypy's error as it is.
"""

from __future__ import annotations

from mypy import errorcodes
from mypy.messages import format_type_bare
from mypy.options import Options
from mypy.plugin import MethodContext
from mypy.subtypes import is_subtype
from mypy.types import CallableType, Instance, Type, TypedDictType, get_proper_type

from .._names import CTX, SCOPE_ARG, STEPS_ARG
from .._typeops.callbacks import as_called
from .._typeops.reported import at, recorded_in


def hint(ctx: MethodContext) -> None:
    """Append the fix to this call's ``arg-type`` errors that read-only keys alone cause."""
    errors = [
        info
        for info in recorded_in(ctx.api.msg.errors, ctx.context)
        if info.code == errorcodes.ARG_TYPE and info.severity == "error"
    ]
    receiver = get_proper_type(ctx.type)
    if not errors or not isinstance(receiver, Instance) or len(receiver.args) <= SCOPE_ARG:
        return
    for types, exprs in zip(ctx.arg_types, ctx.args, strict=True):
        for given, expr in zip(types, exprs, strict=True):
            fix = _fix(receiver, given, ctx.api.options)
            for info in errors:
                if fix is not None and at(info, expr):
                    info.message += f"; {fix}"


def _fix(receiver: Instance, given: Type, options: Options) -> str | None:
    """The fix when ``given`` is a function of a ``Ctx`` whose steps or scope are a
    ``TypedDict`` that the builder's would match if its keys were read-only."""
    fn = as_called(get_proper_type(given))
    if not (isinstance(fn, CallableType) and fn.arg_types):
        return None
    first = get_proper_type(fn.arg_types[0])
    if not (isinstance(first, Instance) and first.type.has_base(CTX) and len(first.args) > SCOPE_ARG):
        return None
    for index, attribute in ((STEPS_ARG, "steps"), (SCOPE_ARG, "scope")):
        wanted = get_proper_type(first.args[index])
        have = get_proper_type(receiver.args[index])
        if not (isinstance(wanted, TypedDictType) and isinstance(have, TypedDictType)):
            continue
        writable = [key for key in wanted.items if key not in wanted.readonly_keys]
        relaxed = wanted.copy_modified(readonly_keys=set(wanted.items))
        if writable and not is_subtype(have, wanted) and is_subtype(have, relaxed):
            keys = ", ".join(f"{key}: ReadOnly[{format_type_bare(wanted.items[key], options)}]" for key in writable)
            return (
                f"the keys of c.{attribute} are read-only (resolvers only read): declare them so in "
                f"{wanted.fallback.type.name}, {keys} (ReadOnly from typing_extensions, or typing on Python 3.13+)"
            )
    return None
