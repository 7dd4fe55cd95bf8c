"""Marten's event-versioning sample, ported: a shopping cart whose opening event changed
shape in a release (``ShoppingCartOpened`` named the client by id; it now carries a
``Client`` with a name), read back through an upcaster (Marten's ``Upcast<Old, New>``:
here ``feature.event(..., version=2, upcasters={1: ...})``), and a projection rebuilt
after a bug fix (Marten's ``RebuildProjectionAsync``: here ``app.rebuild_projection``).

What the schema change must not break, besides reading old streams: the run of the
``abandoned-cart`` workflow that an old event started keeps that event as its payload,
in the old shape, while it waits a day for the cart's confirmation; the new release reads
it through the same upcaster and resumes it (tests/workflows/test_port_cart_versions.py
runs release 1 and this release on one database).

A cart's creation event is its opening (``create(..., event=)``), so a rebuild builds the
row from the events alone: the projectors set every column ``data=`` sets.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import attrs
from sqlalchemy import Numeric, String, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Feature, fail, ok, on_event

CONFIRM_WITHIN = timedelta(days=1)


class ShoppingCart(Entity):
    __tablename__ = "mv_shopping_cart"
    client_id: Mapped[uuid.UUID]
    client_name: Mapped[str] = mapped_column(String(100), default="Unknown")
    items: Mapped[int] = mapped_column(default=0)
    total: Mapped[Decimal] = mapped_column(Numeric(12, 2), default=Decimal(0))
    status: Mapped[str] = mapped_column(String(20), default="open")


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class Client:
    id: uuid.UUID
    name: str = "Unknown"


@attrs.frozen
class ShoppingCartOpened:
    """Schema version 2.  Version 1 was ``{cart_id, client_id}``."""

    cart_id: uuid.UUID
    client: Client


def opened_v1_to_v2(stored: dict[str, Any]) -> dict[str, Any]:
    """A version-1 opening as version 2: the client was known by id alone."""
    return {"cart_id": stored["cart_id"], "client": {"id": stored["client_id"], "name": "Unknown"}}


@attrs.frozen
class ProductItemAdded:
    cart_id: uuid.UUID
    sku: str
    quantity: int
    unit_price: Decimal


@attrs.frozen
class ShoppingCartConfirmed:
    cart_id: uuid.UUID


@attrs.frozen
class ShoppingCartAbandoned:
    cart_id: uuid.UUID


# --- payloads ------------------------------------------------------------------------------


@attrs.frozen
class OpenCart:
    client_id: uuid.UUID
    client_name: str = attrs.field(
        validator=attrs.validators.and_(attrs.validators.min_len(1), attrs.validators.max_len(100))
    )


@attrs.frozen
class AddItem:
    cart_id: uuid.UUID
    sku: str = attrs.field(validator=attrs.validators.and_(attrs.validators.min_len(1), attrs.validators.max_len(40)))
    quantity: int = attrs.field(validator=attrs.validators.gt(0))
    unit_price: Decimal = attrs.field(validator=attrs.validators.ge(Decimal(0)))


@attrs.frozen
class ConfirmCart:
    cart_id: uuid.UUID


@attrs.frozen
class CartOf:
    cart_id: uuid.UUID


@attrs.frozen
class CartSummary:
    client: str
    items: int
    total: Decimal
    status: str


# --- the feature ---------------------------------------------------------------------------

carts = Feature("carts")
carts.entity(ShoppingCart)
carts.event(ShoppingCartOpened, name="shopping-cart-opened", version=2, upcasters={1: opened_v1_to_v2})
carts.event(ProductItemAdded, name="product-item-added")
carts.event(ShoppingCartConfirmed, name="shopping-cart-confirmed")
carts.event(ShoppingCartAbandoned, name="shopping-cart-abandoned")


@carts.projector(ShoppingCart, ShoppingCartOpened)
def _opened(row: ShoppingCart, event: ShoppingCartOpened) -> None:
    row.client_id, row.client_name = event.client.id, event.client.name


@carts.projector(ShoppingCart, ProductItemAdded)
def _added(row: ShoppingCart, event: ProductItemAdded) -> None:
    row.items += event.quantity
    row.total += event.unit_price * event.quantity  # release 1 added the unit price alone


@carts.projector(ShoppingCart, ShoppingCartConfirmed)
def _confirmed(row: ShoppingCart, event: ShoppingCartConfirmed) -> None:
    row.status = "confirmed"


@carts.projector(ShoppingCart, ShoppingCartAbandoned)
def _abandoned(row: ShoppingCart, event: ShoppingCartAbandoned) -> None:
    row.status = "abandoned"


def _new_cart(cart_id: uuid.UUID, payload: OpenCart) -> ShoppingCart:
    """The row ``create`` inserts, under the id its opening event names (``create`` keeps an
    id the entity has)."""
    cart = ShoppingCart(client_id=payload.client_id, client_name=payload.client_name)
    cart.id = cart_id
    return cart


open_cart = carts.write_handler(
    "cart:open",
    carts.pipeline(OpenCart)
    .compute("cart_id", lambda c: uuid.uuid4())
    .create(
        "cart",
        ShoppingCart,
        data=lambda c: _new_cart(c.steps["cart_id"], c.payload),
        event=lambda c: ShoppingCartOpened(c.steps["cart_id"], Client(c.payload.client_id, c.payload.client_name)),
    )
    .return_(lambda c: ok(c.steps["cart"].id)),
)

add_item = carts.write_handler(
    "cart:add-item",
    carts.pipeline(AddItem)
    .get_one("cart", lambda c: select(ShoppingCart).where(ShoppingCart.id == c.payload.cart_id))
    .guard(
        lambda c: c.steps["cart"].status == "open",
        otherwise=lambda c: fail("unprocessable", f"the cart is {c.steps['cart'].status}"),
    )
    .append_event(
        ShoppingCart,
        id=lambda c: c.payload.cart_id,
        event=lambda c: ProductItemAdded(c.payload.cart_id, c.payload.sku, c.payload.quantity, c.payload.unit_price),
    )
    .return_(lambda c: ok(None)),
)

confirm_cart = carts.write_handler(
    "cart:confirm",
    carts.pipeline(ConfirmCart)
    .get_one("cart", lambda c: select(ShoppingCart).where(ShoppingCart.id == c.payload.cart_id))
    .guard(
        lambda c: c.steps["cart"].status == "open" and c.steps["cart"].items > 0,
        otherwise=lambda c: fail(
            "unprocessable", f"the cart is {c.steps['cart'].status} with {c.steps['cart'].items} items"
        ),
    )
    .append_event(
        ShoppingCart, id=lambda c: c.payload.cart_id, event=lambda c: ShoppingCartConfirmed(c.payload.cart_id)
    )
    .return_(lambda c: ok(None)),
)

cart_summary = carts.query_handler(
    "cart:summary",
    carts.query_pipeline(CartOf)
    .get_one("cart", lambda c: select(ShoppingCart).where(ShoppingCart.id == c.payload.cart_id))
    .return_(
        lambda c: ok(
            CartSummary(
                c.steps["cart"].client_name, c.steps["cart"].items, c.steps["cart"].total, c.steps["cart"].status
            )
        )
    ),
)

abandoned_cart = carts.workflow(
    "abandoned-cart",
    trigger=on_event(ShoppingCartOpened),
    pipeline=carts.workflow_pipeline(ShoppingCartOpened)
    .compute("cart_id", lambda c: c.payload.cart_id)  # which cart, for app.runs()
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
    )
    .return_(lambda c: ok(f"{c.payload.client.name}: {'abandoned' if c.steps['confirmed'] is None else 'confirmed'}")),
)
