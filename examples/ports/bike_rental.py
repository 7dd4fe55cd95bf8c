"""Bike rental, as in Axon's sample application: bikes are registered at a location, a
renter requests one, a payment saga prepares the payment with the provider and waits for
its answer; a confirmed payment puts the bike in use, a rejected or late one rejects the
request and frees the bike.  The renter returns the bike at another location.

Axon keeps the payment in an aggregate of its own, addressed by the rental's reference; so
does this port (``Payment``, whose id is the reference).  The provider is called with a
webhook, delivered by the outbox with an ``Idempotency-Key``, and answers by calling
``payment:settle``.  Its URL comes from the environment (``RENTAL_PAYMENTS_URL``).
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

#: How long the saga waits for the provider's answer before it rejects the request.
PAYMENT_TIMEOUT = timedelta(minutes=30)
DELIVERY = RetryPolicy(times=5, base_delay=timedelta(seconds=30))
PRICE = Decimal("4.50")


def payments_url(path: str) -> str:
    return os.environ.get("RENTAL_PAYMENTS_URL", "https://payments.example") + path


class Bike(Entity):
    __tablename__ = "rental_bike"
    bike_type: Mapped[str] = mapped_column(String(40))
    location: Mapped[str] = mapped_column(String(80))
    status: Mapped[str] = mapped_column(String(20), default="available")
    renter: Mapped[str | None] = mapped_column(String(80), default=None)
    reference: Mapped[uuid.UUID | None] = mapped_column(default=None)


class Payment(Entity):
    __tablename__ = "rental_payment"
    bike_id: Mapped[uuid.UUID]
    amount: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    status: Mapped[str] = mapped_column(String(20), default="prepared")


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class BikeRegistered:
    bike_type: str
    location: str


@attrs.frozen
class BikeRequested:
    bike_id: uuid.UUID
    renter: str
    reference: uuid.UUID


@attrs.frozen
class BikeInUse:
    renter: str


@attrs.frozen
class RequestRejected:
    reference: uuid.UUID


@attrs.frozen
class BikeReturned:
    location: str


@attrs.frozen
class PaymentSettled:
    reference: uuid.UUID
    approved: bool


@attrs.frozen
class PaymentExpired:
    reference: uuid.UUID


# --- payloads ------------------------------------------------------------------------------


def _text(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not value.strip():
        raise ValueError(f"{attribute.name} must not be empty")


@attrs.frozen
class RegisterBike:
    bike_type: str = attrs.field(validator=_text)
    location: str = attrs.field(validator=_text)


@attrs.frozen
class RequestBike:
    bike_id: uuid.UUID
    renter: str = attrs.field(validator=_text)


@attrs.frozen
class SettlePayment:
    reference: uuid.UUID
    approved: bool


@attrs.frozen
class ReturnBike:
    bike_id: uuid.UUID
    renter: str
    location: str = attrs.field(validator=_text)


@attrs.frozen
class FindBikes:
    location: str


@attrs.frozen
class BikeStatus:
    bike_id: uuid.UUID


@attrs.frozen
class BikeView:
    id: uuid.UUID
    bike_type: str
    location: str
    status: str
    renter: str | None


def _view(bike: Bike) -> BikeView:
    return BikeView(bike.id, bike.bike_type, bike.location, bike.status, bike.renter)


def _payment(request: BikeRequested) -> Payment:
    """The payment under the rental's reference, as Axon addresses it (``id`` is no
    argument of an entity's constructor; ``create`` keeps an id the entity has)."""
    payment = Payment(bike_id=request.bike_id, amount=PRICE)
    payment.id = request.reference
    return payment


# --- the feature ---------------------------------------------------------------------------

rental = Feature("rental", requires=["webhook.send"])
rental.entity(Bike)
rental.entity(Payment)
rental.event(BikeRegistered, name="bike-registered")
rental.event(BikeRequested, name="bike-requested")
rental.event(BikeInUse, name="bike-in-use")
rental.event(RequestRejected, name="request-rejected")
rental.event(BikeReturned, name="bike-returned")
rental.event(PaymentSettled, name="payment-settled")
rental.event(PaymentExpired, name="payment-expired")


@rental.projector(Bike, BikeRequested)
def _requested(row: Bike, event: BikeRequested) -> None:
    row.status, row.renter, row.reference = "requested", event.renter, event.reference


@rental.projector(Bike, BikeInUse)
def _in_use(row: Bike, event: BikeInUse) -> None:
    row.status = "in_use"


@rental.projector(Bike, RequestRejected)
def _rejected(row: Bike, event: RequestRejected) -> None:
    row.status, row.renter, row.reference = "available", None, None


@rental.projector(Bike, BikeReturned)
def _returned(row: Bike, event: BikeReturned) -> None:
    row.status, row.renter, row.reference, row.location = "available", None, None, event.location


@rental.projector(Payment, PaymentSettled)
def _settled(row: Payment, event: PaymentSettled) -> None:
    row.status = "confirmed" if event.approved else "rejected"


@rental.projector(Payment, PaymentExpired)
def _expired(row: Payment, event: PaymentExpired) -> None:
    row.status = "expired"


register_bike = rental.write_handler(
    "bike:register",
    rental.pipeline(RegisterBike)
    .create(
        "bike",
        Bike,
        data=lambda c: Bike(bike_type=c.payload.bike_type, location=c.payload.location),
        event=lambda c: BikeRegistered(c.payload.bike_type, c.payload.location),
    )
    .return_(lambda c: ok(c.steps["bike"].id)),
)

