"""Arguments unpacked from a mapping or a tuple, as a helper forwarding them writes them:
each step reads the item that reaches its parameter, not the container."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kumiko_typed import Ctx, Feature, ok

from _models import Order

shop = Feature("shop")
resolvers: dict[str, Callable[[Ctx[Order, Any, Any]], int]] = {"fn": lambda c: len(c.payload.lines)}
named: tuple[str, Callable[[Ctx[Order, Any, Any]], str]] = ("note", lambda c: c.payload.note)

unpacked = (
    shop.pipeline(Order)
    .compute("count", **resolvers)
    .compute("twice", lambda c: reveal_type(c.steps["count"]) * 2)  # R: int # PR: int
    .compute("again", *named[1:])
    .return_(lambda c: ok(c.steps["again"]))
)
reveal_type(unpacked)  # R: kumiko_typed._finished.Finished[_models.Order, str] # PR: Finished[Order, str]
