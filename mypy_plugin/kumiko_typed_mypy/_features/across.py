"""``feature.workflow(..., fill={"key": fn})``: each ``fn`` reads the run's stored values
and returns the value of a key the new definition sets.

The signature hook types ``fn``'s argument as the pipeline's own keys, each possibly
absent (a ``TypedDict`` with no required keys): a run stored before the change has the
keys its old definition set before the point it waits at, under the types the pipeline
gives them now (a key whose type changed is not one a run can resume with anyway).  The
method hook checks each ``fn``'s return type against its key's and that the key is one
a step sets.  Keys come from the pipeline's type, so a pipeline ended with ``return_``
is read through the builder ``return_`` was called on; one the plugin cannot read (kept
in a variable after ``return_``) is checked at boot only.
"""

from __future__ import annotations

from mypy.checker import TypeChecker
from mypy.messages import format_type_bare
from mypy.nodes import ARG_POS, CallExpr, DictExpr, Expression, MemberExpr
from mypy.plugin import CheckerPluginInterface, MethodContext, MethodSigContext
from mypy.subtypes import is_subtype
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    NoneType,
    Type,
    TypedDictType,
    UnionType,
    get_proper_type,
)

from .. import _errors
from .._names import BUILDERS_MODULE, STEPS_ARG
from .._rules import rules
from .._typeops.args import arg_expr
from .._typeops.keys import OpenKeys, keys_of
from .._typeops.literals import literal_str_expr


def stored_values(ctx: MethodSigContext) -> CallableType:
    """``fill``'s functions take the pipeline's keys, each possibly absent."""
    sig = ctx.default_signature
    keys = _pipeline_keys(ctx.api, arg_expr(ctx, "pipeline"))
    if keys is None or "fill" not in sig.arg_names:
        return sig
    api = ctx.api
    fallback = api.named_generic_type("typing._TypedDict", [])
    stored = TypedDictType(dict(keys), set(), set(keys), fallback)
    obj = api.named_generic_type("builtins.object", [])
    fn = CallableType([stored], [ARG_POS], [None], obj, api.named_generic_type("builtins.function", []))
    mapping = api.named_generic_type("typing.Mapping", [api.named_generic_type("builtins.str", []), fn])
    arg_types = list(sig.arg_types)
    arg_types[sig.arg_names.index("fill")] = UnionType.make_union([mapping, NoneType()])
    return sig.copy_modified(arg_types=arg_types)


def check_fill(ctx: MethodContext) -> Type:
    """Each ``fill`` entry names a key a step sets and returns that key's type."""
    fill = arg_expr(ctx, "fill")
    keys = _pipeline_keys(ctx.api, arg_expr(ctx, "pipeline"))
    if not isinstance(fill, DictExpr) or keys is None or not isinstance(ctx.api, TypeChecker):
        return ctx.default_return_type
    for key_expr, fn_expr in fill.items:
        key = None if key_expr is None else literal_str_expr(key_expr)
        if key is None or key_expr is None:
            continue
        if key not in keys:
            if not isinstance(keys, OpenKeys):
                ctx.api.fail(rules.msg_fill_key(key), key_expr, code=_errors.FILL)
            continue
        given = _returned(ctx.api, fn_expr)
        wanted = keys[key]
        if given is not None and not is_subtype(given, wanted):
            options = ctx.api.options
            message = rules.msg_fill_type(key, format_type_bare(wanted, options), format_type_bare(given, options))
            ctx.api.fail(message, fn_expr, code=_errors.FILL)
    return ctx.default_return_type


def _returned(api: TypeChecker, fn: Expression) -> Type | None:
    """What the function given for a key returns, as mypy inferred it (a lambda's body)."""
    try:
        t = get_proper_type(api.lookup_type(fn))
    except KeyError:
        return None
    if isinstance(t, CallableType) and not isinstance(get_proper_type(t.ret_type), AnyType):
        return t.ret_type
    return None


def _pipeline_keys(api: CheckerPluginInterface, expr: Expression | None) -> dict[str, Type] | None:
    """The keys the registered pipeline sets: read from its builder's type (the one
    ``return_`` was called on, for an ended pipeline)."""
    if expr is None:
        return None
    if isinstance(expr, CallExpr) and isinstance(expr.callee, MemberExpr) and expr.callee.name == "return_":
        expr = expr.callee.expr
    with api.msg.filter_errors():
        builder = get_proper_type(api.get_expression_type(expr))
    if not (isinstance(builder, Instance) and builder.type.fullname.startswith(f"{BUILDERS_MODULE}.")):
        return None
    if len(builder.args) <= STEPS_ARG:
        return None
    keys = keys_of(builder.args[STEPS_ARG])
    return keys if isinstance(keys, dict) else None
