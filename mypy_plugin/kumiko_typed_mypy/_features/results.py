"""``return_``: the pipeline's result type ``D``, the union of the ``Ok`` data types the
resolver returns (an ``ok(a) if ... else ok(b)`` is ``A | B``, where mypy's own solution
joins them, to ``object`` for two classes), and ``Never`` when it only fails.  An empty
collection (``lambda c: ok([])``) leaves it partly unknown, reported at the step
(empty_results)."""

from __future__ import annotations

from mypy.maptype import map_instance_to_supertype
from mypy.plugin import MethodContext
from mypy.typeops import make_simplified_union
from mypy.types import AnyType, ErasedType, Instance, Type, TypeOfAny, UnionType, get_proper_type

from .._names import OK, PROGRAM
from .._typeops.args import with_arg
from .._typeops.callbacks import returned
from .._typeops.empty_results import solved

#: ``D`` in an ended pipeline ``Finished[P, D]``.
_RESULT_ARG = 1


def typed_result(ctx: MethodContext) -> Type:
    ret = get_proper_type(ctx.default_return_type)
    if not (isinstance(ret, Instance) and ret.type.has_base(PROGRAM) and len(ret.args) > _RESULT_ARG):
        return ctx.default_return_type
    data = ret.args[_RESULT_ARG]
    if isinstance(get_proper_type(data), ErasedType):  # detached before the call (bodies.detach_data)
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
