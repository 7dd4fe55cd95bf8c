"""A shop's catalogue and shopping carts, ported from the shop example of the
``eventsourcing`` library and the shopping cart of Marten's docs.

Products are aggregates (a SKU unique per tenant, a price changed with optimistic locking).
A customer opens carts, adds and removes items, and checks a cart out, which creates an
order and closes the cart.  Every cart change names the cart version the client last read
(Marten's expected version): a change decided on an older cart is ``version_conflict``, so
two tabs of one customer never overwrite each other, and two concurrent checkouts of one
cart make one order.  A cart line keeps the price the product had when it was added.

``store_cart_summary`` is a read model listing each customer's carts (Marten's
multi-stream projection): one row per cart, written from the cart's row after each change,
filtered by tenant by the queries that read it.  Queries: the catalogue (a name filter, a
price cap, an order), the customer's carts (a status filter, a minimum total, an order,
paging).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

import attrs
from sqlalchemy import JSON, DateTime, Numeric, Select, String, UniqueConstraint, select
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from kumiko_typed import Entity, Failure, Feature, fail, ok


def _price(_instance: object, _attribute: attrs.Attribute[Decimal], value: Decimal) -> None:
    exponent = value.as_tuple().exponent
    if value < 0 or not isinstance(exponent, int) or exponent < -2:
        raise ValueError("must be zero or more, in whole cents")


class Product(Entity):
    __tablename__ = "store_product"
    __table_args__ = (UniqueConstraint("tenant_id", "sku"),)
    sku: Mapped[str] = mapped_column(String(40))
    name: Mapped[str] = mapped_column(String(200))
    price: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    description: Mapped[str] = mapped_column(String(2000), default="")


class Cart(Entity):
    __tablename__ = "store_cart"
    customer_id: Mapped[uuid.UUID] = mapped_column(index=True)
    status: Mapped[str] = mapped_column(String(20), default="open")
    #: Product id → {"sku", "name", "price" (text: a JSON column holds no Decimal), "quantity"}.
    lines: Mapped[dict[str, Any]] = mapped_column(JSON, default_factory=dict)
    item_count: Mapped[int] = mapped_column(default=0)
    total: Mapped[Decimal] = mapped_column(Numeric(12, 2), default=Decimal("0.00"))
    order_id: Mapped[uuid.UUID | None] = mapped_column(default=None)


class Order(Entity):
    __tablename__ = "store_order"
    #: One order per cart, also when two checkouts race.
    cart_id: Mapped[uuid.UUID] = mapped_column(unique=True)
    customer_id: Mapped[uuid.UUID]
    lines: Mapped[dict[str, Any]] = mapped_column(JSON)
    total: Mapped[Decimal] = mapped_column(Numeric(12, 2))


class ReadModels(MappedAsDataclass, DeclarativeBase):
    """Tables that are no aggregates."""


class CartSummary(ReadModels):
    __tablename__ = "store_cart_summary"
    cart_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(index=True)
    customer_id: Mapped[uuid.UUID] = mapped_column(index=True)
    status: Mapped[str] = mapped_column(String(20))
    item_count: Mapped[int]
    total: Mapped[Decimal] = mapped_column(Numeric(12, 2))
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class CartOpened:
    customer_id: uuid.UUID


@attrs.frozen
class ItemAdded:
    product_id: uuid.UUID
    sku: str
    name: str
    price: Decimal
    quantity: int


@attrs.frozen
class ItemRemoved:
    product_id: uuid.UUID
    quantity: int


@attrs.frozen
class CheckedOut:
    order_id: uuid.UUID


# --- payloads ------------------------------------------------------------------------------

_quantity = [attrs.validators.ge(1), attrs.validators.le(1000)]


@attrs.frozen
class AddProduct:
    sku: str = attrs.field(validator=attrs.validators.matches_re(r"[a-z0-9-]{1,40}"))
    name: str = attrs.field(validator=[attrs.validators.min_len(1), attrs.validators.max_len(200)])
    price: Decimal = attrs.field(validator=_price)
    description: str = ""


@attrs.frozen
class Reprice:
    product_id: uuid.UUID
    price: Decimal = attrs.field(validator=_price)
    version: int


@attrs.frozen
class OpenCart:
    pass


@attrs.frozen
class AddItem:
    cart_id: uuid.UUID
    product_id: uuid.UUID
    quantity: int = attrs.field(validator=_quantity)
    #: The cart version the client last read.
    version: int


@attrs.frozen
class RemoveItem:
    cart_id: uuid.UUID
    product_id: uuid.UUID
    quantity: int = attrs.field(validator=_quantity)
    version: int


@attrs.frozen
class Checkout:
    cart_id: uuid.UUID
    version: int


@attrs.frozen
class Catalogue:
    name_contains: str = attrs.field(default="", validator=attrs.validators.max_len(100))
    max_price: Decimal | None = None
    order_by: Literal["name", "price"] = "name"


@attrs.frozen
class Listed:
    sku: str
    name: str
    price: Decimal


@attrs.frozen
class MyCarts:
    status: Literal["open", "checked-out"] | None = None
    min_total: Decimal = Decimal(0)
    order_by: Literal["newest", "largest"] = "newest"
    limit: int = attrs.field(default=20, validator=[attrs.validators.ge(1), attrs.validators.le(100)])
    offset: int = attrs.field(default=0, validator=attrs.validators.ge(0))


@attrs.frozen
class CartView:
    cart_id: uuid.UUID
    status: str
    item_count: int
    total: Decimal


# --- the feature ---------------------------------------------------------------------------

shop = Feature("shop", projections=[CartSummary])
shop.entity(Product)
shop.entity(Cart)
shop.entity(Order)
shop.event(CartOpened, name="cart-opened")
shop.event(ItemAdded, name="item-added")
shop.event(ItemRemoved, name="item-removed")
shop.event(CheckedOut, name="checked-out")


@shop.projector(Cart, CartOpened)
def _opened(row: Cart, event: CartOpened) -> None:
    row.customer_id = event.customer_id


@shop.projector(Cart, ItemAdded)
def _added(row: Cart, event: ItemAdded) -> None:
    key = str(event.product_id)
    held = row.lines.get(key, {}).get("quantity", 0)
    row.lines[key] = {
        "sku": event.sku,
        "name": event.name,
        "price": str(event.price),
        "quantity": held + event.quantity,
    }
    row.item_count += event.quantity
    row.total += event.price * event.quantity


@shop.projector(Cart, ItemRemoved)
def _removed(row: Cart, event: ItemRemoved) -> None:
    key = str(event.product_id)
    line = row.lines[key]
    left = line["quantity"] - event.quantity
    if left:
        row.lines[key] = {**line, "quantity": left}
    else:
        del row.lines[key]
    row.item_count -= event.quantity
    row.total -= Decimal(line["price"]) * event.quantity


@shop.projector(Cart, CheckedOut)
def _checked_out(row: Cart, event: CheckedOut) -> None:
    row.status, row.order_id = "checked-out", event.order_id


def _summary(cart: Cart, now: datetime) -> dict[str, object]:
    return {
        "cart_id": cart.id,
        "tenant_id": cart.tenant_id,
        "customer_id": cart.customer_id,
        "status": cart.status,
        "item_count": cart.item_count,
        "total": cart.total,
        "changed_at": now,
    }


def _stale(cart: Cart, expected: int) -> Failure:
    """Refusing a change decided on another cart version, in the words and details of the
    framework's own optimistic-locking refusal."""
    return fail(
        "version_conflict",
        f"the cart is at version {cart.version}, not {expected}",
        {"entity_id": str(cart.id), "expected_version": expected, "current_version": cart.version},
    )


