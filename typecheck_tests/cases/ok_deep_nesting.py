"""A pipeline nested four deep (loop > loop > branch > branch): exact keys where pyright can
name them, and an editor that answers in seconds when it cannot (docs/plugin.md, "Nested
pipelines").  Step names by literal, by ``StrEnum`` member, and a loop item by an imported
``Final[str]`` name."""

from __future__ import annotations

import enum

from sqlalchemy import select

from kumiko_typed import Feature, ok

from _deep_names import CH
from _models import Order, Product

shop = Feature("shop")

literal = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.for_each(
            "ch",
            over=lambda c: c.scope["line"].sku,
            do=lambda b: b.compute("upper", lambda c: c.scope["ch"].upper()).branch(
                when=lambda c: c.steps["upper"] == reveal_type(c.scope["ch"]),  # R: str # PR: str
                on_true=lambda b: b.branch(
                    when=lambda c: c.scope["line"].qty > c.steps["count"],
                    on_true=lambda b: b.create(
                        "made", Product, data=lambda c: Product(name=reveal_type(c.scope["line"]).sku)  # R: _models.Line # PR: Line
                    ),
                    on_false=lambda b: b.update(
                        "made", Product, id=lambda c: c.payload.id, changes=lambda c: {"stock": c.steps["count"]},
                        skip_optimistic_lock=True,
                    ),
                ),
            ),
        ),
    )
    .return_(lambda c: ok(reveal_type(c.steps["made"])))  # R: kumiko_typed._saved.Saved[_models.Product] | None # PR: Saved[Product] | None
)


class Name(enum.StrEnum):
    COUNT = "count"
    PRODUCT = "product"
    UPPER = "upper"
    MADE = "made"
    SKIPPED = "skipped"
    CH = "ch"


# Step names pyright cannot read open each sub-pipeline's list: its keys read as Any, and the
# branches and loops inside take that list at their first overload.
by_member = (
    shop.pipeline(Order)
    .compute(Name.COUNT, lambda c: len(c.payload.lines))
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.find_one(Name.PRODUCT, lambda c: select(Product).where(Product.name == c.scope["line"].sku))
        .for_each(
            Name.CH,
            over=lambda c: c.scope["line"].sku,
            do=lambda b: b.compute(Name.UPPER, lambda c: c.scope[Name.CH].upper())
            .branch(
                when=lambda c: c.steps[Name.UPPER] == c.scope[Name.CH],
                on_true=lambda b: b.branch(
                    when=lambda c: c.steps[Name.PRODUCT] is None,
                    on_true=lambda b: b.create(
                        Name.MADE, Product, data=lambda c: Product(name=reveal_type(c.scope["line"]).sku)  # R: _models.Line # PR: Line
                    ),
                    on_false=lambda b: b.update(
                        Name.MADE, Product, id=lambda c: c.payload.id, changes=lambda c: {"stock": c.steps[Name.COUNT]},
                        skip_optimistic_lock=True,
                    ),
                ),
                on_false=lambda b: b.compute(Name.SKIPPED, lambda c: reveal_type(c.steps[Name.UPPER])),  # R: str # PR: Any
            ),
        ),
    )
    .return_(lambda c: ok((reveal_type(c.steps[Name.MADE]), c.steps[Name.SKIPPED])))  # R: kumiko_typed._saved.Saved[_models.Product] | None # PR: Any
)

# The same with the inner item named by a str constant of another module.
by_constant = (
    shop.pipeline(Order)
    .compute(Name.COUNT, lambda c: len(c.payload.lines))
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.find_one(Name.PRODUCT, lambda c: select(Product).where(Product.name == c.scope["line"].sku))
        .for_each(
            CH,
            over=lambda c: c.scope["line"].sku,
            do=lambda b: b.compute(Name.UPPER, lambda c: reveal_type(c.scope["line"]).sku.upper())  # R: _models.Line # PR: Line
            .branch(
                when=lambda c: c.steps[Name.UPPER] != "",
                on_true=lambda b: b.branch(
                    when=lambda c: c.steps[Name.PRODUCT] is None,
                    on_true=lambda b: b.create(Name.MADE, Product, data=lambda c: Product(name=c.scope["line"].sku)),
                    on_false=lambda b: b.update(
                        Name.MADE, Product, id=lambda c: c.payload.id, changes=lambda c: {"stock": c.steps[Name.COUNT]},
                        skip_optimistic_lock=True,
                    ),
                ),
            ),
        ),
    )
    .return_(lambda c: ok(reveal_type(c.steps[Name.MADE])))  # R: kumiko_typed._saved.Saved[_models.Product] | None # PR: Any
)
