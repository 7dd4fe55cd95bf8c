"""Eventuous's Booking sample, ported: a guest books a hotel room for a stay (refused when
the room is taken for any of its nights), pays for it in one or more payments (each
recorded once by its payment id, as Eventuous's ``HasPaymentBeenRecorded`` does), and the
booking becomes fully paid — or overpaid, by how much — or is cancelled.  The two read
models of the sample are tables written in the same transaction: "my bookings" (a guest's
bookings) and "bookings by room" (which also answers whether a room is free).

What users of the sample add, here too:

- Each recorded payment notifies the hotel's payment system through a webhook (the
  outbox: sent after the commit, retried, with an ``Idempotency-Key``).  Its URL comes from
  the environment (``BOOKING_NOTIFY_URL``) when the step runs.
- A booking not paid by the night before check-in (02:00 at the hotel, ``HOTEL_ZONE``) is
  cancelled.  Each booking's run (started by its ``RoomBooked``) waits until that night
  (a cancellation before it ends the run early), then reads the booking *locked* and
  cancels it only if it is still unpaid: a payment that commits in the same instant is
  either read there (no cancel) or waits for the cancel and is then refused — never a
  paid booking cancelled.  It is not the nightly ``cron``
  that cancels: a cron run belongs to no tenant (docs/workflows.md, *Triggers*), so it
  reads every tenant's bookings (``kumiko_all_tenants``) but may not append to any of
  them; one run per booking, in the booking's tenant, may.
- The nightly ``cron`` (02:00 at the hotel) tells the front desk, per booking, which
  unpaid bookings arriving tomorrow are being released — "tomorrow" from the tick's own
  time (``scheduled_at``), so the ticks a stopped worker missed each report their own night.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import attrs
from sqlalchemy import Date, DateTime, Numeric, String, select
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from kumiko_typed import CronTick, Entity, Feature, RetryPolicy, cron, fail, ok, on_event

#: Where the hotel is: its nights, check-in dates and the nightly job are in its wall time.
HOTEL_ZONE = "Europe/Amsterdam"
#: When, the night before check-in, an unpaid booking is released.
RELEASE_AT = time(2, 0)
#: The largest amount one booking or payment may carry (the columns hold 12 digits).
MAX_AMOUNT = Decimal("1000000.00")
#: How far ahead a room can be booked.
HORIZON = timedelta(days=730)
#: How the payment system's notification is retried.
DELIVERY = RetryPolicy(times=5, backoff="exponential", base_delay=timedelta(seconds=30))


def notify_url(path: str) -> str:
    return os.environ.get("BOOKING_NOTIFY_URL", "https://payments.hotel.example") + path


def release_time(check_in: date) -> datetime:
    """The instant an unpaid booking for ``check_in`` is released: 02:00 at the hotel, the
    night before (an aware datetime; the hotel's zone decides the UTC instant)."""
    return datetime.combine(check_in - timedelta(days=1), RELEASE_AT, tzinfo=ZoneInfo(HOTEL_ZONE))


def hotel_today(now: datetime) -> date:
    return now.astimezone(ZoneInfo(HOTEL_ZONE)).date()


def _money(_instance: object, attribute: attrs.Attribute[Decimal], value: Decimal) -> None:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int) or exponent < -2 or not Decimal(0) < value <= MAX_AMOUNT:
        raise ValueError(f"must be more than 0 and at most {MAX_AMOUNT}, in whole cents")


