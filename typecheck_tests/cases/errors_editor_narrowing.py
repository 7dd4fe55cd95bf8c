"""What pyright (Pylance) refuses where mypy with the plugin narrows: a ``guard``'s or a
``when=``'s test narrows a key in the plugin only, because pyright carries no test from one
lambda to another (docs/plugin.md, "In your editor").  ``# PE:`` lines are errors in pyright
alone; the workarounds after them are exact in both checkers."""

from __future__ import annotations

from sqlalchemy import select

from kumiko_typed import Feature, fail, ok

from _models import Order, Product

shop = Feature("shop")

guarded = (
    shop.pipeline(Order)
    .find_one("product", lambda c: select(Product).where(Product.id == c.payload.id))
    .guard(lambda c: c.steps["product"] is not None, otherwise=lambda c: fail("not_found", "no such product"))
    .compute("name", lambda c: c.steps["product"].name)  # PE: reportOptionalMemberAccess
    .branch(
        when=lambda c: c.steps["product"] is not None,
        on_true=lambda b: b.compute("stock", lambda c: c.steps["product"].stock),  # PE: reportOptionalMemberAccess
    )
    .return_(lambda c: ok(1))
)

# A missing row that should end the handler with not_found: get_one's key is never None.
read = (
    shop.pipeline(Order)
    .get_one("product", lambda c: select(Product).where(Product.id == c.payload.id))
    .compute("name", lambda c: reveal_type(c.steps["product"]).name)  # R: _models.Product # PR: Product
    .return_(lambda c: ok(c.steps["name"]))
)

# Another refusal, or a test in when=: test the key where it is read, bound by a walrus.
bound = (
    shop.pipeline(Order)
    .find_one("product", lambda c: select(Product).where(Product.id == c.payload.id))
    .guard(lambda c: c.steps["product"] is not None, otherwise=lambda c: fail("unprocessable", "not stocked"))
    .compute("stock", lambda c: (p.stock if (p := c.steps["product"]) is not None else 0))
    .compute("stock_read", lambda c: reveal_type(c.steps["stock"]))  # R: int # PR: int
    .return_(lambda c: ok(c.steps["stock"]))
)
