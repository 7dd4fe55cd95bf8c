"""update: changes= is typed by the entity's writable columns; a version rule is required."""

from __future__ import annotations

from kumiko_typed import Feature, ok

from _models import Order, Product

shop = Feature("shop")

checked = (
    shop.pipeline(Order)
    .update("typo", Product, id=lambda c: c.payload.id, changes=lambda c: {"availabel": "no"}, version=1)  # E: misc
    .update("wrong", Product, id=lambda c: c.payload.id, changes=lambda c: {"stock": "many"}, version=1)  # E: typeddict-item
    .update("owned", Product, id=lambda c: c.payload.id, changes=lambda c: {"version": 3}, version=1)  # E: misc
    .update("fine", Product, id=lambda c: c.payload.id, changes=lambda c: {"stock": 1, "name": "x"}, version=lambda c: 2)
    .update("forced", Product, id=lambda c: c.payload.id, changes=lambda c: {}, skip_optimistic_lock=True)
    .update(
        "unlocked",  # E: kumiko-optimistic-lock  # M: update "unlocked" needs version= (the version the caller read, e.g. version=lambda c: c.payload.version) or skip_optimistic_lock=True to overwrite whatever version is stored
        Product,
        id=lambda c: c.payload.id,
        changes=lambda c: {"stock": 0},
    )
    .update("explicit_none", Product, id=lambda c: c.payload.id, changes=lambda c: {"stock": 0}, version=None)  # E: kumiko-optimistic-lock  # M: update "explicit_none" needs version= (the version the caller read, e.g. version=lambda c: c.payload.version) or skip_optimistic_lock=True to overwrite whatever version is stored
    .return_(lambda c: ok(c.steps["fine"].version))
)
