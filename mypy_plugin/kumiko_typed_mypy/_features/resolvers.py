"""Resolvers must be plain functions: the interpreter calls them synchronously inside
the transaction, so an ``async def`` (or a lambda returning a coroutine) would hand
the step an un-awaited coroutine instead of its value.  A function typed to return a
union with an awaitable in it (``Awaitable[int] | int``) may do so, and is refused too.
An async generator (a function returning an async iterator) is refused as boot refuses it:
nothing in a step can iterate it."""

from __future__ import annotations

from mypy.plugin import MethodContext
from mypy.types import CallableType, Instance, Type, UnionType, get_proper_type

from .. import _errors
from .._rules import rules
from .._typeops.callbacks import as_called, passed
from .._typeops.reported import fail

_AWAITABLE = "typing.Awaitable"
_ASYNC_ITERATOR = "typing.AsyncIterator"


def refuse_async(kind: str, ctx: MethodContext) -> Type:
    method = rules.RULES_BY_KIND[kind].method
    for name, types, exprs in zip(ctx.callee_arg_names, ctx.arg_types, ctx.args, strict=True):
        for given, expr in zip(types, exprs, strict=True):
            fn = as_called(get_proper_type(given), passed(ctx, name) if name else None)  # partial, __call__, overload
            if not isinstance(fn, CallableType):
                continue
            returned = get_proper_type(fn.ret_type)
            items = returned.items if isinstance(returned, UnionType) else [returned]  # may return one
            instances = [i for i in map(get_proper_type, items) if isinstance(i, Instance)]
            bases = {base.fullname for i in instances for base in i.type.mro}
            if _AWAITABLE in bases:
                fail(ctx, rules.msg_async_resolver(method, name or "?"), expr, code=_errors.ASYNC_RESOLVER)
            elif _ASYNC_ITERATOR in bases:
                fail(ctx, rules.msg_async_iterator_resolver(method, name or "?"), expr, code=_errors.ASYNC_RESOLVER)
    return ctx.default_return_type
