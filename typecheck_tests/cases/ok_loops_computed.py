"""for_each over a computed collection: the item has the type mypy gives ``x`` in ``for x in <expr>``."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from kumiko_typed import Ctx, Feature, ok

from _models import Line, Pair

shop = Feature("shop")

computed = (
    shop.pipeline(Pair)
    .for_each("a", over=lambda c: [c.payload.first, c.payload.second], do=lambda b: b.compute("kept", lambda c: reveal_type(c.scope["a"])))  # R: _models.Line # PR: Line
    .for_each("b", over=lambda c: list(c.payload.first.sku), do=lambda b: b.compute("chars", lambda c: reveal_type(c.scope["b"])))  # R: str # PR: str
    .for_each("d", over=lambda c: set([c.payload.count]), do=lambda b: b.compute("counted", lambda c: reveal_type(c.scope["d"])))  # R: int # PR: int
    .for_each("e", over=lambda c: sorted([c.payload.first], key=lambda line: line.qty), do=lambda b: b.compute("qty", lambda c: c.scope["e"].qty))
    .for_each("f", over=lambda c: reversed([c.payload.second]), do=lambda b: b.compute("rev", lambda c: reveal_type(c.scope["f"])))  # R: _models.Line # PR: Line
    .for_each("g", over=lambda c: [line.sku for line in (c.payload.first,)], do=lambda b: b.compute("skus", lambda c: reveal_type(c.scope["g"])))  # R: str # PR: str
    .for_each("h", over=lambda c: {line.qty for line in [c.payload.first]}, do=lambda b: b.compute("qs", lambda c: reveal_type(c.scope["h"])))  # R: int # PR: int
    .for_each("i", over=lambda c: {line.sku: line for line in [c.payload.first]}, do=lambda b: b.compute("ks", lambda c: reveal_type(c.scope["i"])))  # R: str # PR: str
    .for_each("j", over=lambda c: (line.qty * 2 for line in [c.payload.first]), do=lambda b: b.compute("gen", lambda c: reveal_type(c.scope["j"])))  # R: int # PR: int
    .for_each("k", over=lambda c: (c.payload.first, c.payload.second), do=lambda b: b.compute("pairs", lambda c: reveal_type(c.scope["k"])))  # R: _models.Line # PR: Line
    .for_each("l", over=lambda c: (c.payload.count, c.payload.first), do=lambda b: b.compute("mixed", lambda c: reveal_type(c.scope["l"])))  # R: int | _models.Line # PR: int | Line
    .for_each("m", over=lambda c: {c.payload.first.sku: 1}, do=lambda b: b.compute("keys", lambda c: reveal_type(c.scope["m"])))  # R: str # PR: str
    .for_each("n", over=lambda c: range(c.payload.count), do=lambda b: b.compute("ns", lambda c: reveal_type(c.scope["n"])))  # R: int # PR: int
    .return_(lambda c: ok((reveal_type(c.steps["kept"]), reveal_type(c.steps["qty"]), reveal_type(c.steps["mixed"]))))  # R: _models.Line | None # R: int | None # R: int | _models.Line | None # PR: Line | None # PR: int | None # PR: int | Line | None
)

waiting = (
    shop.workflow_pipeline(Pair)
    .for_each(
        "line",
        over=lambda c: [c.payload.first, c.payload.second],
        do=lambda b: b.wait(timedelta(hours=1)).compute("sku", lambda c: reveal_type(c.scope["line"]).sku),  # R: _models.Line # PR: Line
    )
    .compute("after", lambda c: reveal_type(c.steps["sku"]))  # R: str | None # PR: str | None
)


# over= as a callable that is not a function: a partial, an object with __call__.
def both(first: bool, c: Ctx[Pair, Any, Any]) -> list[Line]:
    return [c.payload.first, c.payload.second] if first else [c.payload.second]


class Counts:
    def __call__(self, c: Ctx[Pair, Any, Any]) -> range:
        return range(c.payload.count)


called = (
    shop.pipeline(Pair)
    .for_each("line", over=partial(both, True), do=lambda b: b.compute("sku", lambda c: reveal_type(c.scope["line"]).sku))  # R: _models.Line # PR: Line
    .for_each("n", over=Counts(), do=lambda b: b.compute("n2", lambda c: reveal_type(c.scope["n"]) * 2))  # R: int # PR: int
)


P = TypeVar("P")


def alone(c: Ctx[P, Any, Any]) -> list[P]:
    return [c.payload]


# A generic over=: its type variables are solved from the context the step passes.
generic_over = shop.pipeline(Pair).for_each("pair", over=alone, do=lambda b: b.compute("count", lambda c: reveal_type(c.scope["pair"]).count))  # R: _models.Pair # PR: Pair


class Pages:
    """Iterable in Python by an old-style __getitem__ only: mypy and pyright take no such class
    for an Iterable (mypy refuses ``for x in Pages()`` too); iter() of it is typed by it."""

    def __getitem__(self, index: int) -> Line:
        if index > 1:
            raise IndexError(index)
        return Line("page", index)


old_style = shop.pipeline(Pair).for_each("page", over=lambda c: iter(Pages()), do=lambda b: b.compute("qty", lambda c: reveal_type(c.scope["page"]).qty))  # R: _models.Line # PR: Line
