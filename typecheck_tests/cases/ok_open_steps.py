"""A branch arm or loop body typed Any: the keys known before it stay exact; only its own are Any."""

from __future__ import annotations

from typing import Any

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")


def one(c: Any) -> int:
    return 1


def untyped_arm(b: Any) -> Any:
    return b.compute("x", one)  # a lambda here would be Unknown-typed for pyright strict


kept = (
    shop.pipeline(Order)
    .compute("base", lambda c: 1)
    .branch(when=lambda c: True, on_true=untyped_arm, on_false=lambda b: b.compute("y", lambda c: "s"))
    .compute("after", lambda c: (reveal_type(c.steps["base"]), reveal_type(c.steps["x"]), reveal_type(c.steps["y"])))  # R: int # R: Any # R: str | None # PR: Any # PR: int
    .for_each("line", over=lambda c: c.payload.lines, do=untyped_arm)
    .compute("later", lambda c: reveal_type(c.steps["after"]))  # R: tuple[int, Any, str | None] # PR: Any
    .return_(lambda c: ok(reveal_type(c.steps["base"])))  # R: int # PR: Any
)
