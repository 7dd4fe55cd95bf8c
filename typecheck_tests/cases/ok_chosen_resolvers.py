"""A resolver, an ``over=`` or an arm chosen by a conditional expression (``one if FLAG else
two``): mypy types the choice as the union of the two functions (or, of two lambdas, their
join), so the key was that union of callables, the loop's item ``Any`` and a key the two arms
type differently ``object``; each is now what either function returns, as pyright reads it
(pyright reads the keys of arms so chosen as ``Any``)."""

from __future__ import annotations

from typing import Any, reveal_type

from kumiko_typed import Ctx, Failure, Feature, Ok, fail, ok

from _models import Line, Order

shop = Feature("shop")
DETAILED = True


def count(c: Ctx[Order, Any, Any]) -> int:
    return len(c.payload.lines)


def label(c: Ctx[Order, Any, Any]) -> str:
    return c.payload.note


def ended(c: Ctx[Order, Any, Any]) -> Ok[int]:
    return ok(len(c.payload.lines))


def noted(c: Ctx[Order, Any, Any]) -> Ok[str] | Failure:
    return ok(c.payload.note) if c.payload.note else fail("unprocessable", "no note")


def lines(c: Ctx[Order, Any, Any]) -> list[Line]:
    return c.payload.lines


def skus(c: Ctx[Order, Any, Any]) -> list[str]:
    return [line.sku for line in c.payload.lines]


chosen = (
    shop.pipeline(Order)
    .compute("shown", count if DETAILED else label)
    .for_each("item", over=lines if DETAILED else skus, do=lambda b: b.compute("seen", lambda c: reveal_type(c.scope["item"])))  # R: _models.Line | str # PR: Line | str
    .branch(
        when=lambda c: True,
        on_true=(lambda b: b.compute("x", lambda c: 1)) if DETAILED else (lambda b: b.compute("x", lambda c: "one")),
    )
    .compute("read", lambda c: (reveal_type(c.steps["shown"]), reveal_type(c.steps["x"])))  # R: int | str # R: int | str | None # PR: int | str # PR: Any
    .return_(ended if DETAILED else noted)
)
reveal_type(chosen)  # R: kumiko_typed._finished.Finished[_models.Order, int | str] # PR: Finished[Order, str | int]
