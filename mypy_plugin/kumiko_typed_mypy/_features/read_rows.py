"""A read step's query that selects several columns, ``select(Product.sku, Product.stock)``, or no
select at all (``lambda c: 1``).

A read step keeps one value per row (``Select[T]``), so mypy refuses such a query, but
as an ``arg-type`` error expecting ``Select[Never]`` plus a ``return-value`` error in the
lambda saying the same: two errors and no fix.  The ``arg-type`` error gets the rule and
the fix, and the lambda's repeat is taken back (one mistake, one error).
"""

from __future__ import annotations

import re
from typing import Final

from mypy import errorcodes
from mypy.errors import ErrorInfo
from mypy.messages import format_type_bare
from mypy.nodes import Expression
from mypy.plugin import MethodContext
from mypy.types import AnyType, CallableType, Instance, Type, TypeOfAny, UninhabitedType, get_proper_type

from .._names import ADD_STEP, STEPS_ARG
from .._rules import rules
from .._typeops.args import arg_expr, with_arg
from .._typeops.callbacks import as_called
from .._typeops.refused import reword

_SELECT = "sqlalchemy.sql.selectable.Select"


def hint(method: str, ctx: MethodContext) -> Type:
    expr = arg_expr(ctx, "query")
    given = ctx.arg_types[ctx.callee_arg_names.index("query")] if expr is not None else []
    fn = as_called(get_proper_type(given[0])) if given else None
    selected = get_proper_type(fn.ret_type) if isinstance(fn, CallableType) else None
    if expr is None or selected is None or isinstance(selected, (AnyType, UninhabitedType)):
        return ctx.default_return_type
    if not (isinstance(selected, Instance) and selected.type.has_base(_SELECT)):
        # No select at all (lambda c: 1): mypy solved the row type to Never, which the key's
        # list[Never] would report again as a missing annotation.
        returned = format_type_bare(selected, ctx.api.options)
        return _refused(ctx, expr, rules.msg_not_a_select(method, returned), replace=True)
    if len(selected.args) == 1:
        return ctx.default_return_type
    columns = ", ".join(format_type_bare(a, ctx.api.options) for a in selected.args)
    return _refused(ctx, expr, rules.msg_several_columns(method, len(selected.args), columns), replace=False)


def _refused(ctx: MethodContext, expr: Expression, why: str, *, replace: bool) -> Type:
    """mypy's ``arg-type`` error at ``query=`` with ``why`` (instead of it, or after it), and its
    repeat in the lambda taken back; the key reads as ``Any``.  Nothing changes where mypy
    reported nothing (a class of its own deriving from ``Select``)."""
    if not reword(ctx, expr, why, _repeat, replace=replace):
        return ctx.default_return_type
    return _unknown_key(ctx.default_return_type)


_REPEAT: Final = re.compile(r'^Incompatible return value type \(got ".*", expected "Select\[')


def _repeat(info: ErrorInfo) -> bool:
    """The lambda's own error for the query mypy refused."""
    return info.code == errorcodes.RETURN_VALUE and _REPEAT.match(info.message) is not None


def _unknown_key(builder: Type) -> Type:
    """The step's key as an error's ``Any``: mypy solved the row type to ``Never``, and a
    ``Never`` in the builder's type is one more error (``Need type annotation``) wherever
    the chain is assigned."""
    ret = get_proper_type(builder)
    marker = get_proper_type(ret.args[STEPS_ARG]) if isinstance(ret, Instance) and len(ret.args) > STEPS_ARG else None
    if not (isinstance(ret, Instance) and isinstance(marker, Instance) and marker.type.fullname == ADD_STEP):
        return builder
    return with_arg(ret, STEPS_ARG, marker.copy_modified(args=[marker.args[0], AnyType(TypeOfAny.from_error)]))
