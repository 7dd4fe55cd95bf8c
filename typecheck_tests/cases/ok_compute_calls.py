"""compute's key is what its function returns, also when that is a generic call whose
type variable only the arguments pin: a SQLAlchemy ``scalar`` or ``get`` through ``c.db``
(before: ``object`` with the plugin, where plain mypy said ``int | None``)."""

from __future__ import annotations

from sqlalchemy import func, select

from kumiko_typed import Feature, ok

from _models import Order, Product

shop = Feature("shop")

counted = shop.write_handler(
    "counted",
    shop.pipeline(Order)
    .compute("count", lambda c: c.db.scalar(select(func.count()).select_from(Product)))
    .compute("product", lambda c: c.db.get(Product, c.payload.id))
    .compute("first", lambda c: next(iter(c.payload.lines), None))
    .compute("keys", lambda c: reveal_type(c.steps))  # R: TypedDict({'count'=: int | None, 'product'=: _models.Product | None, 'first'=: _models.Line | None}) # PR: Keys[Key[Literal['count'], int | None], Key[Literal['product'], Product | None], Key[Literal['first'], Line | None]]
    .return_(lambda c: ok((c.steps["count"] or 0, c.steps["product"]))),
)
reveal_type(counted)  # R: kumiko_typed._feature.WriteHandler[_models.Order, tuple[int, _models.Product | None]] # PR: WriteHandler[Order, tuple[int, Product | None]]