def _owned_cart(cart_id: uuid.UUID, customer_id: uuid.UUID) -> Select[Cart]:
    """A customer's own cart (another customer's reads as no cart at all)."""
    return select(Cart).where(Cart.id == cart_id, Cart.customer_id == customer_id)


add_product = shop.write_handler(
    "product:add",
    shop.pipeline(AddProduct)
    .create(
        "product",
        Product,
        data=lambda c: Product(
            sku=c.payload.sku, name=c.payload.name, price=c.payload.price, description=c.payload.description
        ),
    )
    .return_(lambda c: ok(c.steps["product"].id)),
    roles=["Merchant"],
)

reprice = shop.write_handler(
    "product:reprice",
    shop.pipeline(Reprice)
    .update(
        "product",
        Product,
        id=lambda c: c.payload.product_id,
        changes=lambda c: {"price": c.payload.price},
        version=lambda c: c.payload.version,
    )
    .return_(lambda c: ok(c.steps["product"].version)),
    roles=["Merchant"],
)

open_cart = shop.write_handler(
    "cart:open",
    shop.pipeline(OpenCart)
    .create(
        "cart",
        Cart,
        data=lambda c: Cart(customer_id=c.user.id),
        event=lambda c: CartOpened(c.user.id),
    )
    .unsafe_projection_upsert(CartSummary, on=["cart_id"], row=lambda c: _summary(c.steps["cart"].entity, c.now))
    .return_(lambda c: ok(c.steps["cart"].id)),
)

