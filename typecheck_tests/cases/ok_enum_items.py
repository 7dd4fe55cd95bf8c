"""Loop items named by ``StrEnum`` members, at the top level and inside branch arms whose keys
pyright reads exactly (docs/plugin.md, "Nested pipelines").  pyright reads such an item by its
member exactly and by its value as ``Any``; two items named by members of one enum both as
``Any``.  Before, the member failed every overload for a literal item name, each evaluating the
body with the name unsolved, and a file like this one took pyright minutes."""

from __future__ import annotations

import enum

from sqlalchemy import select

from kumiko_typed import Feature, ok

from _models import Order, Product

shop = Feature("shop")


class Item(enum.StrEnum):
    LINE = "line"
    CH = "ch"


# The pipeline of ok_deep_nesting.py with its top-level loop's item named by a member.
top = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .for_each(
        Item.LINE,
        over=lambda c: c.payload.lines,
        do=lambda b: b.find_one("product", lambda c: select(Product).where(Product.name == c.scope[Item.LINE].sku))
        .for_each(
            "ch",
            over=lambda c: reveal_type(c.scope[Item.LINE]).sku,  # R: _models.Line # PR: Line
            do=lambda b: b.compute("upper", lambda c: c.scope["ch"].upper()).branch(
                when=lambda c: c.steps["upper"] == reveal_type(c.scope["ch"]),  # R: str # PR: str
                on_true=lambda b: b.branch(
                    when=lambda c: c.steps["product"] is None,
                    on_true=lambda b: b.create(
                        "made", Product, data=lambda c: Product(name=reveal_type(c.scope[Item.LINE]).sku)  # R: _models.Line # PR: Line
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

# Two and three branch arms deep, each arm's keys exact.
two_deep = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .branch(
        when=lambda c: c.steps["count"] > 0,
        on_true=lambda b: b.branch(
            when=lambda c: c.steps["count"] > 1,
            on_true=lambda b: b.compute("first", lambda c: c.payload.lines[0]).for_each(
                Item.LINE,
                over=lambda c: c.payload.lines,
                do=lambda b: b.compute("sku", lambda c: reveal_type(c.scope[Item.LINE]).sku).branch(  # R: _models.Line # PR: Line
                    when=lambda c: c.steps["sku"] == c.steps["first"].sku and c.steps["count"] > 1,
                    on_true=lambda b: b.compute("qty", lambda c: reveal_type(c.scope["line"]).qty),  # R: _models.Line # PR: Any
                ),
            ),
        ),
    )
    .return_(lambda c: ok(reveal_type(c.steps["count"])))  # R: int # PR: int
)

three_deep = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .branch(
        when=lambda c: c.steps["count"] > 0,
        on_true=lambda b: b.branch(
            when=lambda c: c.steps["count"] > 1,
            on_true=lambda b: b.branch(
                when=lambda c: c.steps["count"] > 2,
                on_true=lambda b: b.compute("first", lambda c: c.payload.lines[0]).for_each(
                    Item.LINE,
                    over=lambda c: c.payload.lines,
                    do=lambda b: b.compute("sku", lambda c: reveal_type(c.scope[Item.LINE]).sku).branch(  # R: _models.Line # PR: Line
                        when=lambda c: c.steps["sku"] == c.steps["first"].sku,
                        on_true=lambda b: b.compute("qty", lambda c: c.scope[Item.LINE].qty + c.steps["count"]),
                    ),
                ),
            ),
        ),
    )
    .return_(lambda c: ok(reveal_type(c.steps["count"])))  # R: int # PR: int
)

# Two items named by members of one enum: pyright cannot tell them apart, so both read as Any.
same_enum = (
    shop.pipeline(Order)
    .for_each(
        Item.LINE,
        over=lambda c: c.payload.lines,
        do=lambda b: b.for_each(
            Item.CH,
            over=lambda c: c.scope[Item.LINE].sku,
            do=lambda b: b.compute("pair", lambda c: (reveal_type(c.scope[Item.LINE]), reveal_type(c.scope[Item.CH]))),  # R: _models.Line # R: str # PR: Any
        ),
    )
    .return_(lambda c: ok(1))
)

# Two loops one after the other, named by members of one enum: with the plugin each item is
# exact, by its value or by its member, and so are the keys their bodies add (T | None);
# pyright reads an item by its member exactly, by its value as Any (and a key computed from it).
sequential = (
    shop.pipeline(Order)
    .for_each(Item.LINE, over=lambda c: c.payload.lines, do=lambda b: b.compute("qty", lambda c: reveal_type(c.scope["line"]).qty))  # R: _models.Line # PR: Any
    .for_each(Item.CH, over=lambda c: "abc", do=lambda b: b.compute("upper", lambda c: reveal_type(c.scope[Item.CH]).upper()))  # R: str # PR: str
    .return_(lambda c: ok((reveal_type(c.steps["qty"]), c.steps["upper"])))  # R: int | None # PR: Any | None
)
