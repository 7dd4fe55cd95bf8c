"""``branch(when=lambda c: ..., on_true=..., on_false=...)``: inside the arms a key that
``when=`` tests has the type the test proves, as mypy's own ``if`` would give it.

mypy narrows within one expression, never across the lambdas of a call, so without this
the ``on_true`` arm read ``c.steps["note"]`` still as ``str | None``.  The narrowing is
sound because nothing can change the key between the test and the arm: a key is set
once (a second step of that name is ``kumiko-duplicate-step``) and an arm runs right
after its condition.  A ``guard(when=...)`` narrows so the steps after it (its test held)
and its ``otherwise=`` (it did not).

Before the call is checked (signature hook), the ``when=`` lambda is typed with the
context the step gives it (errors held back, types kept in a scratch map: the call's
own check types it again), and mypy's ``find_isinstance_check``, the one behind its
``if``, says what the test proves when true and when false: ``is None``/``is not None``,
``isinstance``, a ``TypeGuard`` or ``TypeIs`` function, a comparison with a literal,
``and``/``or``/``not``.  Of that, the entries for ``c.steps[...]`` or ``c.scope[...]`` of
the lambda's own parameter (also bound by a walrus, ``(n := c.steps["note"]) is not
None``, the form pyright narrows) become the arm's key types.  An outcome mypy finds
impossible (``is None`` of an ``int``) reads the keys the test reads as ``Never``: that
arm never runs.  A test in a helper function narrows nothing, as in mypy.  The keys
after the branch keep their types: a one-arm key is still ``T | None``.
"""

from __future__ import annotations

from mypy.checker import TypeChecker, is_unreachable_map
from mypy.nodes import (
    AssignmentExpr,
    Expression,
    IndexExpr,
    LambdaExpr,
    MemberExpr,
    NameExpr,
    StrExpr,
    Var,
)
from mypy.plugin import MethodSigContext
from mypy.server.subexpr import get_subexpressions
from mypy.type_visitor import TypeTranslator
from mypy.types import (
    CallableType,
    Instance,
    Type,
    TypeAliasType,
    TypedDictType,
    TypeGuardedType,
    UninhabitedType,
    get_proper_type,
)

from .._names import SCOPE_ARG, STEPS_ARG
from .._typeops.args import arg_expr
from .._typeops.literals import literal_str_expr

#: What an outcome of the test proves: (``"steps"`` or ``"scope"``, key) → its type.
Facts = dict[tuple[str, str], Type]


def narrow_arms(ctx: MethodSigContext) -> CallableType:
    sig = ctx.default_signature
    proved = _proved(ctx)
    if proved is None:
        return sig
    arg_types = list(sig.arg_types)
    for arm, facts in zip(("on_true", "on_false"), proved, strict=True):
        if facts and arm in sig.arg_names:
            index = sig.arg_names.index(arm)
            arg_types[index] = arg_types[index].accept(_ArmNarrower(facts))
    return sig.copy_modified(arg_types=arg_types)


def narrow_after_guard(ctx: MethodSigContext) -> CallableType:
    """``guard(when=..., otherwise=...)``: the steps after it have the keys its test proves
    true (the pipeline goes on only then), ``otherwise=`` those it proves false.  Sound as
    an arm's: a key is set once, and the steps after a guard run only after it passed.  The
    keys a guard in an arm or loop body proves stay there: after the branch or loop, the
    keys from before it are read from the builder before it."""
    sig = ctx.default_signature
    proved = _proved(ctx)
    if proved is None:
        return sig
    passed, refused = proved
    arg_types = list(sig.arg_types)
    if refused and "otherwise" in sig.arg_names:
        index = sig.arg_names.index("otherwise")
        arg_types[index] = arg_types[index].accept(_ArmNarrower(refused))
    ret_type = _ArmNarrower(passed).builder(sig.ret_type) if passed else sig.ret_type
    return sig.copy_modified(arg_types=arg_types, ret_type=ret_type)


