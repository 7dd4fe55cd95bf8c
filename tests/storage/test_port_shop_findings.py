"""What porting the shop and subscription samples (examples/ports/shop.py, subscription.py)
found in the library: mistakes in an upsert's ``on=`` and ``row=`` and an ``on_event``
trigger of an unregistered class were found only at a dispatch or inside ``App(...)``, with
a message naming no column or workflow.  Each is now a boot problem or a refusal naming it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data

from kumiko_typed import App, BootError, Feature, User, ok, on_event

_metadata = sa.MetaData()
SUMMARY = sa.Table(
    "fnd_summary",
    _metadata,
    sa.Column("cart_id", sa.String(40), primary_key=True),
    sa.Column("customer", sa.String(40), nullable=False, index=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("note", sa.String(20), nullable=True),
    sa.Column("total", sa.Integer, nullable=False, default=0),
    sa.Column("sku", sa.String(40), nullable=True),
    sa.Column("slot", sa.Integer, nullable=True),
    sa.UniqueConstraint("customer", "slot"),
    sa.Index("fnd_summary_sku", "sku", unique=True),
    sa.Index("fnd_summary_open", "customer", "note", unique=True, postgresql_where=sa.text("note IS NULL")),
)


@attrs.frozen
class Touch:
    cart: str


@attrs.frozen
class Never:
    cart: str


def _problems(feature: Feature[Any]) -> list[str]:
    with pytest.raises(BootError) as raised:
        App([feature], database_url="sqlite://")
    return raised.value.problems


def _upserting(on: list[str], row: dict[str, object] | None = None) -> Feature[Any]:
    f: Feature[Any] = Feature("fnd", projections=[SUMMARY])
    f.write_handler(
        "touch",
        f.pipeline(Touch)
        .unsafe_projection_upsert(SUMMARY, on=on, row=lambda c: row or {"cart_id": c.payload.cart, "status": "open"})
        .return_(lambda c: ok(None)),
    )
    return f


#: What a key missing from the Table but made by a migration is told to do.
DECLARE = (
    " (a unique index your migrations made is read from the Table: declare it there, UniqueConstraint(...) or "
    "Index(..., unique=True))"
)


@pytest.mark.parametrize(
    ("on", "problem"),
    [
        (["cartid"], "unsafe_projection_upsert on=['cartid']: table 'fnd_summary' has no column 'cartid'"),
        (
            ["customer"],
            "unsafe_projection_upsert on=['customer']: the conflict columns must be the table's primary key or a "
            "unique constraint of 'fnd_summary' (ON CONFLICT matches nothing else); its keys are ['cart_id'] or "
            "['customer', 'slot'] or ['sku']" + DECLARE,
        ),
        (
            ["customer", "note"],  # a partial unique index is no conflict target without its WHERE
            "unsafe_projection_upsert on=['customer', 'note']: the conflict columns must be the table's primary key "
            "or a unique constraint of 'fnd_summary' (ON CONFLICT matches nothing else); its keys are ['cart_id'] "
            "or ['customer', 'slot'] or ['sku']" + DECLARE,
        ),
        (
            [],
            "unsafe_projection_upsert on=[]: the conflict columns must be the table's primary key or a unique "
            "constraint of 'fnd_summary' (ON CONFLICT matches nothing else); its keys are ['cart_id'] or "
            "['customer', 'slot'] or ['sku']" + DECLARE,
        ),
    ],
    ids=["no-such-column", "not-a-key", "partial-index", "none"],
)
def test_an_upsert_whose_on_is_no_key_of_its_table_fails_the_boot(on: list[str], problem: str) -> None:
    """Both databases refused such an ON CONFLICT at every dispatch, as an internal_error
    saying ``OperationalError`` (or, for a missing column, that the row "lacks" it)."""
    assert _problems(_upserting(on)) == [f"handler fnd:touch, step 0 (unsafe_projection_upsert): {problem}"]


@pytest.mark.parametrize("on", [["cart_id"], ["slot", "customer"], ["sku"]], ids=["primary", "unique", "index"])
def test_an_upsert_on_a_primary_key_unique_constraint_or_unique_index_boots(on: list[str]) -> None:
    App([_upserting(on)], database_url="sqlite://").dispose()


def test_an_upsert_row_lacking_a_not_null_column_is_refused_naming_it(app_on: Callable[..., App], admin: User) -> None:
    """The INSERT half of ``ON CONFLICT`` needs every NOT NULL column without a default, also
    when the row exists: both databases raised an IntegrityError, an internal_error naming
    no column.  A column with a default (``total``) or nullable (``note``) may be left out."""
    f = _upserting(["cart_id"])
    app = app_on([f])
    (handler,) = f.handlers
    with app.engine.begin() as conn:
        conn.execute(SUMMARY.insert().values(cart_id="c2", customer="ann", status="open"))
    for cart in ("c2", "c1"):  # a row to update; no row yet
        refused = failure_of(app.dispatch(handler, Touch(cart), user=admin), "internal_error")
        assert "row lacks the column(s) ['customer'] of fnd_summary, which are NOT NULL without a default" in (
            refused.message
        )
    full = {"cart_id": "c2", "customer": "ann", "status": "paid"}
    f2 = _upserting(["cart_id"], full)
    ok_data(app_on([f2]).dispatch(f2.handlers[0], Touch("c2"), user=admin))
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(SUMMARY.c.status, SUMMARY.c.total)).all() == [("paid", 0)]


def test_an_on_event_trigger_of_an_unregistered_event_fails_the_boot_naming_the_workflow() -> None:
    """``App(...)`` raised a bare ``UnregisteredError`` from inside the worker's event feed,
    naming no workflow, after the boot had passed (``kumiko-typed check`` too)."""
    f: Feature[Any] = Feature("fnd")
    f.workflow("starter", trigger=on_event(Never), pipeline=f.workflow_pipeline(Never).compute("x", lambda c: 1))
    assert _problems(f) == [
        "workflow fnd:starter: its trigger on_event(Never) names Never, which is not a registered event; "
        "register it with feature.event(Never) in a feature of this App"
    ]
    f.event(Never)
    App([f], database_url="sqlite://").dispose()