# Two renters asking for one bike: the second reads it requested (a guard), or, when both
# read it available at once, its event is refused by the first's (a version_conflict).
request_bike = rental.write_handler(
    "bike:request",
    rental.pipeline(RequestBike)
    .get_one("bike", lambda c: select(Bike).where(Bike.id == c.payload.bike_id))
    .guard(
        lambda c: c.steps["bike"].status == "available",
        otherwise=lambda c: fail(
            "unprocessable", "the bike is not available", [{"path": "$.bike_id", "message": c.steps["bike"].status}]
        ),
    )
    .compute("reference", lambda c: uuid.uuid4())
    .append_event(
        Bike,
        id=lambda c: c.payload.bike_id,
        event=lambda c: BikeRequested(c.payload.bike_id, c.payload.renter, c.steps["reference"]),
    )
    .return_(lambda c: ok(c.steps["reference"])),
)

settle_payment = rental.write_handler(
    "payment:settle",
    rental.pipeline(SettlePayment)
    .get_one("payment", lambda c: select(Payment).where(Payment.id == c.payload.reference))
    .guard(
        lambda c: c.steps["payment"].status == "prepared",
        otherwise=lambda c: fail("unprocessable", f"the payment is {c.steps['payment'].status} already"),
    )
    .append_event(
        Payment,
        id=lambda c: c.payload.reference,
        event=lambda c: PaymentSettled(c.payload.reference, c.payload.approved),
    )
    .return_(lambda c: ok(c.payload.approved)),
    roles=["PaymentProvider"],
)

return_bike = rental.write_handler(
    "bike:return",
    rental.pipeline(ReturnBike)
    .get_one("bike", lambda c: select(Bike).where(Bike.id == c.payload.bike_id))
    .guard(
        lambda c: c.steps["bike"].status == "in_use" and c.steps["bike"].renter == c.payload.renter,
        otherwise=lambda c: fail(
            "unprocessable", "the bike is not in use by this renter", [{"path": "$.renter", "message": "not renting"}]
        ),
    )
    .append_event(Bike, id=lambda c: c.payload.bike_id, event=lambda c: BikeReturned(c.payload.location))
    .return_(lambda c: ok(c.payload.location)),
)

find_bikes = rental.query_handler(
    "bike:available",
    rental.query_pipeline(FindBikes)
    .find_many(
        "bikes",
        lambda c: (
            select(Bike)
            .where(Bike.location == c.payload.location, Bike.status == "available")
            .order_by(Bike.bike_type, Bike.id)
        ),
        limit=100,
    )
    .return_(lambda c: ok([_view(bike) for bike in c.steps["bikes"]])),
)

bike_status = rental.query_handler(
    "bike:status",
    rental.query_pipeline(BikeStatus)
    .get_one("bike", lambda c: select(Bike).where(Bike.id == c.payload.bike_id))
    .return_(lambda c: ok(_view(c.steps["bike"]))),
)

# Axon's PaymentSaga: starts at a request, prepares the payment, ends when the bike is in
# use or the request is rejected.  No answer in time expires the payment, so a late one
# is refused rather than charged for a bike the renter did not get.
payment_saga = rental.workflow(
    "payment-saga",
    trigger=on_event(BikeRequested),
    pipeline=rental.workflow_pipeline(BikeRequested)
    .create(
        "payment",
        Payment,
        data=lambda c: _payment(c.payload),
    )
    .send_webhook(
        url=lambda c: payments_url("/prepare"),
        body=lambda c: {"reference": str(c.payload.reference), "amount": str(PRICE), "renter": c.payload.renter},
        retry=DELIVERY,
    )
    .wait_for_event(
        "answer",
        PaymentSettled,
        key=lambda c: c.payload.reference,
        event_key=lambda e: e.reference,
        timeout=PAYMENT_TIMEOUT,
    )
    # The payment as it stands, locked: an answer that commits while the wait times out
    # is either read here or refused by the expiry below, never charged for nothing.
    .get_one("settled", lambda c: select(Payment).where(Payment.id == c.payload.reference).with_for_update())
    .branch(
        name="expire",
        when=lambda c: c.steps["settled"].status == "prepared",
        on_true=lambda b: b.append_event(
            Payment, id=lambda c: c.payload.reference, event=lambda c: PaymentExpired(c.payload.reference)
        ),
    )
    .compute("approved", lambda c: c.steps["settled"].status == "confirmed")
    .get_one("bike", lambda c: select(Bike).where(Bike.id == c.payload.bike_id))
    .compute("ours", lambda c: c.steps["bike"].reference == c.payload.reference)
    .branch(
        name="outcome",
        when=lambda c: c.steps["approved"] and c.steps["ours"],
        on_true=lambda b: b.append_event(
            Bike, id=lambda c: c.payload.bike_id, event=lambda c: BikeInUse(c.payload.renter)
        ),
        on_false=lambda b: b.branch(
            name="reject",
            when=lambda c: c.steps["ours"],
            on_true=lambda b: b.append_event(
                Bike, id=lambda c: c.payload.bike_id, event=lambda c: RequestRejected(c.payload.reference)
            ),
        ),
    )
    .return_(lambda c: ok("in use" if c.steps["approved"] and c.steps["ours"] else "rejected")),
)
