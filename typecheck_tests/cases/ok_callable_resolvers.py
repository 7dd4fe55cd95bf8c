"""Resolvers that are not lambdas or functions: a ``functools.partial``, an object with
``__call__`` and a bound method give the key the type they return when called."""

from __future__ import annotations

from functools import partial
from typing import Any

from kumiko_typed import Ctx, Feature, ok

from _models import Order

shop = Feature("shop")


def scaled(factor: int, c: Ctx[Order, Any, Any]) -> int:
    return factor * len(c.payload.lines)


class Pricer:
    def __call__(self, c: Ctx[Order, Any, Any]) -> float:
        return 1.5 * len(c.payload.lines)

    def label(self, c: Ctx[Order, Any, Any]) -> str:
        return c.payload.note


pricer = Pricer()

priced = (
    shop.pipeline(Order)
    .compute("doubled", partial(scaled, 2))
    .compute("price", pricer)
    .compute("label", pricer.label)
    .compute("read", lambda c: (reveal_type(c.steps["doubled"]), reveal_type(c.steps["price"]), reveal_type(c.steps["label"])))  # R: int # R: float # R: str # PR: int # PR: float # PR: str
    .return_(lambda c: ok(c.steps["doubled"] + c.steps["price"]))
)
reveal_type(priced)  # R: kumiko_typed._finished.Finished[_models.Order, float] # PR: Finished[Order, float]
