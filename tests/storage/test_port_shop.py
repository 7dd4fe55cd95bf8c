"""The shop of ``eventsourcing``'s example and Marten's shopping cart, ported
(examples/ports/shop.py), on SQLite and PostgreSQL: carts changed by the version the client
read, a checkout making exactly one order also when two race, the catalogue and cart
queries' filters, orders and pages, the cart-summary read model, and tenants and customers
kept apart."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data

from examples.ports.shop import (
    AddItem,
    AddProduct,
    Cart,
    CartOpened,
    CartSummary,
    CartView,
    Catalogue,
    CheckedOut,
    Checkout,
    ItemAdded,
    ItemRemoved,
    Listed,
    MyCarts,
    OpenCart,
    Order,
    RemoveItem,
    Reprice,
    add_item,
    add_product,
    catalogue,
    checkout,
    my_carts,
    open_cart,
    remove_item,
    reprice,
    shop,
)
from kumiko_typed import App, Failure, Ok, User
from kumiko_typed.testing import FakeClock

D = Decimal


@pytest.fixture
def clock(now: datetime) -> FakeClock:
    return FakeClock(now)


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock) -> App:
    return app_on([shop], clock=clock)


@pytest.fixture
def merchant(user: User) -> User:
    return User(id=uuid.uuid4(), tenant_id=user.tenant_id, roles={"Merchant"})


def _products(app: App, merchant: User) -> dict[str, uuid.UUID]:
    made = {}
    for sku, name, price in (("tea", "Green tea", "4.50"), ("cup", "Tea cup", "7.00"), ("pot", "Tea pot", "19.90")):
        made[sku] = ok_data(app.dispatch(add_product, AddProduct(sku, name, D(price)), user=merchant))
    return made


def _cart(app: App, user: User, *items: tuple[uuid.UUID, int]) -> tuple[uuid.UUID, int]:
    """A new cart of ``user`` holding ``items``, and its version."""
    cart: uuid.UUID = ok_data(app.dispatch(open_cart, OpenCart(), user=user))
    version = 1
    for product, quantity in items:
        version = ok_data(app.dispatch(add_item, AddItem(cart, product, quantity, version), user=user))
    return cart, version


def test_a_cart_from_first_item_to_order_and_the_stream_behind_it(app: App, user: User, merchant: User) -> None:
    p = _products(app, merchant)
    cart, version = _cart(app, user, (p["tea"], 2), (p["cup"], 1), (p["tea"], 1))
    assert version == 4
    assert app.dispatch(remove_item, RemoveItem(cart, p["tea"], 2, 4), user=user) == Ok(5)
    # The line keeps the price the product had when it was added.
    assert app.dispatch(reprice, Reprice(p["tea"], D("5.00"), 1), user=merchant) == Ok(2)
    assert app.query(my_carts, MyCarts(), user=user) == Ok([CartView(cart, "open", 2, D("11.50"))])

    order_id = ok_data(app.dispatch(checkout, Checkout(cart, 5), user=user))
    orders = ok_data(app.read_stream(Order, order_id, user=user))
    assert [e.type for e in orders] == ["order.created"]
    stream = ok_data(app.read_stream(Cart, cart, user=user))
    assert [e.event for e in stream] == [
        CartOpened(user.id),
        ItemAdded(p["tea"], "tea", "Green tea", D("4.50"), 2),
        ItemAdded(p["cup"], "cup", "Tea cup", D("7.00"), 1),
        ItemAdded(p["tea"], "tea", "Green tea", D("4.50"), 1),
        ItemRemoved(p["tea"], 2),
        CheckedOut(order_id),
    ]
    with app.engine.connect() as conn:
        order = conn.execute(sa.select(Order.__table__).where(Order.__table__.c.id == order_id)).one()
    assert (order.cart_id, order.customer_id, order.total) == (cart, user.id, D("11.50"))
    assert order.lines == {
        str(p["tea"]): {"sku": "tea", "name": "Green tea", "price": "4.50", "quantity": 1},
        str(p["cup"]): {"sku": "cup", "name": "Tea cup", "price": "7.00", "quantity": 1},
    }
    # A checked-out cart takes no more changes, whatever version is named.
    for refused in (
        app.dispatch(add_item, AddItem(cart, p["pot"], 1, 6), user=user),
        app.dispatch(checkout, Checkout(cart, 6), user=user),
    ):
        assert refused == Failure("unprocessable", "the cart is checked out")
    # The cart rows are the projection of their events alone (lines changed in place too).
    assert ok_data(app.rebuild_projection(Cart, user=user, verify=True)).matches


def test_a_change_decided_on_an_old_cart_is_a_version_conflict(app: App, user: User, merchant: User) -> None:
    p = _products(app, merchant)
    cart, version = _cart(app, user, (p["tea"], 1))
    stale = failure_of(app.dispatch(add_item, AddItem(cart, p["cup"], 1, version - 1), user=user), "version_conflict")
    assert stale.details == {"entity_id": str(cart), "expected_version": 1, "current_version": 2}
    assert stale.http_status == 409
    assert failure_of(app.dispatch(checkout, Checkout(cart, 1), user=user)).code == "version_conflict"
    too_many = failure_of(app.dispatch(remove_item, RemoveItem(cart, p["tea"], 2, version), user=user))
    assert too_many.details == [{"path": "$.quantity", "message": "more than the cart holds"}]
    empty, empty_version = _cart(app, user)
    assert app.dispatch(checkout, Checkout(empty, empty_version), user=user) == Failure(
        "unprocessable", "the cart is empty"
    )
    unknown = failure_of(app.dispatch(add_item, AddItem(cart, uuid.uuid4(), 1, version), user=user), "not_found")
    assert unknown.details == {"step": "product"}
    # Nothing of the refused calls was written.
    assert len(ok_data(app.read_stream(Cart, cart, user=user))) == 2


def _race(work: Callable[[], object], count: int = 2) -> list[object]:
    barrier = threading.Barrier(count)
    results: list[object] = []

    def run() -> None:
        barrier.wait()
        results.append(work())

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_two_concurrent_checkouts_of_one_cart_make_one_order(app: App, user: User, merchant: User) -> None:
    p = _products(app, merchant)
    for _round in range(3):
        cart, version = _cart(app, user, (p["pot"], 1))
        results = _race(lambda cart=cart, version=version: app.dispatch(checkout, Checkout(cart, version), user=user))
        won = [r for r in results if isinstance(r, Ok)]
        lost = [failure_of(r) for r in results if not isinstance(r, Ok)]
        assert len(won) == 1 and len(lost) == 1, results
        # PostgreSQL: both read version 2, the second append loses; SQLite runs one writer
        # at a time, so the second reads the checked-out cart (version 3).
        assert lost[0].code in {"version_conflict", "unprocessable"}, lost
        with app.engine.connect() as conn:
            orders = conn.execute(sa.select(Order.__table__.c.id).where(Order.__table__.c.cart_id == cart)).all()
        assert [o.id for o in orders] == [won[0].data]
        events = [e.event for e in ok_data(app.read_stream(Cart, cart, user=user))]
        assert events[-1] == CheckedOut(won[0].data) and events.count(CheckedOut(won[0].data)) == 1


def test_two_tabs_adding_to_one_cart_version_keep_one_change(app: App, user: User, merchant: User) -> None:
    p = _products(app, merchant)
    cart, version = _cart(app, user)
    results = _race(lambda: app.dispatch(add_item, AddItem(cart, p["tea"], 1, version), user=user))
    assert sorted(type(r).__name__ for r in results) == ["Failure", "Ok"], results
    assert [failure_of(r).code for r in results if not isinstance(r, Ok)] == ["version_conflict"]
    assert app.query(my_carts, MyCarts(), user=user) == Ok([CartView(cart, "open", 1, D("4.50"))])


def test_another_tenant_or_customer_cannot_touch_the_cart(
    app: App, user: User, merchant: User, make_user: Callable[..., User]
) -> None:
    p = _products(app, merchant)
    cart, version = _cart(app, user, (p["tea"], 1))
    stranger = make_user()  # another tenant
    neighbour = User(id=uuid.uuid4(), tenant_id=user.tenant_id)  # same shop, another customer
    for other in (stranger, neighbour):
        for result in (
            app.dispatch(add_item, AddItem(cart, p["cup"], 1, version), user=other),
            app.dispatch(remove_item, RemoveItem(cart, p["tea"], 1, version), user=other),
            app.dispatch(checkout, Checkout(cart, version), user=other),
        ):
            assert failure_of(result).code == "not_found", result
        assert app.query(my_carts, MyCarts(), user=other) == Ok([])
        assert failure_of(app.read_stream(Order, cart, user=other)).code == "not_found"
    # The stranger's own cart cannot take this tenant's product either.
    theirs, theirs_version = _cart(app, stranger)
    refused = app.dispatch(add_item, AddItem(theirs, p["tea"], 1, theirs_version), user=stranger)
    assert failure_of(refused).code == "not_found"
    assert app.query(catalogue, Catalogue(), user=stranger) == Ok([])
    assert app.query(my_carts, MyCarts(), user=user) == Ok([CartView(cart, "open", 1, D("4.50"))])
    # The same SKU is free in another tenant; in this one it is taken.
    stranger_merchant = User(id=uuid.uuid4(), tenant_id=stranger.tenant_id, roles={"Merchant"})
    assert isinstance(app.dispatch(add_product, AddProduct("tea", "Their tea", D(1)), user=stranger_merchant), Ok)
    taken = failure_of(app.dispatch(add_product, AddProduct("tea", "Again", D(1)), user=merchant), "unique_violation")
    assert taken.details == {"entity": "Product", "columns": ["tenant_id", "sku"], "path": "$.sku"}
    customer = failure_of(app.dispatch(add_product, AddProduct("mug", "Mug", D(1)), user=user))
    assert customer.code == "access_denied"


def test_the_catalogue_filters_and_orders(app: App, user: User, merchant: User) -> None:
    _products(app, merchant)
    ok_data(app.dispatch(add_product, AddProduct("tea-2", "tea_bag 100%", D("4.50")), user=merchant))
    everything = [
        Listed("tea", "Green tea", D("4.50")),
        Listed("tea-2", "tea_bag 100%", D("4.50")),
        Listed("cup", "Tea cup", D("7.00")),
        Listed("pot", "Tea pot", D("19.90")),
    ]
    assert app.query(catalogue, Catalogue(order_by="price"), user=user) == Ok(everything)  # ties by SKU
    by_name = ok_data(app.query(catalogue, Catalogue(), user=user))
    assert [x.name for x in by_name] == ["Green tea", "Tea cup", "Tea pot", "tea_bag 100%"]  # code point order
    assert app.query(catalogue, Catalogue("TEA ", D("10"), "price"), user=user) == Ok(everything[2:3])
    # LIKE's wildcards in the text match themselves only.
    assert app.query(catalogue, Catalogue("_bag 100%"), user=user) == Ok([everything[1]])
    assert app.query(catalogue, Catalogue("%"), user=user) == Ok([everything[1]])
    assert app.query(catalogue, Catalogue("te_"), user=user) == Ok([])  # as a wildcard it matched every tea
    bad = failure_of(app.query_json("shop:product:catalogue", {"order_by": "stock", "max_price": "x"}, user=user))
    assert {d["path"] for d in bad.details} == {"$.order_by", "$.max_price"}


def test_my_carts_filter_order_and_page(app: App, user: User, merchant: User, clock: FakeClock) -> None:
    p = _products(app, merchant)
    made = []
    for items in ([(p["tea"], 1)], [(p["pot"], 2)], [(p["cup"], 1)], []):
        made.append(_cart(app, user, *items))
        clock.advance(timedelta(minutes=1))
    ok_data(app.dispatch(checkout, Checkout(*made[1]), user=user))
    tea, pot, cup, empty = (cart for cart, _ in made)

    def ids(query: MyCarts) -> list[uuid.UUID]:
        return [v.cart_id for v in ok_data(app.query(my_carts, query, user=user))]

    assert ids(MyCarts()) == [pot, empty, cup, tea]  # newest change first: the checkout came last
    assert ids(MyCarts(order_by="largest")) == [pot, cup, tea, empty]
    assert ids(MyCarts(status="open", min_total=D("4.50"))) == [cup, tea]
    assert ids(MyCarts(status="checked-out")) == [pot]
    assert ids(MyCarts(order_by="largest", limit=2, offset=1)) == [cup, tea]
    assert ids(MyCarts(offset=10)) == []
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(CartSummary.__table__).order_by(CartSummary.__table__.c.total)).all()
    assert [(r.cart_id, r.item_count, r.total) for r in rows] == [
        (empty, 0, D("0.00")),
        (tea, 1, D("4.50")),
        (cup, 1, D("7.00")),
        (pot, 2, D("39.80")),
    ]
    refused = failure_of(app.query_json("shop:cart:mine", {"limit": 0, "offset": -1}, user=user), "validation_error")
    assert [d["path"] for d in refused.details] == ["$.limit", "$.offset"]
