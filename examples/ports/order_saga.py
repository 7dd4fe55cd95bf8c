"""An order saga, as in the Temporal and DBOS samples: reserve the stock, charge the
customer through the payment provider, wait for the shipment, and undo what was done when
a later step does not happen.

The provider is called with a webhook (delivered by the outbox, retried, with an
``Idempotency-Key``) and answers later by calling ``payment:settle``, which appends the
``PaymentSettled`` event the run waits for; the warehouse confirms with ``shipment:confirm``.
The run waits an hour for the payment and two days for the shipment.  Compensation runs
in reverse: a charge that went through is refunded, a reservation released.

Its URLs come from the environment (``SHOP_PAYMENTS_URL``) when a step runs, as a
service's configuration would.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from decimal import Decimal

import attrs
from sqlalchemy import Numeric, String, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Feature, RetryPolicy, fail, ok, on_event

PAYMENT_TIMEOUT = timedelta(hours=1)
SHIPMENT_TIMEOUT = timedelta(days=2)
#: How the outbox retries a charge or a refund the provider did not accept.
DELIVERY = RetryPolicy(times=3, base_delay=timedelta(minutes=1))


def payments_url(path: str) -> str:
    return os.environ.get("SHOP_PAYMENTS_URL", "https://payments.example") + path


class Stock(Entity):
    __tablename__ = "shop_stock"
    sku: Mapped[str] = mapped_column(String(40), unique=True)
    available: Mapped[int] = mapped_column(default=0)


class Order(Entity):
    __tablename__ = "shop_order"
    sku: Mapped[str] = mapped_column(String(40))
    qty: Mapped[int]
    amount: Mapped[Decimal] = mapped_column(Numeric(12, 2))
    status: Mapped[str] = mapped_column(String(40), default="placed")


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class OrderPlaced:
    order_id: uuid.UUID
    sku: str
    qty: int
    amount: Decimal


@attrs.frozen
class StockReserved:
    order_id: uuid.UUID
    qty: int


@attrs.frozen
class StockReleased:
    order_id: uuid.UUID
    qty: int


@attrs.frozen
class PaymentSettled:
    order_id: uuid.UUID
    approved: bool


@attrs.frozen
class Shipped:
    order_id: uuid.UUID
    tracking: str


@attrs.frozen
class OrderClosed:
    outcome: str


# --- payloads ------------------------------------------------------------------------------


@attrs.frozen
class AddStock:
    sku: str
    available: int


@attrs.frozen
class PlaceOrder:
    sku: str
    qty: int = attrs.field(validator=attrs.validators.gt(0))
    amount: Decimal = attrs.field(validator=attrs.validators.gt(Decimal(0)))


@attrs.frozen
class SettlePayment:
    order_id: uuid.UUID
    approved: bool


@attrs.frozen
class ConfirmShipment:
    order_id: uuid.UUID
    tracking: str


@attrs.frozen
class OrderStatus:
    order_id: uuid.UUID


# --- the feature ---------------------------------------------------------------------------

shop = Feature("shop", requires=["webhook.send"])
shop.entity(Stock)
shop.entity(Order)
shop.event(OrderPlaced, name="order-placed")
shop.event(StockReserved, name="stock-reserved")
shop.event(StockReleased, name="stock-released")
shop.event(PaymentSettled, name="payment-settled")
shop.event(Shipped, name="shipped")
shop.event(OrderClosed, name="order-closed")


@shop.projector(Stock, StockReserved)
def _reserved(row: Stock, event: StockReserved) -> None:
    row.available -= event.qty


@shop.projector(Stock, StockReleased)
def _released(row: Stock, event: StockReleased) -> None:
    row.available += event.qty


@shop.projector(Order, PaymentSettled)
def _settled(row: Order, event: PaymentSettled) -> None:
    row.status = "paid" if event.approved else "declined"


@shop.projector(Order, Shipped)
def _shipped(row: Order, event: Shipped) -> None:
    row.status = "shipped"


@shop.projector(Order, OrderClosed)
def _closed(row: Order, event: OrderClosed) -> None:
    row.status = event.outcome


add_stock = shop.write_handler(
    "stock:add",
    shop.pipeline(AddStock)
    .create("stock", Stock, data=lambda c: Stock(sku=c.payload.sku, available=c.payload.available))
    .return_(lambda c: ok(c.steps["stock"].id)),
)

place_order = shop.write_handler(
    "order:place",
    shop.pipeline(PlaceOrder)
    .create("order", Order, data=lambda c: Order(sku=c.payload.sku, qty=c.payload.qty, amount=c.payload.amount))
    .append_event(
        Order,
        id=lambda c: c.steps["order"].id,
        event=lambda c: OrderPlaced(c.steps["order"].id, c.payload.sku, c.payload.qty, c.payload.amount),
    )
    .return_(lambda c: ok(c.steps["order"].id)),
)

# The provider's and the warehouse's answers: each appends the event a run waits for.
settle_payment = shop.write_handler(
    "payment:settle",
    shop.pipeline(SettlePayment)
    .get_one("order", lambda c: select(Order).where(Order.id == c.payload.order_id))
    .guard(
        lambda c: c.steps["order"].status == "placed",
        otherwise=lambda c: fail("unprocessable", f"the order is {c.steps['order'].status}, not awaiting payment"),
    )
    .append_event(
        Order, id=lambda c: c.payload.order_id, event=lambda c: PaymentSettled(c.payload.order_id, c.payload.approved)
    )
    .return_(lambda c: ok(c.steps["order"].status)),
    roles=["PaymentProvider"],
)

confirm_shipment = shop.write_handler(
    "shipment:confirm",
    shop.pipeline(ConfirmShipment)
    .get_one("order", lambda c: select(Order).where(Order.id == c.payload.order_id))
    .guard(
        lambda c: c.steps["order"].status == "paid",
        otherwise=lambda c: fail("unprocessable", f"the order is {c.steps['order'].status}, not paid"),
    )
    .append_event(
        Order, id=lambda c: c.payload.order_id, event=lambda c: Shipped(c.payload.order_id, c.payload.tracking)
    )
    .return_(lambda c: ok(c.steps["order"].status)),
    roles=["Warehouse"],
)

order_status = shop.query_handler(
    "order:status",
    shop.query_pipeline(OrderStatus)
    .get_one("order", lambda c: select(Order).where(Order.id == c.payload.order_id))
    .return_(lambda c: ok(c.steps["order"].status)),
)


def _outcome(reserved: bool, payment: PaymentSettled | None, shipped: bool) -> str:
    if not reserved:
        return "out of stock"
    if payment is None:
        return "payment timed out"
    if not payment.approved:
        return "payment declined"
    return "shipped" if shipped else "not shipped"


order_saga = shop.workflow(
    "order-saga",
    trigger=on_event(OrderPlaced),
    pipeline=shop.workflow_pipeline(OrderPlaced)
    # 1. Reserve: read, decide, append.  A concurrent saga that got to the stock first makes
    #    this a version_conflict; the retry reads it again.
    .retry(
        name="reserve",
        times=5,
        base_delay=timedelta(seconds=1),
        do=lambda b: (
            b.get_one("stock", lambda c: select(Stock).where(Stock.sku == c.payload.sku))
            .compute("reserved", lambda c: c.steps["stock"].available >= c.payload.qty)
            .branch(
                when=lambda c: c.steps["reserved"],
                on_true=lambda b: b.append_event(
                    Stock,
                    id=lambda c: c.steps["stock"].id,
                    event=lambda c: StockReserved(c.payload.order_id, c.payload.qty),
                ),
            )
        ),
    )
    # 2. Charge, and wait for the provider's answer.
    .branch(
        name="charge",
        when=lambda c: c.steps["reserved"],
        on_true=lambda b: b.send_webhook(
            url=lambda c: payments_url("/charge"),
            body=lambda c: {"order_id": str(c.payload.order_id), "amount": str(c.payload.amount)},
            retry=DELIVERY,
        ).wait_for_event(
            "payment",
            PaymentSettled,
            key=lambda c: c.payload.order_id,
            event_key=lambda e: e.order_id,
            timeout=PAYMENT_TIMEOUT,
        ),
    )
    .compute("paid", lambda c: (payment := c.steps["payment"]) is not None and payment.approved)
    # 3. Wait for the warehouse, unless it was faster than this run: a wait sees only the
    #    events appended after the run reached it.  The order is read FOR UPDATE, so a
    #    shipment that commits meanwhile is either read here or comes after the wait.
    .branch(
        name="ship",
        when=lambda c: c.steps["paid"],
        on_true=lambda b: b.get_one(
            "order", lambda c: select(Order).where(Order.id == c.payload.order_id).with_for_update()
        ).branch(
            name="await",
            when=lambda c: c.steps["order"].status != "shipped",
            on_true=lambda b: b.wait_for_event(
                "shipment",
                Shipped,
                key=lambda c: c.payload.order_id,
                event_key=lambda e: e.order_id,
                timeout=SHIPMENT_TIMEOUT,
            ),
        ),
    )
    .compute(
        "shipped",
        lambda c: (
            c.steps["shipment"] is not None or ((order := c.steps["order"]) is not None and order.status == "shipped")
        ),
    )
    .compute("outcome", lambda c: _outcome(c.steps["reserved"], c.steps["payment"], c.steps["shipped"]))
    # 4. Compensate, last step first.
    .branch(
        name="refund",
        when=lambda c: c.steps["paid"] and not c.steps["shipped"],
        on_true=lambda b: b.send_webhook(
            url=lambda c: payments_url("/refund"),
            body=lambda c: {"order_id": str(c.payload.order_id), "amount": str(c.payload.amount)},
            retry=DELIVERY,
        ),
    )
    .branch(
        name="release",
        when=lambda c: c.steps["reserved"] and not c.steps["shipped"],
        on_true=lambda b: b.append_event(
            Stock, id=lambda c: c.steps["stock"].id, event=lambda c: StockReleased(c.payload.order_id, c.payload.qty)
        ),
    )
    .append_event(Order, id=lambda c: c.payload.order_id, event=lambda c: OrderClosed(c.steps["outcome"]))
    .return_(lambda c: ok(c.steps["outcome"])),
)
