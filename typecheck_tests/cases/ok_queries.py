"""Query handlers: a QueryPipeline types its keys like a write pipeline, and app.query's
result is exactly the return_'s data type, as app.dispatch's is."""

from __future__ import annotations

from sqlalchemy import select

from kumiko_typed import App, Feature, User, fail, ok

from _models import Order, Product

shop = Feature("shop")

stock = shop.query_handler(
    "stock",
    shop.query_pipeline(Order)
    .get_one("product", lambda c: select(Product).where(Product.id == c.payload.id))
    .find_many("others", lambda c: select(Product).where(Product.stock > 0), limit=10)
    .guard(lambda c: c.steps["product"].stock >= 0, otherwise=lambda c: fail("unprocessable", "negative"))
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.branch(when=lambda c: c.scope["line"].qty > 1, on_true=lambda b: b.compute("many", lambda c: c.scope["line"].sku)),
    )
    .compute("keys", lambda c: reveal_type(c.steps))  # R: TypedDict({'product'=: _models.Product, 'others'=: list[_models.Product], 'many'=: str | None}) # PR: Keys[Key[Literal['product'], Product], Key[Literal['others'], list[Product]], Key[Literal['many'], str | None]]
    .return_(lambda c: ok((c.steps["product"].name, len(c.steps["others"])))),
    roles=["Admin"],
)
reveal_type(stock)  # R: kumiko_typed._feature.QueryHandler[_models.Order, tuple[str, int]] # PR: QueryHandler[Order, tuple[str, int]]


def run(app: App, order: Order, user: User) -> None:
    reveal_type(app.query(stock, order, user=user))  # R: kumiko_typed._results.Ok[tuple[str, int]] | kumiko_typed._results.Failure # PR: Ok[tuple[str, int]] | Failure
    reveal_type(app.query_json("shop:stock", {}, user=user))  # R: kumiko_typed._results.Ok[object] | kumiko_typed._results.Failure # PR: Ok[object] | Failure
