"""A ``LIKE`` in a read step finds the same rows on both databases: case-sensitive, as
PostgreSQL's is.  SQLite's own LIKE folds ASCII case, so ``like("ab%")`` also found
``"AB-1"`` there; ``ilike`` folds case on both."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok


class LkItem(Entity):
    __tablename__ = "lk_item"
    sku: Mapped[str] = mapped_column(sa.String(20))


@attrs.frozen
class Add:
    sku: str


@attrs.frozen
class Find:
    pattern: str
    folded: bool = False


shop = Feature("lk")
shop.entity(LkItem)
add = shop.write_handler(
    "add",
    shop.pipeline(Add).create("item", LkItem, data=lambda c: LkItem(sku=c.payload.sku)).return_(lambda c: ok(None)),
)
find = shop.query_handler(
    "find",
    shop.query_pipeline(Find)
    .find_many(
        "items",
        lambda c: (
            sa.select(LkItem)
            .where(LkItem.sku.ilike(c.payload.pattern) if c.payload.folded else LkItem.sku.like(c.payload.pattern))
            .order_by(LkItem.sku)
        ),
    )
    .return_(lambda c: ok([i.sku for i in c.steps["items"]])),
)


@pytest.mark.parametrize(
    ("query", "found"),
    [
        (Find("ab%"), ["ab-2"]),
        (Find("AB%"), ["AB-1"]),
        (Find("%b-_"), ["ab-2"]),
        (Find("ab%", folded=True), ["AB-1", "ab-2"]),
        (Find("zz%"), []),
    ],
)
def test_like_is_case_sensitive_on_both_databases(
    app_on: Callable[..., App], user: User, query: Find, found: list[str]
) -> None:
    app = app_on([shop])
    for sku in ("AB-1", "ab-2", "cd-3"):
        ok_data(app.dispatch(add, Add(sku), user=user))
    assert ok_data(app.query(find, query, user=user)) == found
