"""Callbacks whose result decides a step's type: taking their type variables out of the
call's signature before it (see ``_features/bodies.py`` for why), and reading what they
returned after it."""

from __future__ import annotations

from mypy.checker import TypeChecker
from mypy.erasetype import remove_instance_last_known_values
from mypy.expandtype import expand_type
from mypy.infer import infer_type_arguments
from mypy.nodes import ARG_OPT, ARG_POS, ARG_STAR, CallExpr, ConditionalExpr, Expression, LambdaExpr
from mypy.plugin import CheckerPluginInterface, MethodContext
from mypy.subtypes import find_member, is_subtype
from mypy.typeops import get_all_type_vars, make_simplified_union
from mypy.types import (
    AnyType,
    CallableType,
    ErasedType,
    Instance,
    NoneType,
    Overloaded,
    ProperType,
    Type,
    TypeOfAny,
    TypeVarId,
    TypeVarType,
    UninhabitedType,
    UnionType,
    get_proper_type,
)

from .._names import STEPS_ARG
from .args import arg_expr, arg_type
from .keys import Unknown, common, keys_of, make


def _callbacks(t: Type) -> list[CallableType]:
    proper = get_proper_type(t)
    items = proper.items if isinstance(proper, UnionType) else [proper]
    return [c for c in map(get_proper_type, items) if isinstance(c, CallableType)]


def detach(
    api: CheckerPluginInterface, sig: CallableType, names: tuple[str, ...], *, erase: bool = False
) -> CallableType:
    """``sig`` with the type variables that the callbacks ``names`` return replaced by ``object``,
    or, where a callback returns the variable itself (``compute``'s ``fn``) or ``erase`` is
    set, by mypy's erased type.

    Not ``Any``: the callback's last call is inferred against this return context, and an
    ``Any`` there would become that call's own result type.  Not ``object`` for a bare
    result either: a generic call returning ``T | None`` whose ``T`` the arguments do not
    pin (``c.db.scalar(select(...))``, ``c.db.get(Entity, id)``) would solve ``T`` from that
    context to ``object``.  mypy takes nothing from an erased context, and an erased
    return type accepts whatever the callback returns."""
    ids: set[TypeVarId] = set()
    bare: set[TypeVarId] = set()
    for name in names:
        if name in sig.arg_names:
            for callback in _callbacks(sig.arg_types[sig.arg_names.index(name)]):
                ids |= {var.id for var in get_all_type_vars(callback.ret_type)}
                returned = get_proper_type(callback.ret_type)
                if isinstance(returned, TypeVarType):
                    bare.add(returned.id)
    ids &= {v.id for v in sig.variables}
    if not ids:
        return sig
    top = api.named_generic_type("builtins.object", [])
    replaced: dict[TypeVarId, Type] = {i: ErasedType() if erase or i in bare else top for i in ids}
    expanded = get_proper_type(expand_type(sig, replaced))
    assert isinstance(expanded, CallableType)
    return expanded.copy_modified(variables=[v for v in sig.variables if v.id not in ids])


def _callback(ctx: MethodContext, name: str) -> ProperType | None:
    given = arg_type(ctx, name)
    return get_proper_type(given) if given is not None else None


def body_steps(ctx: MethodContext, name: str) -> Type | None:
    """The steps type of the sub-pipeline that callback ``name`` returned; ``None`` when
    the argument was not given or given as ``None`` (``on_false=None``: no else-arm),
    ``Any`` when the callback's result is not a builder."""
    callback = as_called(_callback(ctx, name), passed(ctx, name))
    if callback is None or isinstance(callback, NoneType):
        return None
    alternatives = _alternatives(ctx, name)
    if alternatives:
        return _either_steps(ctx.api, alternatives)
    if isinstance(callback, CallableType):
        returned = get_proper_type(_bound_to_receiver(ctx, name, callback).ret_type)
        if isinstance(returned, Instance) and len(returned.args) > STEPS_ARG:
            return returned.args[STEPS_ARG]
        if isinstance(returned, AnyType):
            return returned
    if isinstance(callback, AnyType):
        return callback
    return AnyType(TypeOfAny.from_error)


