"""``branch(when=lambda c: c.steps["note"] is not None, on_true=...)``: inside the arms a
key tested against ``None`` by ``when=`` has the type the test proves.

mypy narrows within one expression, never across the lambdas of a call, so without this
the ``on_true`` arm read ``c.steps["note"]`` still as ``str | None``.  The narrowing is
sound because nothing can change the key between the test and the arm: a key is set
once (a second step of that name is ``kumiko-duplicate-step``) and an arm runs right
after its condition.

The condition is read as written, before the call is checked (signature hook): a
``c.steps[...]`` or ``c.scope[...]`` of the lambda's own parameter compared with ``is
None`` or ``is not None`` (also bound by a walrus, ``(n := c.steps["note"]) is not None``,
the form pyright narrows), combined by ``and``, ``or`` and ``not``.  Anything else
narrows nothing (e.g. a test in a helper function).  The keys after the branch keep
their types: a one-arm key is still ``T | None``.
"""

from __future__ import annotations

from mypy.meet import is_overlapping_types
from mypy.nodes import (
    AssignmentExpr,
    ComparisonExpr,
    Expression,
    IndexExpr,
    LambdaExpr,
    MemberExpr,
    NameExpr,
    OpExpr,
    UnaryExpr,
)
from mypy.plugin import MethodSigContext
from mypy.type_visitor import TypeTranslator
from mypy.typeops import make_simplified_union
from mypy.types import (
    CallableType,
    Instance,
    NoneType,
    Type,
    TypeAliasType,
    TypedDictType,
    UninhabitedType,
    UnionType,
    get_proper_type,
)

from .._names import SCOPE_ARG, STEPS_ARG
from .._typeops.args import arg_expr
from .._typeops.literals import literal_str_expr

#: A fact: (``"steps"`` or ``"scope"``, key) → whether the value is ``None``.
Facts = dict[tuple[str, str], bool]


def narrow_arms(ctx: MethodSigContext) -> CallableType:
    sig = ctx.default_signature
    when = arg_expr(ctx, "when")
    if not (isinstance(when, LambdaExpr) and len(when.arguments) == 1):
        return sig
    test = when.expr()
    param = when.arguments[0].variable.name
    arg_types = list(sig.arg_types)
    for arm, facts in (("on_true", _facts(test, param, True)), ("on_false", _facts(test, param, False))):
        if facts and arm in sig.arg_names:
            index = sig.arg_names.index(arm)
            arg_types[index] = arg_types[index].accept(_ArmNarrower(facts))
    return sig.copy_modified(arg_types=arg_types)


def _facts(test: Expression, param: str, outcome: bool) -> Facts:
    """What ``test`` evaluating to ``outcome`` proves about keys."""
    if isinstance(test, UnaryExpr) and test.op == "not":
        return _facts(test.expr, param, not outcome)
    if isinstance(test, OpExpr) and test.op in ("and", "or"):
        if (test.op == "and") == outcome:  # both sides had this outcome
            return {**_facts(test.left, param, outcome), **_facts(test.right, param, outcome)}
        return {}
    if isinstance(test, ComparisonExpr) and len(test.operators) == 1 and test.operators[0] in ("is", "is not"):
        left, right = test.operands
        if isinstance(left, NameExpr) and left.fullname == "builtins.None":
            left, right = right, left
        read = _key_read(left.value if isinstance(left, AssignmentExpr) else left, param)
        if read is None or not (isinstance(right, NameExpr) and right.fullname == "builtins.None"):
            return {}
        return {read: (test.operators[0] == "is") == outcome}
    return {}


def _key_read(expr: Expression, param: str) -> tuple[str, str] | None:
    """``("steps", key)`` for ``<param>.steps[key]``, likewise for ``scope``."""
    if not (isinstance(expr, IndexExpr) and isinstance(expr.base, MemberExpr)):
        return None
    owner = expr.base.expr
    if not (isinstance(owner, NameExpr) and owner.name == param and expr.base.name in ("steps", "scope")):
        return None
    key = literal_str_expr(expr.index)
    return (expr.base.name, key) if key is not None else None


class _ArmNarrower(TypeTranslator):
    """Narrows the keys in the arm builder's steps and scope (the callback's parameter)."""

    def __init__(self, facts: Facts) -> None:
        super().__init__()
        self.facts = facts

    def visit_type_alias_type(self, t: TypeAliasType) -> Type:
        return t

    def visit_callable_type(self, t: CallableType) -> Type:
        return t.copy_modified(arg_types=[self._builder(a) for a in t.arg_types])

    def _builder(self, t: Type) -> Type:
        p = get_proper_type(t)
        if not (isinstance(p, Instance) and len(p.args) > SCOPE_ARG):
            return t
        args = list(p.args)
        for index, kind in ((STEPS_ARG, "steps"), (SCOPE_ARG, "scope")):
            keys = get_proper_type(args[index])
            if isinstance(keys, TypedDictType):
                args[index] = _narrowed(keys, {k: v for (where, k), v in self.facts.items() if where == kind})
        return p.copy_modified(args=args)


def _narrowed(keys: TypedDictType, facts: dict[str, bool]) -> TypedDictType:
    items = dict(keys.items)
    for key, is_none in facts.items():
        if key in items:
            items[key] = _only_none(items[key]) if is_none else _without_none(items[key])
    return keys.copy_modified(item_types=list(items.values()))


def _only_none(t: Type) -> Type:
    """``None``, or ``Never`` when ``t`` cannot be None: that arm never runs (mypy's own
    ``if x is None`` makes such code unreachable), and a ``None`` there made every use of
    the key in it an error."""
    return NoneType() if is_overlapping_types(NoneType(), t) else UninhabitedType()


def _without_none(t: Type) -> Type:
    p = get_proper_type(t)
    if isinstance(p, UnionType):
        return make_simplified_union([i for i in p.items if not isinstance(get_proper_type(i), NoneType)])
    return UninhabitedType() if isinstance(p, NoneType) else t
