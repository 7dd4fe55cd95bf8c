"""A ``LIKE`` in a read step finds the same rows on both databases: case-sensitive, as
PostgreSQL's is.  SQLite's own LIKE folds ASCII case, so ``like("ab%")`` also found
``"AB-1"`` there; ``ilike`` folds case on both.  A backslash escapes a wildcard on both, as on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
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


@pytest.mark.parametrize(
    ("query", "found"),
    [
        (Find(r"50\%"), ["50%"]),
        (Find(r"a\_b"), ["a_b"]),
        (Find("a_b"), ["a_b", "axb"]),
        (Find(r"50\\x"), ["50\\x"]),
        (Find(r"A\_B", folded=True), ["a_b"]),
        (Find(r"%\%"), ["50%"]),
    ],
)
def test_a_backslash_escapes_a_wildcard_on_both_databases(
    app_on: Callable[..., App], user: User, query: Find, found: list[str]
) -> None:
    """PostgreSQL's LIKE escapes with a backslash unless told otherwise; SQLite's had no
    escape character, so ``50\\%`` matched "50\\x" there and "50%" on PostgreSQL."""
    app = app_on([shop])
    for sku in ("50%", "50\\x", "a_b", "axb"):
        ok_data(app.dispatch(add, Add(sku), user=user))
    assert ok_data(app.query(find, query, user=user)) == found


@pytest.mark.parametrize("pattern", ["a\\", "%\\\\\\"])
def test_a_pattern_ending_in_a_lone_backslash_is_the_same_validation_error(
    app_on: Callable[..., App], user: User, pattern: str
) -> None:
    """PostgreSQL raised an error once a row's text reached the dangling escape (an
    ``internal_error``), SQLite found nothing; both now name the field."""
    app = app_on([shop])
    ok_data(app.dispatch(add, Add("ab"), user=user))
    for folded in (False, True):
        failure = failure_of(app.query(find, Find(pattern, folded), user=user), "validation_error")
        assert failure.details[0]["path"] == "$.pattern"
        assert failure.details[0]["column"] == "lk_item.sku"
        assert "lone backslash" in failure.details[0]["message"]
        assert pattern not in failure.message
    assert ok_data(app.query(find, Find("ab\\\\"), user=user)) == []  # an escaped one is fine
