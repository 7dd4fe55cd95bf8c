"""Marten's event-versioning sample, ported (examples/ports/cart_versions.py), on SQLite and
PostgreSQL: release 1 stores version-1 openings (and, through a projector bug, wrong
totals) and starts the workflow's runs; this release reads the old streams through the
upcaster, rebuilds the projection, and resumes the runs release 1 left waiting, whose
payload is a version-1 opening."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import attrs
import pytest

import examples.ports.cart_versions as port
from examples.ports.cart_versions import (
    CONFIRM_WITHIN,
    AddItem,
    CartOf,
    CartSummary,
    Client,
    ConfirmCart,
    OpenCart,
    ProductItemAdded,
    ShoppingCart,
    ShoppingCartAbandoned,
    ShoppingCartConfirmed,
    ShoppingCartOpened,
    abandoned_cart,
    add_item,
    cart_summary,
    carts,
    confirm_cart,
    open_cart,
)
from kumiko_typed import App, Failure, Feature, Ok, User, WriteHandler, ok, on_event
from kumiko_typed.testing import FakeClock

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ALICE = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def _opened_v1() -> type[Any]:
    """``ShoppingCartOpened`` as release 1 of the same module defined it."""
    fields = {"cart_id": attrs.field(type=uuid.UUID), "client_id": attrs.field(type=uuid.UUID)}
    cls = attrs.make_class("ShoppingCartOpened", fields, frozen=True)
    cls.__module__ = port.__name__
    cls.__qualname__ = "ShoppingCartOpened"
    return cls


OPENED_V1 = _opened_v1()


def _release_1() -> tuple[Feature[Any], WriteHandler[OpenCart, uuid.UUID], WriteHandler[AddItem, None]]:
    f: Feature[Any] = Feature("carts")
    f.entity(ShoppingCart)
    f.event(OPENED_V1, name="shopping-cart-opened")
    f.event(ProductItemAdded, name="product-item-added")
    f.event(ShoppingCartConfirmed, name="shopping-cart-confirmed")
    f.event(ShoppingCartAbandoned, name="shopping-cart-abandoned")

    @f.projector(ShoppingCart, OPENED_V1)
    def _opened(row: ShoppingCart, event: Any) -> None:
        row.client_id = event.client_id

    @f.projector(ShoppingCart, ProductItemAdded)
    def _added(row: ShoppingCart, event: ProductItemAdded) -> None:
        row.items += event.quantity
        row.total += event.unit_price  # the bug release 2 fixes

    def new_cart(cart_id: uuid.UUID, client_id: uuid.UUID) -> ShoppingCart:
        cart = ShoppingCart(client_id=client_id)
        cart.id = cart_id
        return cart

    opened = f.write_handler(
        "cart:open",
        f.pipeline(OpenCart)
        .compute("cart_id", lambda c: uuid.uuid4())
        .create(
            "cart",
            ShoppingCart,
            data=lambda c: new_cart(c.steps["cart_id"], c.payload.client_id),
            event=lambda c: OPENED_V1(c.steps["cart_id"], c.payload.client_id),
        )
        .return_(lambda c: ok(c.steps["cart"].id)),
    )
    added = f.write_handler(
        "cart:add-item",
        f.pipeline(AddItem)
        .append_event(
            ShoppingCart,
            id=lambda c: c.payload.cart_id,
            event=lambda c: ProductItemAdded(
                c.payload.cart_id, c.payload.sku, c.payload.quantity, c.payload.unit_price
            ),
        )
        .return_(lambda c: ok(None)),
    )
    f.workflow(
        "abandoned-cart",
        trigger=on_event(OPENED_V1),
        pipeline=f.workflow_pipeline(OPENED_V1)
        .compute("cart_id", lambda c: c.payload.cart_id)
        .wait_for_event(
            "confirmed",
            ShoppingCartConfirmed,
            key=lambda c: c.payload.cart_id,
            event_key=lambda e: e.cart_id,
            timeout=CONFIRM_WITHIN,
        )
        .branch(
            name="abandon",
            when=lambda c: c.steps["confirmed"] is None,
            on_true=lambda b: b.append_event(
                ShoppingCart, id=lambda c: c.payload.cart_id, event=lambda c: ShoppingCartAbandoned(c.payload.cart_id)
            ),
        ),
    )
    return f, opened, added


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def _opened(app: App, handler: WriteHandler[OpenCart, uuid.UUID], client: uuid.UUID, name: str = "Ann") -> uuid.UUID:
    result = app.dispatch(handler, OpenCart(client, name), user=ALICE)
    assert isinstance(result, Ok), result
    return result.data


def _outcomes(app: App) -> dict[uuid.UUID, tuple[str, object]]:
    """Each cart's run: its status and what it returned (or its error)."""
    found: dict[uuid.UUID, tuple[str, object]] = {}
    for run in app.runs(workflow="carts:abandoned-cart"):
        payload = app.result(abandoned_cart, run.run_id, user=ALICE)
        cart = run.steps["cart_id"]
        assert isinstance(cart, uuid.UUID)
        found[cart] = (run.status, payload.data if isinstance(payload, Ok) else run.error)
    return found


