"""``return_``: the pipeline's result type ``D``, which an empty collection
(``lambda c: ok([])``) leaves partly unknown, is reported at the step (empty_results)."""

from __future__ import annotations

from mypy.plugin import MethodContext
from mypy.types import Instance, Type, get_proper_type

from .._names import PROGRAM
from .._typeops.args import with_arg
from .._typeops.empty_results import solved

#: ``D`` in an ended pipeline ``Finished[P, D]``.
_RESULT_ARG = 1


def typed_result(ctx: MethodContext) -> Type:
    ret = get_proper_type(ctx.default_return_type)
    if not (isinstance(ret, Instance) and ret.type.has_base(PROGRAM) and len(ret.args) > _RESULT_ARG):
        return ctx.default_return_type
    data = solved(ctx, ret.args[_RESULT_ARG], 'the result of "return_"', wrap="ok({})")
    return with_arg(ret, _RESULT_ARG, data)
