"""``for_each`` and ``retry`` bodies.

- Before the call (signature hook) the body's scope marker ``AddScope[Sc, I]``
  becomes ``Sc`` plus ``{item: <element type of over=>}``.
- After the call, a loop's body keys become ``T | None`` (zero iterations leave
  them unset); a retry body's keys stay ``T`` (the body ran to completion).
"""

from __future__ import annotations

from typing import Final

from mypy.checker import TypeChecker
from mypy.nodes import Expression
from mypy.plugin import MethodContext, MethodSigContext
from mypy.type_visitor import TypeTranslator
from mypy.typeops import make_simplified_union
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    NoneType,
    Type,
    TypeAliasType,
    TypeOfAny,
    TypeVarId,
    TypeVarType,
    get_proper_type,
)

from .. import _errors
from .._names import ADD_SCOPE, LOOP, RETRY, STEPS_ARG
from .._rules import rules
from .._typeops.args import arg_expr, receiver_steps, where, with_arg
from .._typeops.callbacks import as_called, body_steps, detach, each_called, solved_for
from .._typeops.empty_results import unsolved_items
from .._typeops.keys import OpenKeys, Unknown, keys_of, make, open_if_any, unknown_steps
from .._typeops.literals import (
    literal_str,
    name_refused_by_mypy,
    opaque_member,
    plain_enum_member,
    plain_enum_message,
    unnamed_message,
)
from .._typeops.reported import fail


class _Opaque:
    """An item whose key no one can name: named by an enum member whose value mypy does not
    know (``opaque_member``, ``OPAQUE``), or by a member of an enum that is no ``str``
    (``plain_enum_member``, ``PLAIN``).  Reported once; the item then reads as ``Any``."""


OPAQUE: Final = _Opaque()
PLAIN: Final = _Opaque()


class _ScopeRewriter(TypeTranslator):
    """Puts the loop item into the body's scope and its element type in place of ``I``.

    With ``I`` left free, mypy would solve it together with the body's keys and, for
    an ``over=`` whose type depends on its context (a list display, a comprehension),
    check the ``do=`` lambda against a half-solved signature: its keys came out
    ``Never``.  Replacing ``I`` by the type worked out here leaves only the body's
    own type variables for mypy to solve.
    """

    def __init__(self, ctx: MethodSigContext, item: str | _Opaque, item_var: TypeVarId | None, item_type: Type) -> None:
        super().__init__()
        self.ctx = ctx
        self.item = item
        self.item_var = item_var
        self.item_type = item_type

    def visit_type_var(self, t: TypeVarType) -> Type:
        return self.item_type if t.id == self.item_var else t

    def visit_type_alias_type(self, t: TypeAliasType) -> Type:
        return t.copy_modified(args=[a.accept(self) for a in t.args])

    def visit_instance(self, t: Instance) -> Type:
        if t.type.fullname != ADD_SCOPE:
            return super().visit_instance(t)
        keys = keys_of(t.args[0])
        if isinstance(keys, Unknown):
            return t.args[0]
        if isinstance(self.item, _Opaque):
            return make(self.ctx.api, OpenKeys(keys))  # the item's key is unknown: it reads as Any
        keys[self.item] = self.item_type
        return make(self.ctx.api, keys)


def _item_var(sig: CallableType) -> TypeVarId | None:
    """The id of the loop item's type variable: the argument of ``Iterable`` in ``over``'s return."""
    over = get_proper_type(sig.arg_types[sig.arg_names.index("over")]) if "over" in sig.arg_names else None
    if not isinstance(over, CallableType):
        return None
    returned = get_proper_type(over.ret_type)
    if isinstance(returned, Instance) and returned.args:
        var = get_proper_type(returned.args[0])
        if isinstance(var, TypeVarType):
            return var.id
    return None


def _item_type(ctx: MethodSigContext, name: str | _Opaque) -> Type:
    """The type of ``x`` in ``for x in <what over= returns>``, as mypy's own ``for`` infers it.

    ``over=`` is typed here, before the call is checked, with its messages held back
    (the call's own check reports them once); an empty collection of no item type is
    reported as the loop ``name``'s.
    """
    sig = ctx.default_signature
    expr = arg_expr(ctx, "over")
    if expr is None or "over" not in sig.arg_names:
        return AnyType(TypeOfAny.from_error)
    # The parameter types the lambda gets, but no expectation of what it returns: an
    # ``Iterable[I]`` context would make a list display a ``list[I]``.
    context = get_proper_type(sig.arg_types[sig.arg_names.index("over")])
    if isinstance(context, CallableType):
        context = context.copy_modified(ret_type=ctx.api.named_generic_type("builtins.object", []))
    passed = context.arg_types[0] if isinstance(context, CallableType) and context.arg_types else None
    with ctx.api.msg.filter_errors():
        given = get_proper_type(ctx.api.get_expression_type(expr, type_context=context))
    # A partial, an object with __call__ or an overloaded def as the signature it is called
    # with; of a choice of functions (``lines if FLAG else others``), each one's items.
    choices = each_called(given, passed)
    functions = [f for f in choices if isinstance(f, CallableType)]
    if functions and len(functions) == len(choices):
        return make_simplified_union([_items(ctx, f, context, name, expr) for f in functions])
    over = as_called(given, passed)
    if not isinstance(over, AnyType):
        # Not a function (a list, a number): the call's own check says so at the argument,
        # with the type it expects; a second error for it would only repeat that.
        return AnyType(TypeOfAny.from_error)
    fail(
        ctx,
        f"for_each over= must be a function returning an iterable (got {over}); e.g. over=lambda c: c.payload.lines",
        expr,
        code=_errors.UNANALYZABLE,
    )
    return AnyType(TypeOfAny.from_error)


