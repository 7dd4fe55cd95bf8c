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

from typing import Final

from mypy.checker import TypeChecker
from mypy.messages import format_type_bare
from mypy.nodes import ARG_POS, CallExpr, DictExpr, Expression, LambdaExpr, MemberExpr, NameExpr
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
from .._typeops.reported import fail


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
                fail(ctx, rules.msg_fill_key(key), key_expr, code=_errors.FILL)
            continue
        given = _returned(ctx.api, fn_expr)
        wanted = keys[key]
        if given is not None and not is_subtype(given, wanted):
            options = ctx.api.options
            message = rules.msg_fill_type(key, format_type_bare(wanted, options), format_type_bare(given, options))
            fail(ctx, message, fn_expr, code=_errors.FILL)
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


def check_renamed(ctx: MethodContext) -> Type:
    """``renamed=`` maps names the pipeline no longer has to names of its steps.  An old
    name that is a key is always wrong; a target is checked when every step name of the
    pipeline is visible (a chain written in the call, arms and bodies as lambdas)."""
    renamed = arg_expr(ctx, "renamed")
    pipeline = arg_expr(ctx, "pipeline")
    keys = _pipeline_keys(ctx.api, pipeline)
    if not isinstance(renamed, DictExpr) or keys is None:
        return ctx.default_return_type
    names = None if isinstance(keys, OpenKeys) or pipeline is None else _step_names(pipeline, None)
    for old_expr, new_expr in renamed.items:
        old = None if old_expr is None else literal_str_expr(old_expr)
        new = literal_str_expr(new_expr)
        if old is not None and old_expr is not None and old in keys:
            fail(ctx, rules.msg_renamed_kept(old), old_expr, code=_errors.RENAMED)
        elif old is not None and new is not None and names is not None and new not in keys and new not in names:
            fail(ctx, rules.msg_renamed_target(old, new), new_expr, code=_errors.RENAMED)
    return ctx.default_return_type


#: Builder methods whose arguments hold sub-pipelines, and those arguments.
_ARMS: Final = frozenset({"on_true", "on_false", "do"})


def _step_names(expr: Expression, builder: str | None) -> set[str] | None:
    """The names a chain gives its steps beyond their keys (``name=``, a loop's item);
    ``None`` unless every step of it is written out here.  ``builder``: the parameter
    of the arm's lambda the chain starts from (``None``: ``workflow_pipeline(...)``)."""
    names: set[str] = set()
    if isinstance(expr, CallExpr) and isinstance(expr.callee, MemberExpr) and expr.callee.name == "return_":
        expr = expr.callee.expr
    while not (isinstance(expr, NameExpr) and builder is not None and expr.name == builder):
        if not (isinstance(expr, CallExpr) and isinstance(expr.callee, MemberExpr)):
            return None
        method = expr.callee.name
        if method == "workflow_pipeline" and builder is None:
            return names
        if method not in _STEP_METHODS:
            return None
        for n, (arg_name, arg) in enumerate(zip(expr.arg_names, expr.args, strict=True)):
            if arg_name == "name" or (method == "for_each" and (arg_name == "item" or (n == 0 and arg_name is None))):
                name = literal_str_expr(arg)
                if name is None:
                    return None
                names.add(name)
            elif arg_name in _ARMS:
                if not (isinstance(arg, LambdaExpr) and len(arg.arguments) == 1):
                    return None
                inner = _step_names(arg.expr(), arg.arguments[0].variable.name)
                if inner is None:
                    return None
                names |= inner
        expr = expr.callee.expr
    return names


_STEP_METHODS: Final = frozenset(rule.method for rule in rules.STEP_RULES) - {"return_"}
