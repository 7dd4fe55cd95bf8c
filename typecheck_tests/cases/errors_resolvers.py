"""Resolvers run synchronously: async ones are refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Generator
from functools import partial
from typing import Any, overload

from kumiko_typed import Ctx, Feature, ok

from _models import EmailVerified, Order, Product

shop = Feature("shop")


async def fetch_total(c: Ctx[Order, object, object]) -> int:
    return len(c.payload.lines)


refused = (
    shop.pipeline(Order)
    .compute("total", fetch_total)  # E: kumiko-async-resolver  # M: fn= of step "compute" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function
    .compute("again", lambda c: fetch_total(c))  # E: kumiko-async-resolver  # M: fn= of step "compute" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; call no async function in it: await it before dispatching and pass its result in the payload, or make the function it calls synchronous
    .branch(when=lambda c: True, on_true=lambda b: b.compute("inner", fetch_total))  # E: kumiko-async-resolver  # M: fn= of step "compute" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function
    .return_(lambda c: ok(1))
)


async def verified(c: Ctx[Order, object, object]) -> EmailVerified:
    return EmailVerified(c.payload.id)


async_event = (
    shop.pipeline(Order)
    .create("p", Product, data=lambda c: Product(id=c.payload.id, name="x", stock=1), event=verified)  # E: kumiko-async-resolver  # M: event= of step "create" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function
    .return_(lambda c: ok(1))
)


async def scaled_total(factor: int, c: Ctx[Order, object, object]) -> int:
    return factor * len(c.payload.lines)


class AsyncPricer:
    async def __call__(self, c: Ctx[Order, object, object]) -> float:
        return 1.5


wrapped = (
    shop.pipeline(Order)
    .compute("scaled", partial(scaled_total, 2))  # E: kumiko-async-resolver  # M: fn= of step "compute" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function
    .compute("priced", AsyncPricer())  # E: kumiko-async-resolver  # M: fn= of step "compute" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function
    .return_(lambda c: ok(1))
)


@overload
def looked_up(c: int) -> int: ...
@overload
def looked_up(c: Ctx[Order, Any, Any]) -> Awaitable[int]: ...
def looked_up(c: object) -> object:
    return c


overloaded = (
    shop.pipeline(Order)
    .compute("looked_up", looked_up)  # E: kumiko-async-resolver  # M: fn= of step "compute" returns an awaitable ("Awaitable[int]"): resolvers run synchronously inside the transaction and nothing would await it; return the value itself: await it before dispatching and pass its result in the payload, or compute it synchronously
    .return_(lambda c: ok(1))
)


# Typed to return a union with an awaitable in it: it may hand the step a coroutine.
def cached_or_fetched(c: Ctx[Order, Any, Any]) -> Awaitable[int] | int:
    return len(c.payload.lines)


maybe_async = (
    shop.pipeline(Order)
    .compute("count", cached_or_fetched)  # E: kumiko-async-resolver  # M: fn= of step "compute" may return an awaitable ("Awaitable[int] | int"): resolvers run synchronously inside the transaction and nothing would await it; return the value itself: await it before dispatching and pass its result in the payload, or compute it synchronously
    .compute("later", lambda c: fetch_total(c) if c.payload.note else None)  # E: kumiko-async-resolver  # M: fn= of step "compute" may return a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; call no async function in it: await it before dispatching and pass its result in the payload, or make the function it calls synchronous
    .return_(lambda c: ok(1))
)


# An async generator function is no coroutine function, but nothing in a step could iterate
# what it returns either (boot refuses it as well).
async def streamed(c: Ctx[Order, Any, Any]) -> AsyncIterator[int]:
    yield len(c.payload.lines)


async_generator = (
    shop.pipeline(Order)
    .compute("streamed", streamed)  # E: kumiko-async-resolver  # M: fn= of step "compute" returns an async iterator (an async generator): resolvers run synchronously inside the transaction and nothing could iterate it; pass a plain function returning a list
    .return_(lambda c: ok(1))
)


# Other awaitables: a future, and an object whose class has __await__ without naming
# Awaitable (a protocol); the runtime refuses them as it refuses a coroutine.
class Later:
    def __await__(self) -> Generator[Any, None, int]:
        yield
        return 1


def pending(c: Ctx[Order, Any, Any]) -> asyncio.Future[int]:
    return asyncio.get_running_loop().create_future()


other_awaitables = (
    shop.pipeline(Order)
    .compute("future", pending)  # E: kumiko-async-resolver  # M: fn= of step "compute" returns an awaitable ("Future[int]"): resolvers run synchronously inside the transaction and nothing would await it; return the value itself: await it before dispatching and pass its result in the payload, or compute it synchronously
    .compute("later", lambda c: Later())  # E: kumiko-async-resolver  # M: fn= of step "compute" returns an awaitable ("Later"): resolvers run synchronously inside the transaction and nothing would await it; return the value itself: await it before dispatching and pass its result in the payload, or compute it synchronously
    .return_(lambda c: ok(1))
)
