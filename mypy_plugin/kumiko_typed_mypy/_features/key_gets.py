"""``c.steps.get("typo")`` and ``"typo" in c.steps``: an unknown key is ``kumiko-unknown-key``.

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
from mypy.nodes import (
    AssignmentExpr,
    CallExpr,
    ComparisonExpr,
    ConditionalExpr,
    Expression,
    GeneratorExpr,
    LambdaExpr,
    ListComprehension,
    ListExpr,
    MemberExpr,
    OpExpr,
    SetComprehension,
    SetExpr,
    TupleExpr,
    UnaryExpr,
)
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


def check_tests(ctx: MethodContext) -> None:
    """``"totl" in c.steps`` (or ``not in``) in this step's lambdas: mypy checks an ``in``
    of any ``str``, so a typo there, or a key of a later step, passed silently.  (A hook on
    ``__contains__`` cannot report it: mypy checks that call under an error filter and,
    finding an error, falls back to iterating the mapping, dropping the error.)  A lambda
    in the lambda is an inner step's, whose own hook reads it."""
    found: list[tuple[Expression, str, Expression]] = []
    for exprs in ctx.args:
        for expr in exprs:
            if isinstance(expr, LambdaExpr):
                _in_tests(expr.expr(), found)
    checker = ctx.api
    if not isinstance(checker, TypeChecker):
        return
    for key_expr, operator, tested in found:
        attribute = _owned_by_ctx(ctx, tested)
        mapping = get_proper_type(checker.lookup_type_or_none(tested))
        key_type = checker.lookup_type_or_none(key_expr)
        if attribute is None or not isinstance(mapping, TypedDictType) or key_type is None:
            continue
        for key in try_getting_str_literals(key_expr, key_type) or ():
            if key not in mapping.items:
                message = _message(attribute, key, list(mapping.items), f'"{key}" {operator} c.{attribute}')
                fail(ctx, message, key_expr, code=_errors.UNKNOWN_KEY)


def _in_tests(expr: Expression, found: list[tuple[Expression, str, Expression]]) -> None:
    """The ``key in mapping`` tests in ``expr`` (a lambda's body), as (key, operator,
    mapping), through the expressions a test is written in; not in lambdas inside it.
    (mypy's ``TraverserVisitor`` is compiled: a plugin cannot subclass it.)"""
    if isinstance(expr, ComparisonExpr):
        for index, operator in enumerate(expr.operators):
            if operator in ("in", "not in"):
                found.append((expr.operands[index], operator, expr.operands[index + 1]))
    for inner in _parts(expr):
        _in_tests(inner, found)


def _parts(expr: Expression) -> list[Expression]:
    if isinstance(expr, ComparisonExpr):
        return list(expr.operands)
    if isinstance(expr, OpExpr):
        return [expr.left, expr.right]
    if isinstance(expr, UnaryExpr):
        return [expr.expr]
    if isinstance(expr, AssignmentExpr):
        return [expr.value]
    if isinstance(expr, ConditionalExpr):
        return [expr.cond, expr.if_expr, expr.else_expr]
    if isinstance(expr, CallExpr):
        return [expr.callee, *expr.args]
    if isinstance(expr, (TupleExpr, ListExpr, SetExpr)):
        return list(expr.items)
    if isinstance(expr, (ListComprehension, SetComprehension)):
        expr = expr.generator
    if isinstance(expr, GeneratorExpr):
        return [expr.left_expr, *expr.sequences, *(c for conds in expr.condlists for c in conds)]
    return []


def _message(attribute: str, key: str, known: list[str], read: str | None = None) -> str:
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
    read = read or f'c.{attribute}.get("{key}")'
    return f'{read}: {where} named "{key}"; {fix}'


def _ctx_attribute(ctx: MethodContext) -> str | None:
    """``"steps"`` for ``<expr>.steps.get(...)`` with ``<expr>`` a ``Ctx`` (a workflow's
    ``WorkflowCtx`` too), ``"scope"`` likewise."""
    call = ctx.context
    if not (isinstance(call, CallExpr) and isinstance(call.callee, MemberExpr)):
        return None
    return _owned_by_ctx(ctx, call.callee.expr)


def _owned_by_ctx(ctx: MethodContext, attribute: Expression) -> str | None:
    """``"steps"`` for ``<expr>.steps`` with ``<expr>`` a ``Ctx``, ``"scope"`` likewise."""
    if not (isinstance(attribute, MemberExpr) and attribute.name in ("steps", "scope")):
        return None
    if not isinstance(ctx.api, TypeChecker):
        return None
    try:
        owner = get_proper_type(ctx.api.lookup_type(attribute.expr))
    except KeyError:
        return None
    return attribute.name if isinstance(owner, Instance) and owner.type.has_base(CTX) else None
