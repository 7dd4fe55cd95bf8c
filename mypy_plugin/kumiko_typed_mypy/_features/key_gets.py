"""``c.steps.get("typo")``: an unknown key is the error a ``c.steps["typo"]`` read gives.

mypy types ``.get`` of a ``TypedDict`` by its default plugin: a known key has its type,
and an unknown one is no error but ``object`` (a ``TypedDict`` may hold keys it does not
list).  A pipeline's steps and scope hold exactly their keys, so such a read is a typo or
a key of a later step: the same error as a subscript, which the step's hook then
completes with the closest keys (``key_typos``).  Only ``.get`` on ``<ctx>.steps`` or
``<ctx>.scope`` of a ``Ctx`` is checked; other ``TypedDict``s keep mypy's behaviour.
"""

from __future__ import annotations

from typing import Final

from mypy.checker import TypeChecker
from mypy.nodes import CallExpr, MemberExpr
from mypy.plugin import MethodContext
from mypy.plugins.default import typed_dict_get_callback
from mypy.typeops import try_getting_str_literals
from mypy.types import AnyType, Instance, Type, TypedDictType, TypeOfAny, get_proper_type

from .._names import CTX

#: ``Ctx`` attributes typed by the plugin's ``TypedDict``s.
_KEYED: Final = frozenset({"steps", "scope"})


def checked_get(ctx: MethodContext) -> Type:
    result = typed_dict_get_callback(ctx)
    mapping = get_proper_type(ctx.type)
    if not (isinstance(mapping, TypedDictType) and ctx.args and len(ctx.args[0]) == 1 and _on_ctx(ctx)):
        return result
    keys = try_getting_str_literals(ctx.args[0][0], ctx.arg_types[0][0])
    unknown = [key for key in keys or () if key not in mapping.items]
    for key in unknown:
        ctx.api.msg.typeddict_key_not_found(mapping, key, ctx.args[0][0])
    return AnyType(TypeOfAny.from_error) if unknown else result


def _on_ctx(ctx: MethodContext) -> bool:
    """Whether the call is ``<expr>.steps.get(...)`` (or ``.scope``) with ``<expr>`` a ``Ctx``."""
    call = ctx.context
    if not (isinstance(call, CallExpr) and isinstance(call.callee, MemberExpr)):
        return False
    attribute = call.callee.expr
    if not (isinstance(attribute, MemberExpr) and attribute.name in _KEYED and isinstance(ctx.api, TypeChecker)):
        return False
    try:
        owner = get_proper_type(ctx.api.lookup_type(attribute.expr))
    except KeyError:
        return False
    return isinstance(owner, Instance) and owner.type.fullname == CTX