def _alternatives(ctx: MethodContext, name: str) -> list[Type] | None:
    """The steps types of the builders a lambda chooses between, ``lambda b: b.compute("x", ...)
    if FLAG else b``, or that the callbacks a conditional expression chooses between return,
    ``arm if FLAG else other`` (mypy types that as their join, or their union, which is no
    callback: a key the two type differently read as ``object``, the keys as ``Any``);
    ``None`` when callback ``name`` is neither."""
    expr = arg_expr(ctx, name)
    if isinstance(expr, LambdaExpr) and isinstance(expr.expr(), ConditionalExpr):
        return chosen_steps(ctx.api, expr.expr())
    if not (isinstance(expr, ConditionalExpr) and isinstance(ctx.api, TypeChecker)):
        return None
    out: list[Type] = []
    for side in _sides(expr):
        given = ctx.api.lookup_type_or_none(side)
        callback = as_called(get_proper_type(given), passed(ctx, name)) if given is not None else None
        if not isinstance(callback, CallableType):
            return None
        returned = get_proper_type(_bound_to_receiver(ctx, name, callback).ret_type)
        if not (isinstance(returned, Instance) and len(returned.args) > STEPS_ARG):
            return None
        out.append(returned.args[STEPS_ARG])
    return out


def chosen_steps(api: CheckerPluginInterface, expr: Expression) -> list[Type] | None:
    """The steps types of the builders conditional expression ``expr`` chooses between;
    ``None`` when its sides are not builders.

    mypy types a conditional expression as the union of its two sides (read as no steps type
    at all), or as their join when both hold ``Never`` (a feature's capabilities without
    ``requires=``), which drops a key the sides type differently.  So each side is read
    from the type mypy stored for it; a side typed ``Never`` (a call that raises) never
    returns a builder and adds nothing."""
    if not isinstance(api, TypeChecker):
        return None
    out: list[Type] = []
    for side in _sides(expr):
        given = api.lookup_type_or_none(side)
        proper = get_proper_type(given) if given is not None else None
        if proper is None or isinstance(proper, UninhabitedType):
            continue
        if not (isinstance(proper, Instance) and len(proper.args) > STEPS_ARG):
            return None  # not builders: the callback's own type tells what it returned
        out.append(proper.args[STEPS_ARG])
    return out


def _sides(expr: Expression) -> list[Expression]:
    """What a conditional expression may evaluate to: its two sides, each a conditional itself maybe."""
    if isinstance(expr, ConditionalExpr):
        return [*_sides(expr.if_expr), *_sides(expr.else_expr)]
    return [expr]


def _either_steps(api: CheckerPluginInterface, alternatives: list[Type]) -> Type:
    """The steps of whichever of ``alternatives`` the pipeline was built with (keys.common);
    an alternative whose keys are unknown is returned as it is, for the step to report."""
    built: list[dict[str, Type]] = []
    for steps in alternatives:
        keys = keys_of(steps)
        if isinstance(keys, Unknown):
            return steps
        built.append(keys)
    return make(api, common(built))


def _bound_to_receiver(ctx: MethodContext, name: str, callback: CallableType) -> CallableType:
    """A generic callback, ``def arm(b: SubPipeline[P, S, Sc, C]) -> SubPipeline[P, S, Sc, C]``
    or ``def payload_of(c: Ctx[P, Any, Any]) -> P``, with its type variables solved from what
    it is called with: the receiver's payload, keys, scope (and capabilities).

    mypy checks such an argument against the parameter without keeping how it bound the
    variables, so the callback's type still names them; a lambda's type is already solved.
    ``Ctx`` and the builders share their first type parameters, so the receiver's arguments
    are what the callback's first parameter receives (a loop body's scope gains the item,
    which no result type reads).  A callback generic in its whole argument
    (``copy.deepcopy``, ``def same(b: T) -> T``) is solved from the parameter type of the
    step's own signature instead."""
    if not callback.variables or not callback.arg_types:
        return callback
    param = get_proper_type(callback.arg_types[0])
    receiver = get_proper_type(ctx.type)
    if isinstance(param, TypeVarType):
        given: Type | None = passed(ctx, name)
    elif isinstance(param, Instance) and isinstance(receiver, Instance):
        count = len(param.type.type_vars)
        given = Instance(param.type, receiver.args[:count]) if STEPS_ARG < count <= len(receiver.args) else None
    else:
        given = None
    return callback if given is None else solved_for(callback, given)