add_item = shop.write_handler(
    "cart:add-item",
    shop.pipeline(AddItem)
    .get_one("cart", lambda c: _owned_cart(c.payload.cart_id, c.user.id))
    .guard(
        lambda c: c.steps["cart"].version == c.payload.version,
        otherwise=lambda c: _stale(c.steps["cart"], c.payload.version),
    )
    .guard(
        lambda c: c.steps["cart"].status == "open", otherwise=lambda c: fail("unprocessable", "the cart is checked out")
    )
    .get_one("product", lambda c: select(Product).where(Product.id == c.payload.product_id))
    .append_event(
        Cart,
        id=lambda c: c.payload.cart_id,
        event=lambda c: ItemAdded(
            c.steps["product"].id,
            c.steps["product"].sku,
            c.steps["product"].name,
            c.steps["product"].price,
            c.payload.quantity,
        ),
    )
    .unsafe_projection_upsert(CartSummary, on=["cart_id"], row=lambda c: _summary(c.steps["cart"], c.now))
    .return_(lambda c: ok(c.steps["cart"].version)),
)

remove_item = shop.write_handler(
    "cart:remove-item",
    shop.pipeline(RemoveItem)
    .get_one("cart", lambda c: _owned_cart(c.payload.cart_id, c.user.id))
    .guard(
        lambda c: c.steps["cart"].version == c.payload.version,
        otherwise=lambda c: _stale(c.steps["cart"], c.payload.version),
    )
    .guard(
        lambda c: c.steps["cart"].status == "open", otherwise=lambda c: fail("unprocessable", "the cart is checked out")
    )
    .guard(
        lambda c: c.steps["cart"].lines.get(str(c.payload.product_id), {}).get("quantity", 0) >= c.payload.quantity,
        otherwise=lambda c: fail(
            "unprocessable",
            "the cart holds fewer of that product",
            [{"path": "$.quantity", "message": "more than the cart holds"}],
        ),
    )
    .append_event(
        Cart, id=lambda c: c.payload.cart_id, event=lambda c: ItemRemoved(c.payload.product_id, c.payload.quantity)
    )
    .unsafe_projection_upsert(CartSummary, on=["cart_id"], row=lambda c: _summary(c.steps["cart"], c.now))
    .return_(lambda c: ok(c.steps["cart"].version)),
)


def _new_order(order_id: uuid.UUID, cart: Cart) -> Order:
    order = Order(cart_id=cart.id, customer_id=cart.customer_id, lines=dict(cart.lines), total=cart.total)
    order.id = order_id
    return order


checkout = shop.write_handler(
    "cart:checkout",
    shop.pipeline(Checkout)
    .get_one("cart", lambda c: _owned_cart(c.payload.cart_id, c.user.id))
    .guard(
        lambda c: c.steps["cart"].version == c.payload.version,
        otherwise=lambda c: _stale(c.steps["cart"], c.payload.version),
    )
    .guard(
        lambda c: c.steps["cart"].status == "open", otherwise=lambda c: fail("unprocessable", "the cart is checked out")
    )
    .guard(lambda c: c.steps["cart"].item_count > 0, otherwise=lambda c: fail("unprocessable", "the cart is empty"))
    .compute("order_id", lambda c: uuid.uuid4())
    .append_event(Cart, id=lambda c: c.payload.cart_id, event=lambda c: CheckedOut(c.steps["order_id"]))
    .create("order", Order, data=lambda c: _new_order(c.steps["order_id"], c.steps["cart"]))
    .unsafe_projection_upsert(CartSummary, on=["cart_id"], row=lambda c: _summary(c.steps["cart"], c.now))
    .return_(lambda c: ok(c.steps["order"].id)),
)

catalogue = shop.query_handler(
    "product:catalogue",
    shop.query_pipeline(Catalogue)
    .find_many(
        "products",
        lambda c: (
            select(Product)
            .where(
                Product.name.ilike("%" + _like_escaped(c.payload.name_contains) + "%"),
                Product.price <= c.payload.max_price if c.payload.max_price is not None else Product.price >= 0,
            )
            .order_by(Product.price if c.payload.order_by == "price" else Product.name, Product.sku)
        ),
        limit=500,
    )
    .return_(lambda c: ok([Listed(p.sku, p.name, p.price) for p in c.steps["products"]])),
)


def _like_escaped(text: str) -> str:
    """``text`` matched as it is inside a LIKE pattern (a backslash escapes, on both databases)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


my_carts = shop.query_handler(
    "cart:mine",
    shop.query_pipeline(MyCarts)
    .find_many(
        "carts",
        lambda c: (
            select(CartSummary)
            .where(
                CartSummary.tenant_id == c.tenant_id,  # a read model: no automatic tenant filter
                CartSummary.customer_id == c.user.id,
                CartSummary.total >= c.payload.min_total,
                CartSummary.status == c.payload.status if c.payload.status is not None else CartSummary.status != "",
            )
            .order_by(
                CartSummary.total.desc() if c.payload.order_by == "largest" else CartSummary.changed_at.desc(),
                CartSummary.cart_id,
            )
            .limit(c.payload.limit)
            .offset(c.payload.offset)
        ),
    )
    .return_(lambda c: ok([CartView(s.cart_id, s.status, s.item_count, s.total) for s in c.steps["carts"]])),
)
