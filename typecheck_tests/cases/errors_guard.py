"""guard's condition must be a bool and otherwise= must give a Failure."""

from __future__ import annotations

from kumiko_typed import Feature, fail, ok

from _models import Order

shop = Feature("shop")

not_a_failure = shop.pipeline(Order).guard(lambda c: True, otherwise=lambda c: ok(1))  # E: arg-type
not_a_bool = shop.pipeline(Order).guard(lambda c: len(c.payload.lines), otherwise=lambda c: fail("x", "y"))  # E: arg-type
unknown_key = shop.pipeline(Order).guard(lambda c: c.steps["nope"] > 0, otherwise=lambda c: fail("x", "y"))  # E: misc
no_otherwise = shop.pipeline(Order).guard(lambda c: True)  # E: call-arg


async def _later(c: object) -> bool:
    return True


async_when = shop.pipeline(Order).guard(_later, otherwise=lambda c: fail("x", "y"))  # E: kumiko-async-resolver  # M: when= of step "guard" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function