def _item_name(ctx: MethodSigContext, expr: Expression | None) -> str | _Opaque | None:
    """The loop item's name, read as a step's name is: from its type too, so that a
    ``Final`` read through an instance (``self.ITEM``) works as it does for ``compute``.
    ``None`` is reported here, unless mypy's check of the call reports the argument."""
    given = None
    if expr is not None:
        with ctx.api.msg.filter_errors():
            given = ctx.api.get_expression_type(expr)
    name = literal_str(given, expr)
    if name is None and opaque_member(given, expr):
        return OPAQUE
    plain = plain_enum_member(given) if name is None else None
    if plain is not None:
        fail(ctx, plain_enum_message("for_each", plain), where(ctx, "item"), code=_errors.STEP_NAME)
        return PLAIN
    if name is None and not name_refused_by_mypy(ctx.api, given):
        fail(ctx, unnamed_message("for_each", given), where(ctx, "item"), code=_errors.STEP_NAME)
    return name


def _items(ctx: MethodSigContext, over: CallableType, context: Type, name: str | _Opaque, expr: Expression) -> Type:
    """The type of ``x`` in ``for x in over(c)``."""
    if isinstance(context, CallableType) and context.arg_types:
        over = solved_for(over, context.arg_types[0])  # a generic def: what the step passes
    returned = get_proper_type(over.ret_type)
    if isinstance(returned, AnyType):
        return returned
    if isinstance(name, str) and unsolved_items(ctx, returned, name, expr):
        return AnyType(TypeOfAny.from_error)
    checker = ctx.api
    if isinstance(checker, TypeChecker):
        with checker.msg.filter_errors() as errors:
            _, item = checker.analyze_iterable_item_type_without_expression(returned, expr)
        if not errors.has_new_errors():
            return item
    # Not iterable: the call's own check says so at the argument.
    return AnyType(TypeOfAny.from_error)


def scope_signature(ctx: MethodSigContext) -> CallableType:
    expr = arg_expr(ctx, "item")
    item = _item_name(ctx, expr)
    if item is None:
        return ctx.default_signature
    if not item:
        fail(ctx, rules.msg_empty_step_name("for_each"), where(ctx, "item"), code=_errors.STEP_NAME)
        return ctx.default_signature
    sig = ctx.default_signature
    if item is OPAQUE:  # reported, as for a step's name; the item then reads as Any
        fail(ctx, rules.msg_unknown_member_value("for_each"), where(ctx, "item"), code=_errors.STEP_NAME)
    elif item is PLAIN:  # reported by _item_name: mypy's arg-type (no str) would say it again
        anything = ctx.api.named_generic_type("builtins.object", [])
        named = zip(sig.arg_names, sig.arg_types, strict=True)
        sig = sig.copy_modified(arg_types=[anything if n == "item" else t for n, t in named])
    item_var = _item_var(sig)
    rewriter = _ScopeRewriter(ctx, item, item_var, _item_type(ctx, item))
    variables = [v for v in sig.variables if v.id != item_var]
    sig = sig.copy_modified(arg_types=[t.accept(rewriter) for t in sig.arg_types], variables=variables)
    return detach(ctx.api, sig, ("do",))


def _body_keys(ctx: MethodContext, marker_name: str, optional: bool) -> Type:
    ret = get_proper_type(ctx.default_return_type)
    if not isinstance(ret, Instance):
        return ctx.default_return_type
    marker = get_proper_type(ret.args[STEPS_ARG])
    if not (isinstance(marker, Instance) and marker.type.fullname == marker_name):
        return ctx.default_return_type
    before = keys_of(receiver_steps(ctx))
    body_type = body_steps(ctx, "do") or AnyType(TypeOfAny.from_error)
    body = open_if_any(keys_of(body_type)) if not isinstance(before, Unknown) else before
    for keys in (before, body):
        if isinstance(keys, Unknown):
            return with_arg(ret, STEPS_ARG, unknown_steps(ctx, keys, "for_each" if optional else "retry"))
    assert not isinstance(before, Unknown) and not isinstance(body, Unknown)
    merged = OpenKeys(before) if isinstance(before, OpenKeys) or isinstance(body, OpenKeys) else dict(before)
    for name, value in body.items():
        if name not in before:
            merged[name] = make_simplified_union([value, NoneType()]) if optional else value
    return with_arg(ret, STEPS_ARG, make(ctx.api, merged))


def loop_keys(ctx: MethodContext) -> Type:
    return _body_keys(ctx, LOOP, optional=True)


def retry_keys(ctx: MethodContext) -> Type:
    return _body_keys(ctx, RETRY, optional=False)