def _proved(ctx: MethodSigContext) -> tuple[Facts, Facts] | None:
    """What ``when=`` proves of the keys it reads when true and when false."""
    sig = ctx.default_signature
    when = arg_expr(ctx, "when")
    checker = ctx.api
    if not (isinstance(when, LambdaExpr) and len(when.arguments) == 1 and isinstance(checker, TypeChecker)):
        return None
    test, param = when.expr(), when.arguments[0].variable
    reads = {e: read for e in get_subexpressions(test) if isinstance(e, IndexExpr) and (read := _key_read(e, param))}
    if not reads or "when" not in sig.arg_names:
        return None  # nothing to narrow: the lambda is not typed twice
    # mypy narrows a subscript by a literal key only, so a key read by an enum member,
    # ``c.steps[Key.NOTE.value]`` (see enum_keys), is read by its string for this check.
    indices = {e: e.index for e in reads if not isinstance(e.index, StrExpr)}
    for e, (_, key) in reads.items():
        if e in indices:
            e.index = StrExpr(key)
    try:
        with checker.msg.filter_errors(), checker.local_type_map:
            checker.get_expression_type(when, type_context=sig.arg_types[sig.arg_names.index("when")])
            proved = checker.find_isinstance_check(test)
    except KeyError:  # a part of the test mypy left untyped: no narrowing rather than a guess
        return None
    finally:
        for e, original in indices.items():
            e.index = original
    aliases: dict[Var | None, tuple[str, str]] = {
        target: reads[e.value]
        for e in get_subexpressions(test)
        if isinstance(e, AssignmentExpr) and e.value in reads and (target := _target(e)) is not None
    }
    outcomes: list[Facts] = []
    for typemap in proved:
        if is_unreachable_map(typemap):  # this outcome cannot happen: its steps never run
            facts: Facts = {read: UninhabitedType() for read in reads.values()}
        else:
            facts = {}
            for expr, narrowed in typemap.items():
                read = reads.get(expr) if isinstance(expr, IndexExpr) else aliases.get(_target(expr))
                if read is not None:
                    facts[read] = narrowed.type_guard if isinstance(narrowed, TypeGuardedType) else narrowed
        outcomes.append(facts)
    return outcomes[0], outcomes[1]


def _target(expr: Expression) -> Var | None:
    """The variable a walrus binds (or a name reads), to map its narrowing to the key."""
    name = expr.target if isinstance(expr, AssignmentExpr) else expr
    return name.node if isinstance(name, NameExpr) and isinstance(name.node, Var) else None


def _key_read(expr: Expression, param: Var) -> tuple[str, str] | None:
    """``("steps", key)`` for ``<param>.steps[key]``, likewise for ``scope``."""
    if not (isinstance(expr, IndexExpr) and isinstance(expr.base, MemberExpr)):
        return None
    owner = expr.base.expr
    if not (isinstance(owner, NameExpr) and owner.node is param and expr.base.name in ("steps", "scope")):
        return None
    key = literal_str_expr(expr.index)
    return (expr.base.name, key) if key is not None else None


class _ArmNarrower(TypeTranslator):
    """Narrows the keys in the arm builder's steps and scope (the callback's parameter, or
    a builder itself: :meth:`builder`)."""

    def __init__(self, facts: Facts) -> None:
        super().__init__()
        self.facts = facts

    def visit_type_alias_type(self, t: TypeAliasType) -> Type:
        return t

    def visit_callable_type(self, t: CallableType) -> Type:
        return t.copy_modified(arg_types=[self.builder(a) for a in t.arg_types])

    def builder(self, t: Type) -> Type:
        p = get_proper_type(t)
        if not (isinstance(p, Instance) and len(p.args) > SCOPE_ARG):
            return t
        args = list(p.args)
        for index, kind in ((STEPS_ARG, "steps"), (SCOPE_ARG, "scope")):
            keys = get_proper_type(args[index])
            if isinstance(keys, TypedDictType):
                args[index] = _narrowed(keys, {k: t for (where, k), t in self.facts.items() if where == kind})
        return p.copy_modified(args=args)


def _narrowed(keys: TypedDictType, facts: dict[str, Type]) -> TypedDictType:
    items = dict(keys.items)
    items.update((key, narrowed) for key, narrowed in facts.items() if key in items)
    return keys.copy_modified(item_types=list(items.values()))
