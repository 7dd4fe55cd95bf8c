"""Resolvers refused for what they return or for how many parameters they take: one
``arg-type`` error at the resolver that says what to give instead (mypy's own showed the
callable type expected, with the whole context type, and said it again in the lambda as
``return-value``, or as ``Cannot infer type of lambda``).  test_cases.py checks the messages."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

from kumiko_typed import Ctx, Failure, Feature, fail, ok

from _models import EmailVerified, Order, SignedUp

shop = Feature("shop")
p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))

# What it returns: guard's otherwise= a Failure, the when= of guard and branch a bool.
ok_otherwise = p.guard(lambda c: True, otherwise=lambda c: ok(1))  # E: arg-type
none_otherwise = p.guard(lambda c: True, otherwise=lambda c: None)  # E: arg-type
int_when = p.guard(lambda c: c.steps["count"], otherwise=lambda c: fail("x", "y"))  # E: arg-type
optional_when = p.guard(lambda c: c.payload.lines or None, otherwise=lambda c: fail("x", "y"))  # E: arg-type
branch_when = p.branch(when=lambda c: c.steps["count"], on_true=lambda b: b.compute("x", lambda c: 1))  # E: arg-type
value_otherwise = p.guard(lambda c: True, otherwise=fail("x", "y"))  # E: arg-type
workflow_when = shop.workflow_pipeline(SignedUp).guard(lambda c: 1, otherwise=lambda c: fail("x", "y"))  # E: arg-type


def counted(c: Ctx[Order, Any, Any]) -> int:
    return len(c.payload.lines)


def scaled(by: int, c: Ctx[Order, Any, Any]) -> int:
    return by * len(c.payload.lines)


by_def = p.guard(lambda c: True, otherwise=counted)  # E: arg-type
by_partial = p.return_(partial(scaled, 2))  # E: arg-type


class MyFailure(Failure):
    pass


# Right ones: a Failure of a class of its own, a def returning a bool.
def refused(c: Ctx[Order, Any, Any]) -> MyFailure:
    return MyFailure("x", "y")


def has_lines(c: Ctx[Order, Any, Any]) -> bool:
    return bool(c.payload.lines)


fine = p.guard(has_lines, otherwise=refused).return_(lambda c: refused(c))


# How many parameters it takes: the step calls it with one.
def no_context() -> Any:
    return ok(1)


no_parameter = p.return_(lambda: ok(1))  # E: arg-type
two_parameters = p.return_(lambda c, d: ok(1))  # E: arg-type
by_def_of_none = p.return_(no_context)  # E: arg-type
guard_none = p.guard(lambda: True, otherwise=lambda c: fail("x", "y"))  # E: arg-type
compute_none = p.compute("z", lambda: 1)  # E: arg-type
arm_two = p.branch(when=lambda c: True, on_true=lambda b, x: b)  # E: arg-type
event_none = shop.workflow_pipeline(SignedUp).wait_for_event(
    "verified", EmailVerified, key=lambda c: c.payload.user_id, event_key=lambda: 1, timeout=timedelta(days=1)  # E: arg-type
)
# Moved to the top level, a return_ in an arm must still take c.
in_arm = p.branch(
    when=lambda c: True,
    on_true=lambda b: b.return_(lambda: ok(1)),  # E: arg-type  # E: kumiko-return-in-subpipeline  # M: return_ is not allowed inside a sub-pipeline (SubPipeline: a branch arm, for_each or retry body); end the top-level pipeline with .return_(...) instead, reading what the arm or body set from c.steps; to stop early with a failure, use .guard(check, otherwise=lambda c: fail(...))
)


# An async resolver: its own error is the one.
async def later(c: Ctx[Order, Any, Any]) -> Failure:
    return fail("x", "y")


async_otherwise = p.guard(lambda c: True, otherwise=later)  # E: kumiko-async-resolver  # M: otherwise= of step "guard" returns a coroutine: resolvers run synchronously inside the transaction and the coroutine would never run; pass a plain (non-async) function


# A parameter the step never passes, with a default (or keyword-only): mypy said only "Cannot
# infer type of lambda", and checked the body as untyped code (the misspelt key, unreported).
with_default = p.return_(lambda c, d=1: ok(c.steps["cont"]))  # E: kumiko-unanalyzable  # M: fn= of step "return_" is a lambda with a parameter with a default or a keyword-only one, which mypy does not check against the step: its body is checked as untyped code and its result is Any; give it one parameter, lambda c: ...
defaulted = p.return_(lambda c=None: ok(1))  # E: kumiko-unanalyzable  # M: fn= of step "return_" is a lambda with a parameter with a default or a keyword-only one, which mypy does not check against the step: its body is checked as untyped code and its result is Any; give it one parameter, lambda c: ...
# Its only parameter keyword-only: it has one, but none the step can pass (it said "no parameter").
keyword_only = p.compute("k", lambda *, c: 1)  # E: arg-type
# A required keyword-only parameter, which the step never passes: one arg-type error (mypy's
# own, said as what to give; it was two, with a kumiko-unanalyzable one saying "a default").
# pyright reports it too (reportArgumentType).
required_keyword = p.compute("r", lambda c, *, d: 1)  # E: arg-type
