"""``return_``: the pipeline's result type ``D``, the union of the ``Ok`` data types the
resolver returns (an ``ok(a) if ... else ok(b)`` is ``A | B``, where mypy's own solution
joins them, to ``object`` for two classes), and ``Never`` when it only fails.  Where the
call's result is expected to have a given ``D`` (a return type, an annotated variable),
mypy solves it from that, as before.  An empty collection (``lambda c: ok([])``) leaves it
partly unknown, reported at the step (empty_results)."""

from __future__ import annotations

from mypy.checker import TypeChecker
from mypy.checkexpr import has_any_type, has_erased_component, has_uninhabited_component
from mypy.maptype import map_instance_to_supertype
from mypy.plugin import MethodContext, MethodSigContext
from mypy.typeops import make_simplified_union
from mypy.types import (
    AnyType,
    CallableType,
    ErasedType,
    Instance,
    Type,
    TypeOfAny,
    UninhabitedType,
    UnionType,
    get_proper_type,
    has_type_vars,
)

from .._names import OK, PROGRAM
from .._typeops.args import receiver_steps, with_arg
from .._typeops.callbacks import detach, returned
from .._typeops.empty_results import solved
from .._typeops.reassigned import after_reported_name

#: ``D`` in an ended pipeline ``Finished[P, D]``.
_RESULT_ARG = 1


def detach_data(ctx: MethodSigContext) -> CallableType:
    """``fn: Callable[..., Ok[D] | Failure]`` with ``D`` erased (not ``object``: ``ok(x)`` in an
    ``Ok[object]`` context is an ``Ok[object]``), read back by ``typed_result``; kept where
    the call's context expects a ``D``, which types the resolver's ``ok(...)`` (a dict display
    as the ``TypedDict`` expected, a literal as the ``Literal``)."""
    if _expected(ctx):
        return ctx.default_signature
    return detach(ctx.api, ctx.default_signature, ("fn",), erase=True)


def _expected(ctx: MethodSigContext) -> bool:
    """Whether the type expected of the call names its ``D``: an ended pipeline of the step's
    class (in a union too, as ``write_handler``'s parameter is) whose ``D`` is a known type."""
    ret = get_proper_type(ctx.default_signature.ret_type)
    if not (isinstance(ctx.api, TypeChecker) and isinstance(ret, Instance)):
        return False
    context = get_proper_type(ctx.api.expr_checker.type_context[-1])
    items = context.items if isinstance(context, UnionType) else [context] if context is not None else []
    for item in map(get_proper_type, items):
        if isinstance(item, Instance) and item.type == ret.type and len(item.args) > _RESULT_ARG:
            data = item.args[_RESULT_ARG]
            unknown = has_type_vars(data) or has_any_type(data) or has_erased_component(data)
            return not (unknown or has_uninhabited_component(data))
    return False


def typed_result(ctx: MethodContext) -> Type:
    ret = get_proper_type(ctx.default_return_type)
    if not (isinstance(ret, Instance) and ret.type.has_base(PROGRAM) and len(ret.args) > _RESULT_ARG):
        return ctx.default_return_type
    data = ret.args[_RESULT_ARG]
    if isinstance(get_proper_type(receiver_steps(ctx)), UninhabitedType) and after_reported_name(ctx):
        # Keys unknown after a step name already reported: its result reads as Any, as they do.
        return with_arg(ret, _RESULT_ARG, AnyType(TypeOfAny.from_error))
    if isinstance(get_proper_type(data), ErasedType):  # detached before the call (detach_data)
        data = _data(returned(ctx, "fn"))
    data = solved(ctx, data, 'the result of "return_"', wrap="ok({})")
    return with_arg(ret, _RESULT_ARG, data)


def _data(given: Type | None) -> Type:
    """``D`` of what the resolver returned, ``Ok[D] | Failure`` or a union of ``Ok``s; ``Any`` for
    a resolver typed ``Any``.  Anything else (``lambda c: 1``) is mypy's error at the argument,
    which the ``Ok`` data beside it (if any) stays typed after."""
    proper = get_proper_type(given)
    items = proper.items if isinstance(proper, UnionType) else [proper] if proper is not None else []
    data: list[Type] = []
    for item in map(get_proper_type, items):
        if isinstance(item, AnyType):
            return AnyType(TypeOfAny.from_another_any, source_any=item)
        if isinstance(item, Instance) and (ok := next((i for i in item.type.mro if i.fullname == OK), None)):
            data.append(map_instance_to_supertype(item, ok).args[0])
    return make_simplified_union(data)
