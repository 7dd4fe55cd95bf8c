"""``c.steps.get("typo")``: an unknown key is ``kumiko-unknown-key``.

mypy types ``.get`` of a ``TypedDict`` by its default plugin: a known key has its type,
and an unknown one is no error but ``object`` (a ``TypedDict`` may hold keys it does not
list).  A pipeline's steps and scope hold exactly their keys, so such a read is a typo or
a key of a later step; mypy reports nothing, so the code is the plugin's.  The message
names the closest keys (difflib's closeness, as ``key_typos`` for a subscript), or else
the keys there are.  Only ``.get`` on ``<ctx>.steps`` or ``<ctx>.scope`` of a ``Ctx`` is
checked; other ``TypedDict``s keep mypy's behaviour.
"""

from __future__ import annotations

from mypy.checker import TypeChecker
from mypy.nodes import CallExpr, MemberExpr
from mypy.plugin import MethodContext
from mypy.plugins.default import typed_dict_get_callback
from mypy.typeops import try_getting_str_literals
from mypy.types import AnyType, Instance, Type, TypedDictType, TypeOfAny, get_proper_type

from .. import _errors
from .._names import CTX
from .._typeops.closest import did_you_mean
from .._typeops.reported import fail


def checked_get(ctx: MethodContext) -> Type:
    result = typed_dict_get_callback(ctx)
    mapping = get_proper_type(ctx.type)
    if not (isinstance(mapping, TypedDictType) and ctx.args and len(ctx.args[0]) == 1):
        return result
    attribute = _ctx_attribute(ctx)
    if attribute is None:
        return result
    keys = try_getting_str_literals(ctx.args[0][0], ctx.arg_types[0][0])
    unknown = [key for key in keys or () if key not in mapping.items]
    for key in unknown:
        fail(ctx, _message(attribute, key, list(mapping.items)), ctx.args[0][0], code=_errors.UNKNOWN_KEY)
    return AnyType(TypeOfAny.from_error) if unknown else result


def _message(attribute: str, key: str, known: list[str]) -> str:
    where = "no step before this one is" if attribute == "steps" else "no for_each around this step has its item"
    fix = did_you_mean(key, known)
    if fix is None and known:
        fix = "read one of " + ", ".join(f'"{k}"' for k in known)
    elif fix is None:
        fix = (
            "no key exists yet: read a key only after the step that produces it"
            if attribute == "steps"
            else "no loop item is in scope: read c.scope inside a for_each body"
        )
    return f'c.{attribute}.get("{key}"): {where} named "{key}"; {fix}'


def _ctx_attribute(ctx: MethodContext) -> str | None:
    """``"steps"`` for ``<expr>.steps.get(...)`` with ``<expr>`` a ``Ctx`` (a workflow's
    ``WorkflowCtx`` too), ``"scope"`` likewise."""
    call = ctx.context
    if not (isinstance(call, CallExpr) and isinstance(call.callee, MemberExpr)):
        return None
    attribute = call.callee.expr
    if not (isinstance(attribute, MemberExpr) and attribute.name in ("steps", "scope")):
        return None
    if not isinstance(ctx.api, TypeChecker):
        return None
    try:
        owner = get_proper_type(ctx.api.lookup_type(attribute.expr))
    except KeyError:
        return None
    return attribute.name if isinstance(owner, Instance) and owner.type.has_base(CTX) else None
