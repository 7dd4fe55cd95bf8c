"""Async resolvers and lambdas with ``yield`` where the step fixes what the resolver returns
(a mail's ``str``, an event's ``UUID``, a read's select, a loop's items, an arm's builder): one
error each under mypy, under its ``kumiko-*`` code, saying what to give instead; mypy alone
said the coroutine's ``arg-type`` too (showing the whole callable type expected), and of a
``yield`` lambda only that a generator function must be typed ``Generator``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from kumiko_typed import Ctx, Feature, SubPipeline, ok

from _models import Order, Product, SignedUp

shop = Feature("shop", requires=["mail.send"])


async def address(c: Ctx[Order, Any, Any]) -> str:
    return c.payload.note


async def product_id(c: Ctx[Order, Any, Any]) -> uuid.UUID:
    return c.payload.id


async def quantities(c: Ctx[Order, Any, Any]) -> list[int]:
    return [line.qty for line in c.payload.lines]


async_fixed = (
    shop.pipeline(Order)
    .append_event(Product, id=product_id, event=lambda c: c.payload)  # E: kumiko-async-resolver # M: id= of step "append_event" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function # PE: reportArgumentType
    .send_mail(to=address, subject=lambda c: address(c), body="b")  # E: kumiko-async-resolver # M: to= of step "send_mail" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function # M: subject= of step "send_mail" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; call no async function in it: await it before dispatching and pass its result in the payload, or make the function it calls synchronous # PE: reportArgumentType
    .return_(lambda c: ok(1))
)
async_items = shop.pipeline(Order).for_each("qty", over=quantities, do=lambda b: b)  # E: kumiko-async-resolver # M: over= of step "for_each" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function # PE: reportArgumentType # PE: reportCallIssue

generator_fixed = (
    shop.pipeline(Order)
    .send_mail(to=lambda c: (yield c.payload.note), subject="s", body="b")  # E: kumiko-unanalyzable # M: to= of step "send_mail" is a lambda with yield, so the step would get a generator object, not its result; it must return "str | Sequence[str]", the value itself: to=lambda c: ...
    .append_event(Product, id=lambda c: (yield c.payload.id), event=lambda c: c.payload)  # E: kumiko-unanalyzable # M: id= of step "append_event" is a lambda with yield, so the step would get a generator object, not its result; it must return "UUID", the value itself: id=lambda c: ...
    .find_many("rows", lambda c: (yield c.payload))  # E: kumiko-unanalyzable # M: query= of step "find_many" is a lambda with yield, so the step would get a generator object, not its result; it must return "Select[Any]", the value itself: query=lambda c: ...
    .branch(when=lambda c: True, on_true=lambda b: (yield b))  # E: kumiko-unanalyzable # M: on_true= of step "branch" is a lambda with yield, so the step would get a generator object, not its result; it must return the sub-pipeline b it is given, with its steps added: on_true=lambda b: b.compute(...)
    .return_(lambda c: ok(1))
)

generator_workflow = (
    shop.workflow_pipeline(SignedUp)
    .wait(lambda c: (yield datetime.now()))  # E: kumiko-unanalyzable # M: duration= of step "wait" is a lambda with yield, so the step would get a generator object, not its result; it must return "datetime", the value itself: duration=lambda c: ...
    .retry(times=2, do=lambda b: (yield b))  # E: kumiko-unanalyzable # M: do= of step "retry" is a lambda with yield, so the step would get a generator object, not its result; it must return the sub-pipeline b it is given, with its steps added: do=lambda b: b.compute(...)
    .return_(lambda c: ok(1))
)


# A choice of functions (typed as their union) is checked function by function: it was said
# to be no function at all, and an async one in it passed.
def plain(c: Ctx[Order, Any, Any]) -> int:
    return len(c.payload.lines)


async def fetched(c: Ctx[Order, Any, Any]) -> int:
    return len(c.payload.lines)


def described(c: Ctx[Order, Any, Any]) -> str:
    return c.payload.note


DETAILED = True
chosen_async = shop.pipeline(Order).compute("n", plain if DETAILED else fetched)  # E: kumiko-async-resolver # M: fn= of step "compute" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function
chosen_result = shop.pipeline(Order).return_(plain if DETAILED else described)  # E: arg-type # PE: reportArgumentType


# An arm or a body that returns no sub-pipeline (None, the outer pipeline, a value): one
# arg-type error saying what to return (mypy said it twice, showing the callable type expected).
def forgot_return(b: SubPipeline[Order, Any, Any, Any]) -> None:
    b.compute("x", lambda c: 1)


outer = shop.pipeline(Order).compute("n", lambda c: 1)
returned_outer = outer.branch(when=lambda c: True, on_true=lambda b: outer)  # E: arg-type # PE: reportArgumentType # PE: reportCallIssue
returned_none = outer.branch(when=lambda c: True, on_true=forgot_return)  # E: arg-type # PE: reportArgumentType # PE: reportCallIssue
body = outer.for_each("line", over=lambda c: c.payload.lines, do=lambda b: None)  # E: arg-type # PE: reportArgumentType # PE: reportCallIssue


# Any other resolver whose result type the step fixes: one arg-type error naming what it
# returned and what to return (mypy showed the callable type expected, then said it again).
def counted(c: Ctx[Order, Any, Any]) -> int:
    return len(c.payload.lines)


html_count = shop.pipeline(Order).send_mail(to="a@example.com", subject="s", body="b", html=lambda c: len(c.payload.lines))  # E: arg-type # PE: reportArgumentType
subject_count = shop.pipeline(Order).send_mail(to="a@example.com", subject=counted, body="b")  # E: arg-type # PE: reportArgumentType
event_id = shop.pipeline(Order).append_event(Product, id=lambda c: c.payload.note, event=lambda c: c.payload)  # E: arg-type # PE: reportArgumentType
counted_items = shop.pipeline(Order).for_each("n", over=lambda c: len(c.payload.lines), do=lambda b: b)  # E: arg-type # PE: reportArgumentType # PE: reportCallIssue