def solved_for(callback: CallableType, given: Type) -> CallableType:
    """``callback`` with its type variables solved from ``given``, what its first
    parameter receives (unsolvable ones are left as they are)."""
    if not callback.variables or not callback.arg_types:
        return callback
    solved = infer_type_arguments(callback.variables, callback.arg_types[0], given, is_supertype=True)
    mapping = {var.id: t for var, t in zip(callback.variables, solved, strict=True) if t is not None}
    bound = get_proper_type(expand_type(callback, mapping)) if mapping else callback
    return bound if isinstance(bound, CallableType) else callback


def _expected(ctx: MethodContext, name: str) -> CallableType | None:
    """The callback type of argument ``name`` in the method's signature as mypy bound it to
    the receiver (stored with the call's callee when the call was checked)."""
    call = ctx.context
    if not (isinstance(call, CallExpr) and isinstance(ctx.api, TypeChecker)):
        return None
    try:
        method = get_proper_type(ctx.api.lookup_type(call.callee))
    except KeyError:
        return None
    if not (isinstance(method, CallableType) and name in method.arg_names):
        return None
    expected = _callbacks(method.arg_types[method.arg_names.index(name)])
    return expected[0] if expected else None


def passed(ctx: MethodContext, name: str) -> Type | None:
    """What the step passes to callback ``name``: the first parameter of its type."""
    expected = _expected(ctx, name)
    return expected.arg_types[0] if expected is not None and expected.arg_types else None


def expected_result(ctx: MethodContext, name: str) -> Type | None:
    """What the step expects callback ``name`` to return."""
    expected = _expected(ctx, name)
    return expected.ret_type if expected is not None else None


def as_called(callback: ProperType | None, given: Type | None = None) -> ProperType | None:
    """A callable object (a ``functools.partial``, an instance with ``__call__``) as the
    signature it is called with (a partial's as its function's, which may be generic), an
    overloaded function as its first variant that takes ``given`` (what the step passes
    it); anything else as it is."""
    if isinstance(callback, Instance):
        # mypy's functools plugin keeps a partial's function, generic ones too, under this
        # name; its ``partial[T]`` erases ``T`` to ``Any`` when the function is generic.
        kept = callback.extra_attrs.attrs.get("__mypy_partial") if callback.extra_attrs else None
        call = kept or find_member("__call__", callback, callback, is_operator=True)
        callback = get_proper_type(call) if call is not None else callback
    if isinstance(callback, Overloaded) and given is not None:
        for item in callback.items:
            if item.arg_types and is_subtype(given, solved_for(item, given).arg_types[0]):
                return item
    return callback


def each_called(callback: ProperType | None, given: Type | None = None) -> list[ProperType | None]:
    """:func:`as_called` of each function ``callback`` may be: a choice, ``one if F else two``,
    is typed as the union of the two."""
    items = callback.items if isinstance(callback, UnionType) else [callback]
    return [as_called(get_proper_type(item), given) for item in items]


def wrong_count(fn: CallableType) -> int | None:
    """How many parameters ``fn`` takes where it cannot be called with one positional argument,
    the step's: none, or its required ones (two or more); ``None`` when it can be (keyword-only
    parameters are left to mypy's own error)."""
    required = fn.arg_kinds.count(ARG_POS)
    if required > 1:
        return required
    if ARG_STAR in fn.arg_kinds or any(kind in (ARG_POS, ARG_OPT) for kind in fn.arg_kinds):
        return None
    return 0


def returned(ctx: MethodContext, name: str) -> Type | None:
    """What callback ``name`` returned, as mypy inferred it for the callback itself; of a
    choice of callbacks (``one if FLAG else two``, typed as their union), what either returns."""
    given = _callback(ctx, name)
    results: list[Type] = []
    for callback in each_called(given, passed(ctx, name)):
        if not isinstance(callback, CallableType):
            return given if isinstance(given, UnionType) else callback
        # As a solved type variable would be: 1, not Literal[1]?.
        results.append(remove_instance_last_known_values(_bound_to_receiver(ctx, name, callback).ret_type))
    return make_simplified_union(results)
