"""Resolvers must be plain functions: the interpreter calls them synchronously inside
the transaction, so an ``async def`` (or a lambda returning a coroutine) would hand
the step an un-awaited coroutine instead of its value.  A function typed to return a
union with an awaitable in it (``Awaitable[int] | int``) may do so, and is refused too."""

from __future__ import annotations

from mypy.plugin import MethodContext
from mypy.types import CallableType, Instance, Type, UnionType, get_proper_type

from .. import _errors
from .._rules import rules
from .._typeops.callbacks import as_called, passed
from .._typeops.reported import fail

_AWAITABLE = "typing.Awaitable"


def refuse_async(kind: str, ctx: MethodContext) -> Type:
    method = rules.RULES_BY_KIND[kind].method
    for name, types, exprs in zip(ctx.callee_arg_names, ctx.arg_types, ctx.args, strict=True):
        for given, expr in zip(types, exprs, strict=True):
            fn = as_called(get_proper_type(given), passed(ctx, name) if name else None)  # partial, __call__, overload
            if not isinstance(fn, CallableType):
                continue
            returned = get_proper_type(fn.ret_type)
            items = returned.items if isinstance(returned, UnionType) else [returned]  # may return one
            if any(isinstance(i, Instance) and i.type.has_base(_AWAITABLE) for i in map(get_proper_type, items)):
                fail(ctx, rules.msg_async_resolver(method, name or "?"), expr, code=_errors.ASYNC_RESOLVER)
    return ctx.default_return_type