def _currency(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if len(value) != 3 or not value.isascii() or not value.isupper():
        raise ValueError("must be a three-letter ISO 4217 code")


def _stay(instance: BookRoom, attribute: attrs.Attribute[date], value: date) -> None:
    if not instance.check_in < value <= instance.check_in + timedelta(days=60):
        raise ValueError("must be 1 to 60 nights after check_in")


_TEXT: Callable[[Any, Any, str], None] = attrs.validators.and_(
    attrs.validators.min_len(1), attrs.validators.max_len(60)
)


class Booking(Entity):
    __tablename__ = "booking_booking"
    guest_id: Mapped[uuid.UUID] = mapped_column(default=uuid.UUID(int=0))
    room_id: Mapped[str] = mapped_column(String(60), default="")
    check_in: Mapped[date] = mapped_column(Date, default=date.min)
    check_out: Mapped[date] = mapped_column(Date, default=date.min)
    price: Mapped[Decimal] = mapped_column(Numeric(12, 2), default=Decimal("0.00"))
    currency: Mapped[str] = mapped_column(String(3), default="EUR")
    paid: Mapped[Decimal] = mapped_column(Numeric(12, 2), default=Decimal("0.00"))
    outstanding: Mapped[Decimal] = mapped_column(Numeric(12, 2), default=Decimal("0.00"))
    overpaid: Mapped[Decimal] = mapped_column(Numeric(12, 2), default=Decimal("0.00"))
    #: booked | paid | cancelled
    status: Mapped[str] = mapped_column(String(20), default="booked")


class BookingReadModels(MappedAsDataclass, DeclarativeBase):
    """Tables that are no aggregate's."""


class MyBooking(BookingReadModels):
    """Eventuous's ``MyBookings``: a guest's bookings."""

    __tablename__ = "booking_my_bookings"
    booking_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(index=True)
    guest_id: Mapped[uuid.UUID] = mapped_column(index=True)
    room_id: Mapped[str] = mapped_column(String(60))
    check_in: Mapped[date] = mapped_column(Date)
    check_out: Mapped[date] = mapped_column(Date)
    price: Mapped[Decimal] = mapped_column(Numeric(12, 2))
    outstanding: Mapped[Decimal] = mapped_column(Numeric(12, 2))
    status: Mapped[str] = mapped_column(String(20))


class RoomBooking(BookingReadModels):
    """Bookings by room: the nights a room is taken."""

    __tablename__ = "booking_room_bookings"
    booking_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(index=True)
    room_id: Mapped[str] = mapped_column(String(60), index=True)
    check_in: Mapped[date] = mapped_column(Date)
    check_out: Mapped[date] = mapped_column(Date)
    status: Mapped[str] = mapped_column(String(20))


class RoomLock(BookingReadModels):
    """One row per room, written first by each booking of it: the row lock its upsert
    takes makes two bookings of one room decide one after the other (on PostgreSQL two
    concurrent ones both found the nights free)."""

    __tablename__ = "booking_room_locks"
    tenant_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    room_id: Mapped[str] = mapped_column(String(60), primary_key=True)
    last_booked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PaymentSeen(BookingReadModels):
    """Each recorded payment id of a tenant, so a payment sent twice is recorded once."""

    __tablename__ = "booking_payments"
    tenant_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    payment_id: Mapped[str] = mapped_column(String(60), primary_key=True)
    booking_id: Mapped[uuid.UUID] = mapped_column()
    amount: Mapped[Decimal] = mapped_column(Numeric(12, 2))


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class RoomBooked:
    booking_id: uuid.UUID
    guest_id: uuid.UUID
    room_id: str
    check_in: date
    check_out: date
    price: Decimal
    currency: str
    booked_at: datetime


@attrs.frozen
class PaymentRecorded:
    booking_id: uuid.UUID
    payment_id: str
    amount: Decimal
    outstanding: Decimal
    paid_by: str
    paid_at: datetime


@attrs.frozen
class BookingFullyPaid:
    booking_id: uuid.UUID
    paid_at: datetime


@attrs.frozen
class BookingOverpaid:
    booking_id: uuid.UUID
    overpaid: Decimal


@attrs.frozen
class BookingCancelled:
    booking_id: uuid.UUID
    reason: str
    cancelled_at: datetime


# --- payloads and answers ------------------------------------------------------------------


@attrs.frozen
class BookRoom:
    room_id: str = attrs.field(validator=_TEXT)
    check_in: date
    check_out: date = attrs.field(validator=_stay)
    price: Decimal = attrs.field(validator=_money)
    currency: str = attrs.field(default="EUR", validator=_currency)


@attrs.frozen
class RecordPayment:
    booking_id: uuid.UUID
    payment_id: str = attrs.field(validator=_TEXT)
    amount: Decimal = attrs.field(validator=_money)
    currency: str = attrs.field(default="EUR", validator=_currency)
    paid_by: str = attrs.field(default="card", validator=_TEXT)


@attrs.frozen
class CancelBooking:
    booking_id: uuid.UUID
    reason: str = attrs.field(default="cancelled by the guest", validator=attrs.validators.max_len(200))


@attrs.frozen
class MyBookings:
    """The dispatching guest's bookings."""


@attrs.frozen
class RoomQuery:
    room_id: str = attrs.field(validator=_TEXT)


@attrs.frozen
class PaymentState:
    booking_id: uuid.UUID
    status: str
    paid: Decimal
    outstanding: Decimal
    overpaid: Decimal
    #: False when the payment id had been recorded before (nothing changed).
    recorded: bool


@attrs.frozen
class BookingView:
    booking_id: uuid.UUID
    room_id: str
    check_in: date
    check_out: date
    price: Decimal
    outstanding: Decimal
    status: str


@attrs.frozen
class RoomNights:
    booking_id: uuid.UUID
    check_in: date
    check_out: date
    status: str


#: What an App serving this feature names in ``App(value_types=...)``: a payment's answer is
#: kept with its idempotency key, and only registered classes are stored.
VALUE_TYPES = [PaymentState]

# --- the feature ---------------------------------------------------------------------------

bookings = Feature("booking", requires=["webhook.send"], projections=[MyBooking, RoomBooking, PaymentSeen, RoomLock])
bookings.entity(Booking)
bookings.event(RoomBooked, name="room-booked")
bookings.event(PaymentRecorded, name="payment-recorded")
bookings.event(BookingFullyPaid, name="booking-fully-paid")
bookings.event(BookingOverpaid, name="booking-overpaid")
bookings.event(BookingCancelled, name="booking-cancelled")


@bookings.projector(Booking, RoomBooked)
def _booked(row: Booking, event: RoomBooked) -> None:
    row.guest_id, row.room_id, row.check_in, row.check_out = (
        event.guest_id,
        event.room_id,
        event.check_in,
        event.check_out,
    )
    row.price, row.currency, row.outstanding = event.price, event.currency, event.price


@bookings.projector(Booking, PaymentRecorded)
def _payment(row: Booking, event: PaymentRecorded) -> None:
    row.paid += event.amount
    row.outstanding = event.outstanding


@bookings.projector(Booking, BookingFullyPaid)
def _fully_paid(row: Booking, event: BookingFullyPaid) -> None:
    row.status = "paid"


@bookings.projector(Booking, BookingOverpaid)
def _overpaid(row: Booking, event: BookingOverpaid) -> None:
    row.overpaid = event.overpaid


@bookings.projector(Booking, BookingCancelled)
def _cancelled(row: Booking, event: BookingCancelled) -> None:
    row.status = "cancelled"


def _my_row(tenant_id: uuid.UUID, booking: Booking) -> dict[str, Any]:
    return {
        "booking_id": booking.id,
        "tenant_id": tenant_id,
        "guest_id": booking.guest_id,
        "room_id": booking.room_id,
        "check_in": booking.check_in,
        "check_out": booking.check_out,
        "price": booking.price,
        "outstanding": booking.outstanding,
        "status": booking.status,
    }


def _room_row(tenant_id: uuid.UUID, booking: Booking) -> dict[str, Any]:
    return {
        "booking_id": booking.id,
        "tenant_id": tenant_id,
        "room_id": booking.room_id,
        "check_in": booking.check_in,
        "check_out": booking.check_out,
        "status": booking.status,
    }


def _new_booking(booking_id: uuid.UUID) -> Booking:
    """An empty row under the id the creation event names; the projector fills it."""
    row = Booking()
    row.id = booking_id
    return row


book_room = bookings.write_handler(
    "room:book",
    bookings.pipeline(BookRoom)
    .guard(  # a past date (or one near the calendar's end) would also have no night to release it
        lambda c: hotel_today(c.now) <= c.payload.check_in <= hotel_today(c.now) + HORIZON,
        otherwise=lambda c: fail("unprocessable", "check-in must be from today to two years ahead"),
    )
    .unsafe_projection_upsert(
        RoomLock,
        on=["tenant_id", "room_id"],
        row=lambda c: {"tenant_id": c.tenant_id, "room_id": c.payload.room_id, "last_booked_at": c.now},
    )
    .find_one(
        "taken",  # a night of the stay that another live booking of the room holds
        lambda c: select(RoomBooking).where(
            RoomBooking.tenant_id == c.tenant_id,
            RoomBooking.room_id == c.payload.room_id,
            RoomBooking.status != "cancelled",
            RoomBooking.check_in < c.payload.check_out,
            RoomBooking.check_out > c.payload.check_in,
        ),
    )
    .guard(
        lambda c: c.steps["taken"] is None,
        otherwise=lambda c: fail("unprocessable", f"room {c.payload.room_id} is not available for those nights"),
    )
    .compute("id", lambda c: uuid.uuid4())
    .create(
        "booking",
        Booking,
        data=lambda c: _new_booking(c.steps["id"]),
        event=lambda c: RoomBooked(
            c.steps["id"],
            c.user.id,
            c.payload.room_id,
            c.payload.check_in,
            c.payload.check_out,
            c.payload.price,
            c.payload.currency,
            c.now,
        ),
    )
    .unsafe_projection_upsert(
        MyBooking, on=["booking_id"], row=lambda c: _my_row(c.tenant_id, c.steps["booking"].entity)
    )
    .unsafe_projection_upsert(
        RoomBooking, on=["booking_id"], row=lambda c: _room_row(c.tenant_id, c.steps["booking"].entity)
    )
    .return_(lambda c: ok(c.steps["id"])),
)


record_payment = bookings.write_handler(
    "booking:record-payment",
    bookings.pipeline(RecordPayment)
    .get_one(  # locked: a payment and the nightly release of the booking decide one at a time
        "booking", lambda c: select(Booking).where(Booking.id == c.payload.booking_id).with_for_update()
    )
    .guard(
        lambda c: c.steps["booking"].status != "cancelled",
        otherwise=lambda c: fail("unprocessable", "the booking is cancelled"),
    )
    .guard(
        lambda c: c.steps["booking"].currency == c.payload.currency,
        otherwise=lambda c: fail("unprocessable", f"the booking is paid in {c.steps['booking'].currency}"),
    )
    .find_one(
        "seen",
        lambda c: select(PaymentSeen).where(
            PaymentSeen.tenant_id == c.tenant_id, PaymentSeen.payment_id == c.payload.payment_id
        ),
    )
    .guard(
        lambda c: (seen := c.steps["seen"]) is None or seen.booking_id == c.payload.booking_id,
        otherwise=lambda c: fail("unprocessable", "that payment id is recorded for another booking"),
    )
    .branch(
        name="new",
        when=lambda c: c.steps["seen"] is None,
        on_true=lambda b: (
            b.compute("outstanding", lambda c: c.steps["booking"].outstanding - c.payload.amount)
            .append_event(
                Booking,
                id=lambda c: c.payload.booking_id,
                event=lambda c: PaymentRecorded(
                    c.payload.booking_id,
                    c.payload.payment_id,
                    c.payload.amount,
                    c.steps["outstanding"],
                    c.payload.paid_by,
                    c.now,
                ),
            )
            .unsafe_projection_upsert(
                PaymentSeen,
                on=["tenant_id", "payment_id"],
                row=lambda c: {
                    "tenant_id": c.tenant_id,
                    "payment_id": c.payload.payment_id,
                    "booking_id": c.payload.booking_id,
                    "amount": c.payload.amount,
                },
            )
            .branch(
                name="settled",
                when=lambda c: c.steps["outstanding"] <= 0 and c.steps["booking"].status == "booked",
                on_true=lambda s: s.append_event(
                    Booking,
                    id=lambda c: c.payload.booking_id,
                    event=lambda c: BookingFullyPaid(c.payload.booking_id, c.now),
                ),
            )
            .branch(
                name="over",
                when=lambda c: c.steps["outstanding"] < 0,
                on_true=lambda o: o.append_event(
                    Booking,
                    id=lambda c: c.payload.booking_id,
                    event=lambda c: BookingOverpaid(c.payload.booking_id, -c.steps["outstanding"]),
                ),
            )
            .unsafe_projection_upsert(
                MyBooking, on=["booking_id"], row=lambda c: _my_row(c.tenant_id, c.steps["booking"])
            )
            .unsafe_projection_upsert(
                RoomBooking, on=["booking_id"], row=lambda c: _room_row(c.tenant_id, c.steps["booking"])
            )
            .send_webhook(
                url=lambda c: notify_url("/payments"),
                body=lambda c: {
                    "booking_id": str(c.payload.booking_id),
                    "payment_id": c.payload.payment_id,
                    "amount": str(c.payload.amount),
                    "currency": c.payload.currency,
                    "outstanding": str(c.steps["booking"].outstanding),
                    "status": c.steps["booking"].status,
                },
                retry=DELIVERY,
            )
        ),
    )
    .return_(
        lambda c: ok(
            PaymentState(
                c.payload.booking_id,
                c.steps["booking"].status,
                c.steps["booking"].paid,
                c.steps["booking"].outstanding,
                c.steps["booking"].overpaid,
                c.steps["seen"] is None,
            )
        )
    ),
)


cancel_booking = bookings.write_handler(
    "booking:cancel",
    bookings.pipeline(CancelBooking)
    .get_one("booking", lambda c: select(Booking).where(Booking.id == c.payload.booking_id).with_for_update())
    .guard(
        lambda c: c.steps["booking"].status != "cancelled",
        otherwise=lambda c: fail("unprocessable", "the booking is cancelled already"),
    )
    .append_event(
        Booking,
        id=lambda c: c.payload.booking_id,
        event=lambda c: BookingCancelled(c.payload.booking_id, c.payload.reason, c.now),
    )
    .unsafe_projection_upsert(MyBooking, on=["booking_id"], row=lambda c: _my_row(c.tenant_id, c.steps["booking"]))
    .unsafe_projection_upsert(RoomBooking, on=["booking_id"], row=lambda c: _room_row(c.tenant_id, c.steps["booking"]))
    .return_(lambda c: ok(c.steps["booking"].paid)),
)


my_bookings = bookings.query_handler(
    "booking:mine",
    bookings.query_pipeline(MyBookings)
    .find_many(
        "rows",
        lambda c: (
            select(MyBooking)
            .where(MyBooking.tenant_id == c.tenant_id, MyBooking.guest_id == c.user.id)
            .order_by(MyBooking.check_in, MyBooking.booking_id)
        ),
    )
    .return_(
        lambda c: ok(
            [
                BookingView(r.booking_id, r.room_id, r.check_in, r.check_out, r.price, r.outstanding, r.status)
                for r in c.steps["rows"]
            ]
        )
    ),
)

bookings_by_room = bookings.query_handler(
    "room:bookings",
    bookings.query_pipeline(RoomQuery)
    .find_many(
        "rows",
        lambda c: (
            select(RoomBooking)
            .where(RoomBooking.tenant_id == c.tenant_id, RoomBooking.room_id == c.payload.room_id)
            .order_by(RoomBooking.check_in, RoomBooking.booking_id)
        ),
    )
    .return_(lambda c: ok([RoomNights(r.booking_id, r.check_in, r.check_out, r.status) for r in c.steps["rows"]])),
)


release_unpaid = bookings.workflow(
    "release-unpaid",
    trigger=on_event(RoomBooked),  # one run per booking, in the booking's tenant
    pipeline=bookings.workflow_pipeline(RoomBooked)
    .wait_for_event(  # a booking cancelled before that night ends its run then
        "cancelled",
        BookingCancelled,
        key=lambda c: c.payload.booking_id,
        event_key=lambda e: e.booking_id,
        timeout=lambda c: release_time(c.payload.check_in),
    )
    .get_one("booking", lambda c: select(Booking).where(Booking.id == c.payload.booking_id).with_for_update())
    .branch(
        name="unpaid",
        # Booked after that night (a last-minute booking) it is not released.
        when=lambda c: c.steps["booking"].status == "booked" and c.payload.booked_at < release_time(c.payload.check_in),
        on_true=lambda b: (
            b.append_event(
                Booking,
                id=lambda c: c.payload.booking_id,
                event=lambda c: BookingCancelled(c.payload.booking_id, "not paid the night before check-in", c.now),
            )
            .unsafe_projection_upsert(
                MyBooking, on=["booking_id"], row=lambda c: _my_row(c.tenant_id, c.steps["booking"])
            )
            .unsafe_projection_upsert(
                RoomBooking, on=["booking_id"], row=lambda c: _room_row(c.tenant_id, c.steps["booking"])
            )
        ),
    )
    .return_(lambda c: ok(c.steps["booking"].status)),
)


def _tomorrow(tick: datetime) -> date:
    """The hotel's date after the tick's: the check-in date a tick releases."""
    return hotel_today(tick) + timedelta(days=1)


nightly_release_report = bookings.workflow(
    "nightly-release-report",
    trigger=cron(f"{RELEASE_AT.minute} {RELEASE_AT.hour} * * *", timezone=HOTEL_ZONE),
    pipeline=bookings.workflow_pipeline(CronTick)
    .compute("arriving", lambda c: _tomorrow(c.payload.scheduled_at))
    .find_many(
        "due",  # every tenant's (a cron run has none): the front desk serves the whole hotel
        lambda c: (
            select(Booking)
            .where(
                Booking.check_in == c.steps["arriving"],
                Booking.outstanding > 0,  # unpaid: still booked, or released by its run already
                Booking.created_at < release_time(c.steps["arriving"]),  # not booked at the last minute
            )
            .order_by(Booking.room_id, Booking.id)
            .execution_options(kumiko_all_tenants=True)
        ),
    )
    .for_each(
        "unpaid",
        over=lambda c: [(b.id, b.room_id, b.outstanding) for b in c.steps["due"]],
        do=lambda d: d.send_webhook(
            url=lambda c: notify_url("/front-desk/released"),
            body=lambda c: {
                "booking_id": str(c.scope["unpaid"][0]),
                "room_id": c.scope["unpaid"][1],
                "outstanding": str(c.scope["unpaid"][2]),
                "arriving": c.steps["arriving"].isoformat(),
            },
            retry=DELIVERY,
        ),
    )
    .return_(lambda c: ok(len(c.steps["due"]))),
)
