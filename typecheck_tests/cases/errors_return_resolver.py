"""A ``return_`` resolver that returns something neither ``ok(...)`` nor a ``Failure``: one
``arg-type`` error at the resolver that says what it returned and what to return instead
(mypy's own showed the callable type expected, with an ``Ok[object]`` nobody wrote, and
repeated it in the lambda as ``return-value``).  test_cases.py checks the messages."""

from __future__ import annotations

from typing import Any

from kumiko_typed import Ctx, Feature, Finished, fail, ok

from _models import Order

shop = Feature("shop")

plain = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines)).return_(lambda c: 1)  # E: arg-type
a_key = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines)).return_(lambda c: c.steps["count"])  # E: arg-type
on_one_side = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .return_(
        lambda c: ok(c.steps["count"]) if c.steps["count"] else None  # E: arg-type
    )
)


def counted(c: Ctx[Order, Any, Any]) -> int:
    return len(c.payload.lines)


by_def = shop.pipeline(Order).return_(counted)  # E: arg-type
# Expected to give a str: a resolver returning no Ok is told so alike; an Ok of another
# type is mypy's error about ok()'s argument, as before.
expected_str: Finished[Order, str] = shop.pipeline(Order).return_(lambda c: "done")  # E: arg-type
other_data: Finished[Order, str] = shop.pipeline(Order).return_(lambda c: ok(1))  # E: arg-type
# Refused in an arm, and told what to return once it is moved to the top level.
in_arm = shop.pipeline(Order).branch(
    when=lambda c: True,
    on_true=lambda b: b.return_(lambda c: 1),  # E: arg-type  # E: kumiko-return-in-subpipeline  # M: return_ is not allowed inside a sub-pipeline (SubPipeline: a branch arm, for_each or retry body); end the top-level pipeline with .return_(...) instead, reading what the arm or body set from c.steps; to stop early with a failure, use .guard(check, otherwise=lambda c: fail(...))
)
# Right ones: an Ok, a Failure, either.
fine = shop.pipeline(Order).return_(lambda c: ok(1) if c.payload.lines else fail("empty", "no lines"))
# Not a function at all.
a_value = shop.pipeline(Order).return_(ok(1))  # E: arg-type