def test_release_2_reads_release_1s_streams_rebuilds_its_rows_and_resumes_its_runs(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    feature_1, open_1, add_1 = _release_1()
    old = app_on([feature_1], clock=clock)
    client_a, client_b = uuid.uuid4(), uuid.uuid4()
    cart_a, cart_b = _opened(old, open_1, client_a), _opened(old, open_1, client_b)
    assert old.dispatch(add_1, AddItem(cart_a, "tea", 2, Decimal("5.00")), user=ALICE) == Ok(None)
    assert old.run_worker(once=True)["started"] == 2  # each run keeps its version-1 opening
    cart_c = _opened(old, open_1, uuid.uuid4())  # no worker of release 1 reads this one
    old.dispose()

    app = app_on([carts], clock=clock)
    stream = app.read_stream(ShoppingCart, cart_a, user=ALICE)
    assert isinstance(stream, Ok)
    first = stream.data[0]
    assert (first.schema_version, first.event) == (1, ShoppingCartOpened(cart_a, Client(client_a)))

    # The bug fix: the rows follow the fixed projector.
    check = app.rebuild_projection(ShoppingCart, user=ALICE, verify=True)
    assert isinstance(check, Ok) and check.data.changed == {cart_a: ("total",)}
    assert isinstance(app.rebuild_projection(ShoppingCart, user=ALICE), Ok)
    assert app.query(cart_summary, CartOf(cart_a), user=ALICE) == Ok(
        CartSummary("Unknown", 2, Decimal("10.00"), "open")
    )

    # The runs release 1 left waiting hold a version-1 opening: nothing to strand.
    assert app.check_runs() == []
    assert app.dispatch(confirm_cart, ConfirmCart(cart_a), user=ALICE) == Ok(None)
    counts = app.run_worker(once=True)
    assert (counts["started"], counts["resumed"]) == (1, 1)  # cart C's run, from its version-1 event
    clock.advance(CONFIRM_WITHIN)
    assert app.run_worker(once=True)["resumed"] == 2
    assert _outcomes(app) == {
        cart_a: ("completed", "Unknown: confirmed"),
        cart_b: ("completed", "Unknown: abandoned"),
        cart_c: ("completed", "Unknown: abandoned"),
    }
    assert app.query(cart_summary, CartOf(cart_b), user=ALICE) == Ok(CartSummary("Unknown", 0, Decimal(0), "abandoned"))


def test_a_run_release_2_stored_is_left_to_release_2_by_release_1(app_on: Callable[..., App], clock: FakeClock) -> None:
    """During the rolling deploy an old worker meets a run whose payload is a version-2
    opening: it is stranded with the reason, not failed nor read as a version 1."""
    app = app_on([carts], clock=clock)
    cart = _opened(app, open_cart, uuid.uuid4(), "Bo")
    assert app.run_worker(once=True)["started"] == 1
    feature_1, _, _ = _release_1()
    old = app_on([feature_1], clock=clock)
    (problem,) = old.check_runs()
    assert (
        "('shopping-cart-opened', stored at schema version 2) is newer than ShoppingCartOpened's schema version 1"
        in problem.reason
    )
    assert "Bo" not in problem.reason and str(cart) not in problem.reason
    clock.advance(CONFIRM_WITHIN)
    old.run_worker(once=True)
    (run,) = old.runs()
    assert run.status == "suspended" and run.error is not None and run.error["code"] == "stranded"
    assert app.run_worker(once=True)["resumed"] == 1  # the new release resumes it
    assert _outcomes(app) == {cart: ("completed", "Bo: abandoned")}


def test_the_cart_flow_on_this_release(app_on: Callable[..., App], clock: FakeClock) -> None:
    app = app_on([carts], clock=clock)
    cart = _opened(app, open_cart, uuid.uuid4(), "Cy")
    app.run_worker(once=True)
    refused = app.dispatch(confirm_cart, ConfirmCart(cart), user=ALICE)
    assert refused == Failure("unprocessable", "the cart is open with 0 items")
    assert app.dispatch(add_item, AddItem(cart, "tea", 3, Decimal("1.25")), user=ALICE) == Ok(None)
    assert app.dispatch(confirm_cart, ConfirmCart(cart), user=ALICE) == Ok(None)
    late = app.dispatch(add_item, AddItem(cart, "cup", 1, Decimal("4.00")), user=ALICE)
    assert late == Failure("unprocessable", "the cart is confirmed")
    app.run_worker(once=True)
    assert _outcomes(app) == {cart: ("completed", "Cy: confirmed")}
    assert app.query(cart_summary, CartOf(cart), user=ALICE) == Ok(CartSummary("Cy", 3, Decimal("3.75"), "confirmed"))
    check = app.rebuild_projection(ShoppingCart, user=ALICE, verify=True)
    assert isinstance(check, Ok) and check.data.matches
