"""A branch arm or loop body written once as a generic function, typed with the public
generics, and used in several places: the keys before the step stay exact after it."""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from kumiko_typed import Feature, SubPipeline, fail, manual, ok

from _models import Order, SignedUp

S = TypeVar("S")
Sc = TypeVar("Sc")
C = TypeVar("C", bound=str)

shop = Feature("shop")


def has_lines(b: SubPipeline[Order, S, Sc, C]) -> SubPipeline[Order, S, Sc, C]:
    return b.guard(lambda c: bool(c.payload.lines), otherwise=lambda c: fail("unprocessable", "no lines"))


def known(b: SubPipeline[SignedUp, S, Sc, C]) -> SubPipeline[SignedUp, S, Sc, C]:
    return b.guard(lambda c: "@" in c.payload.email, otherwise=lambda c: fail("validation_error", "no @"))


shared = (
    shop.pipeline(Order)
    .compute("base", lambda c: 1)
    .branch(when=lambda c: True, on_true=has_lines, on_false=lambda b: b.compute("other", lambda c: "s"))
    .for_each("line", over=lambda c: c.payload.lines, do=has_lines)
    .compute("after", lambda c: (reveal_type(c.steps["base"]), reveal_type(c.steps["other"])))  # R: int # R: str | None # PR: int # PR: str | None
    .return_(lambda c: ok(c.steps["base"]))
)
reveal_type(shared)  # R: kumiko_typed._finished.Finished[_models.Order, int] # PR: Finished[Order, int]

retried = shop.workflow(
    "retried",
    trigger=manual(SignedUp),
    pipeline=shop.workflow_pipeline(SignedUp)
    .compute("base", lambda c: 1)
    .retry(times=2, do=known)
    .wait(timedelta(hours=1))
    .return_(lambda c: ok(reveal_type(c.steps["base"]))),  # R: int # PR: int
)
