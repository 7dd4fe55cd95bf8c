"""Restate's ticket reservation (and DBOS's widget store), ported: a buyer holds numbered
seats of a show for a while, pays for them, and the hold becomes a sale; a hold nobody pays
for in time, or one the buyer cancels, gives its seats back.

How the pieces map:

- ``Show`` is an aggregate: its row (the inline projection of its events) counts the seats
  held and sold, which is the availability read model (``show:availability``).  ``Seat`` (a
  projection table) has a row per seat that is held or sold, so a seat's row says who has
  it; a free seat has none.
- ``reservation:hold`` reads the show *locked*, refuses a seat that is taken or a buyer who
  would hold more than ``MAX_HELD`` seats of the show, creates the ``Reservation`` and
  appends ``SeatsHeld`` to the show, in one transaction.  Two buyers racing for the last
  seat are serialized on the show's row (PostgreSQL's row lock, SQLite's one writer), and
  the append after the read is refused if the show moved on anyway: a seat is never held
  twice, so never sold twice.
- Each hold's run (started by its ``ReservationHeld``, Restate's delayed ``expireTicket``
  call) waits for the buyer's answer until the hold expires, then reads the reservation
  locked and acts on what it finds, not on the event it was handed: paid, it sells the
  seats, mails the ticket and tells the box office (a webhook); still only held (the
  timeout), or cancelled, it releases them (the compensation).  Deciding from the row means
  a payment that commits while the timeout is being taken is either read there or comes
  after and is refused.
- ``reservation:pay`` is the payment provider's callback: refused from the hold's expiry
  on, so an ``Ok`` always ends in a sale; the same payment again answers as the first (and
  the provider may also send an ``idempotency_key``).  ``reservation:cancel`` is the
  buyer's: a paid reservation is not cancelled (that is a refund, another process).
- Another tenant's show or reservation is the same ``not_found`` as an id that is none.
- The buyer's address is checked at the hold by ``mail_address``, the rule the run's mail
  step checks by: an address that step refuses would fail the run when the hold ends, its
  seats then held for good.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import attrs
from sqlalchemy import DateTime, Numeric, Select, String, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from kumiko_typed import Ctx, Entity, Feature, RetryPolicy, fail, mail_address, ok, on_event

#: How long a hold lasts before its seats go back on sale.
HOLD_FOR = timedelta(minutes=15)
#: How many seats of one show a buyer may hold (not yet bought) at once.
MAX_HELD = 6
#: The most seats a show may have.
MAX_CAPACITY = 5000
#: The largest price of a seat (the columns hold 10 digits, 2 after the point).
MAX_PRICE = Decimal("100000.00")
#: How the box office's notification is retried.
DELIVERY = RetryPolicy(times=5, backoff="exponential", base_delay=timedelta(seconds=30))


def box_office_url(path: str) -> str:
    return os.environ.get("TICKETS_BOX_OFFICE_URL", "https://box-office.example") + path


def _price(_instance: object, attribute: attrs.Attribute[Decimal], value: Decimal) -> None:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int) or exponent < -2 or not Decimal(0) <= value <= MAX_PRICE:
        raise ValueError(f"must be 0 to {MAX_PRICE}, in whole cents")


def _seats(_instance: object, attribute: attrs.Attribute[list[int]], value: list[int]) -> None:
    if not 1 <= len(value) <= MAX_HELD:
        raise ValueError(f"must name 1 to {MAX_HELD} seats")
    if any(not 1 <= seat <= MAX_CAPACITY for seat in value):
        raise ValueError(f"seats are numbered 1 to {MAX_CAPACITY}")
    if len(set(value)) != len(value):
        raise ValueError("must name each seat once")


def _text(longest: int) -> Callable[[Any, Any, str], None]:
    return attrs.validators.and_(attrs.validators.min_len(1), attrs.validators.max_len(longest))


class Show(Entity):
    __tablename__ = "tickets_show"
    title: Mapped[str] = mapped_column(String(200))
    capacity: Mapped[int] = mapped_column()
    price: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    held: Mapped[int] = mapped_column(default=0)
    sold: Mapped[int] = mapped_column(default=0)


class Reservation(Entity):
    __tablename__ = "tickets_reservation"
    show_id: Mapped[uuid.UUID] = mapped_column(index=True)
    buyer_id: Mapped[uuid.UUID] = mapped_column(index=True)
    email: Mapped[str] = mapped_column(String(254))
    seats: Mapped[int] = mapped_column()
    amount: Mapped[Decimal] = mapped_column(Numeric(12, 2))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    #: held | paid | cancelling | confirmed | expired | cancelled
    status: Mapped[str] = mapped_column(String(20), default="held")
    payment_id: Mapped[str | None] = mapped_column(String(100), default=None)


class TicketReadModels(MappedAsDataclass, DeclarativeBase):
    """Tables that are no aggregate's."""


class Seat(TicketReadModels):
    """A seat that is held or sold (a free seat has no row)."""

    __tablename__ = "tickets_seats"
    show_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    number: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(index=True)
    reservation_id: Mapped[uuid.UUID] = mapped_column(index=True)
    #: held | sold
    status: Mapped[str] = mapped_column(String(10))


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class ShowScheduled:
    show_id: uuid.UUID
    title: str
    capacity: int
    price: Decimal


@attrs.frozen
class SeatsHeld:
    show_id: uuid.UUID
    reservation_id: uuid.UUID
    seats: list[int]


@attrs.frozen
class SeatsSold:
    show_id: uuid.UUID
    reservation_id: uuid.UUID
    seats: list[int]


@attrs.frozen
class SeatsReleased:
    show_id: uuid.UUID
    reservation_id: uuid.UUID
    seats: list[int]


@attrs.frozen
class ReservationHeld:
    """Starts the hold's run."""

    reservation_id: uuid.UUID
    show_id: uuid.UUID
    buyer_id: uuid.UUID
    email: str
    seats: list[int]
    amount: Decimal
    expires_at: datetime


@attrs.frozen
class BuyerAnswered:
    """What the hold's run waits for: paid (with the payment's id) or cancelled."""

    reservation_id: uuid.UUID
    paid: bool
    payment_id: str | None


@attrs.frozen
class ReservationConfirmed:
    reservation_id: uuid.UUID


@attrs.frozen
class ReservationReleased:
    reservation_id: uuid.UUID
    #: expired | cancelled
    reason: str


# --- payloads and answers ------------------------------------------------------------------


@attrs.frozen
class ScheduleShow:
    title: str = attrs.field(validator=_text(200))
    capacity: int = attrs.field(validator=[attrs.validators.ge(1), attrs.validators.le(MAX_CAPACITY)])
    price: Decimal = attrs.field(validator=_price)


@attrs.frozen
class HoldSeats:
    show_id: uuid.UUID
    email: str = attrs.field(validator=attrs.validators.and_(attrs.validators.max_len(254), mail_address))
    seats: list[int] = attrs.field(validator=_seats)


@attrs.frozen
class Pay:
    reservation_id: uuid.UUID
    payment_id: str = attrs.field(validator=_text(100))
    amount: Decimal


@attrs.frozen
class Cancel:
    reservation_id: uuid.UUID


@attrs.frozen
class ShowId:
    show_id: uuid.UUID


@attrs.frozen
class ReservationId:
    reservation_id: uuid.UUID


@attrs.frozen
class Held:
    reservation_id: uuid.UUID
    amount: Decimal
    expires_at: datetime


@attrs.frozen
class Availability:
    show_id: uuid.UUID
    title: str
    capacity: int
    available: int
    held: int
    sold: int
    #: The seats of the show that are neither held nor sold, in order.
    free: list[int]


@attrs.frozen
class ReservationView:
    reservation_id: uuid.UUID
    show_id: uuid.UUID
    status: str
    seats: list[int]
    amount: Decimal
    expires_at: datetime


# --- the feature ---------------------------------------------------------------------------

# Held is stored as the answer of a hold sent with an idempotency key.
tickets = Feature("tickets", requires=["mail.send", "webhook.send"], projections=[Seat], value_types=[Held])
tickets.entity(Show)
tickets.entity(Reservation)
tickets.event(ShowScheduled, name="show-scheduled")
tickets.event(SeatsHeld, name="seats-held")
tickets.event(SeatsSold, name="seats-sold")
tickets.event(SeatsReleased, name="seats-released")
tickets.event(ReservationHeld, name="reservation-held")
tickets.event(BuyerAnswered, name="buyer-answered")
tickets.event(ReservationConfirmed, name="reservation-confirmed")
tickets.event(ReservationReleased, name="reservation-released")


# The creation events' projectors set every column the row has: a replay
# (``rebuild_projection``) builds the row from the events alone.
@tickets.projector(Show, ShowScheduled)
def _scheduled(row: Show, event: ShowScheduled) -> None:
    row.title, row.capacity, row.price = event.title, event.capacity, event.price


@tickets.projector(Reservation, ReservationHeld)
def _held(row: Reservation, event: ReservationHeld) -> None:
    row.show_id, row.buyer_id, row.email = event.show_id, event.buyer_id, event.email
    row.seats, row.amount, row.expires_at = len(event.seats), event.amount, event.expires_at


@tickets.projector(Show, SeatsHeld)
def _seats_held(row: Show, event: SeatsHeld) -> None:
    row.held += len(event.seats)


@tickets.projector(Show, SeatsSold)
def _seats_sold(row: Show, event: SeatsSold) -> None:
    row.held -= len(event.seats)
    row.sold += len(event.seats)


@tickets.projector(Show, SeatsReleased)
def _seats_released(row: Show, event: SeatsReleased) -> None:
    row.held -= len(event.seats)


@tickets.projector(Reservation, BuyerAnswered)
def _answered(row: Reservation, event: BuyerAnswered) -> None:
    row.status = "paid" if event.paid else "cancelling"
    row.payment_id = event.payment_id


@tickets.projector(Reservation, ReservationConfirmed)
def _confirmed(row: Reservation, event: ReservationConfirmed) -> None:
    row.status = "confirmed"


@tickets.projector(Reservation, ReservationReleased)
def _released(row: Reservation, event: ReservationReleased) -> None:
    row.status = event.reason


def _new_show(show_id: uuid.UUID) -> Show:
    """An empty row under the id the creation event names; its projector fills it."""
    row = Show(title="", capacity=0, price=Decimal(0))
    row.id = show_id
    return row


def _new_reservation(held: ReservationHeld) -> Reservation:
    """The row under the id the creation event names (its projector sets the same columns)."""
    row = Reservation(
        show_id=held.show_id,
        buyer_id=held.buyer_id,
        email=held.email,
        seats=len(held.seats),
        amount=held.amount,
        expires_at=held.expires_at,
    )
    row.id = held.reservation_id
    return row


def _locked_show(show_id: uuid.UUID) -> Select[Show]:
    # Locked: the holds of one show decide one after the other, each on the seats the last left.
    return select(Show).where(Show.id == show_id).with_for_update()


def _locked_reservation(reservation_id: uuid.UUID) -> Select[Reservation]:
    # Locked: a payment, a cancel and the run's decision on one reservation come one after the other.
    return select(Reservation).where(Reservation.id == reservation_id).with_for_update()


def _holding(c: Ctx[Any, Any, Any], show_id: uuid.UUID) -> int:
    """How many seats of the show the buyer holds now (held or paid, not yet sold)."""
    held = c.db.scalar(
        select(func.coalesce(func.sum(Reservation.seats), 0)).where(
            Reservation.show_id == show_id,
            Reservation.buyer_id == c.user.id,
            Reservation.status.in_(["held", "paid"]),
        )
    )
    return int(held or 0)


def _seat_numbers(c: Ctx[Any, Any, Any], reservation_id: uuid.UUID) -> list[int]:
    rows = c.db.scalars(
        select(Seat.number)
        .where(Seat.tenant_id == c.tenant_id, Seat.reservation_id == reservation_id)
        .order_by(Seat.number)
    )
    return list(rows)


def _free(capacity: int, taken: Sequence[Seat]) -> list[int]:
    gone = {seat.number for seat in taken}
    return [number for number in range(1, capacity + 1) if number not in gone]


schedule_show = tickets.write_handler(
    "show:schedule",
    tickets.pipeline(ScheduleShow)
    .compute("id", lambda c: uuid.uuid4())
    .create(
        "show",
        Show,
        data=lambda c: _new_show(c.steps["id"]),
        event=lambda c: ShowScheduled(c.steps["id"], c.payload.title, c.payload.capacity, c.payload.price),
    )
    .return_(lambda c: ok(c.steps["id"])),
)

hold_seats = tickets.write_handler(
    "reservation:hold",
    tickets.pipeline(HoldSeats)
    .get_one("show", lambda c: _locked_show(c.payload.show_id))
    .guard(
        lambda c: max(c.payload.seats) <= c.steps["show"].capacity,
        otherwise=lambda c: fail("unprocessable", f"the show has seats 1 to {c.steps['show'].capacity}"),
    )
    .find_many(
        "taken",
        lambda c: (
            select(Seat)
            .where(
                Seat.tenant_id == c.tenant_id,
                Seat.show_id == c.payload.show_id,
                Seat.number.in_(c.payload.seats),
            )
            .order_by(Seat.number)
        ),
    )
    .guard(
        lambda c: not c.steps["taken"],
        otherwise=lambda c: fail("unprocessable", "seats taken: " + ", ".join(str(s.number) for s in c.steps["taken"])),
    )
    .compute("holding", lambda c: _holding(c, c.payload.show_id))
    .guard(
        lambda c: c.steps["holding"] + len(c.payload.seats) <= MAX_HELD,
        otherwise=lambda c: fail(
            "unprocessable",
            f"a buyer may hold at most {MAX_HELD} seats of a show; you hold {c.steps['holding']}",
        ),
    )
    .compute(
        "held",
        lambda c: ReservationHeld(
            uuid.uuid4(),
            c.payload.show_id,
            c.user.id,
            c.payload.email,
            sorted(c.payload.seats),
            c.steps["show"].price * len(c.payload.seats),
            c.now + HOLD_FOR,
        ),
    )
    .create(
        "reservation",
        Reservation,
        data=lambda c: _new_reservation(c.steps["held"]),
        event=lambda c: c.steps["held"],
    )
    .append_event(
        Show,
        id=lambda c: c.payload.show_id,
        event=lambda c: SeatsHeld(c.payload.show_id, c.steps["held"].reservation_id, c.steps["held"].seats),
    )
    .for_each(
        "seat",
        over=lambda c: c.payload.seats,
        do=lambda b: b.unsafe_projection_upsert(
            Seat,
            on=["show_id", "number"],
            row=lambda c: {
                "show_id": c.payload.show_id,
                "number": c.scope["seat"],
                "tenant_id": c.tenant_id,
                "reservation_id": c.steps["held"].reservation_id,
                "status": "held",
            },
        ),
    )
    .return_(lambda c: ok(Held(c.steps["held"].reservation_id, c.steps["held"].amount, c.steps["held"].expires_at))),
)

# The payment provider's callback.  The same payment again answers as the first did.
pay = tickets.write_handler(
    "reservation:pay",
    tickets.pipeline(Pay)
    .get_one("reservation", lambda c: _locked_reservation(c.payload.reservation_id))
    .compute("again", lambda c: c.steps["reservation"].payment_id == c.payload.payment_id)
    .guard(
        lambda c: c.steps["again"] or c.steps["reservation"].status == "held",
        otherwise=lambda c: fail("unprocessable", f"the reservation is {c.steps['reservation'].status}"),
    )
    .guard(
        lambda c: c.steps["again"] or c.now < c.steps["reservation"].expires_at,
        otherwise=lambda c: fail("unprocessable", "the hold has expired"),
    )
    .guard(
        lambda c: c.payload.amount == c.steps["reservation"].amount,
        otherwise=lambda c: fail("unprocessable", f"the reservation costs {c.steps['reservation'].amount}"),
    )
    .branch(
        name="first",
        when=lambda c: not c.steps["again"],
        on_true=lambda b: b.append_event(
            Reservation,
            id=lambda c: c.payload.reservation_id,
            event=lambda c: BuyerAnswered(c.payload.reservation_id, True, c.payload.payment_id),
        ),
    )
    .return_(lambda c: ok(c.payload.reservation_id)),
)

# The buyer's cancel.  Cancelling again (or a hold that ran out) answers as the first did.
cancel = tickets.write_handler(
    "reservation:cancel",
    tickets.pipeline(Cancel)
    .get_one("reservation", lambda c: _locked_reservation(c.payload.reservation_id))
    .guard(
        lambda c: c.steps["reservation"].status in ("held", "cancelling", "cancelled", "expired"),
        otherwise=lambda c: fail(
            "unprocessable", f"the reservation is {c.steps['reservation'].status}: ask for a refund instead"
        ),
    )
    .branch(
        name="first",
        when=lambda c: c.steps["reservation"].status == "held",
        on_true=lambda b: b.append_event(
            Reservation,
            id=lambda c: c.payload.reservation_id,
            event=lambda c: BuyerAnswered(c.payload.reservation_id, False, None),
        ),
    )
    .return_(lambda c: ok(c.payload.reservation_id)),
)

availability = tickets.query_handler(
    "show:availability",
    tickets.query_pipeline(ShowId)
    .get_one("show", lambda c: select(Show).where(Show.id == c.payload.show_id))
    .find_many(
        "taken",
        lambda c: select(Seat).where(Seat.tenant_id == c.tenant_id, Seat.show_id == c.payload.show_id),
    )
    .return_(
        lambda c: ok(
            Availability(
                c.payload.show_id,
                c.steps["show"].title,
                c.steps["show"].capacity,
                c.steps["show"].capacity - c.steps["show"].held - c.steps["show"].sold,
                c.steps["show"].held,
                c.steps["show"].sold,
                _free(c.steps["show"].capacity, c.steps["taken"]),
            )
        )
    ),
)

reservation_status = tickets.query_handler(
    "reservation:status",
    tickets.query_pipeline(ReservationId)
    .get_one("reservation", lambda c: select(Reservation).where(Reservation.id == c.payload.reservation_id))
    .compute("seats", lambda c: _seat_numbers(c, c.payload.reservation_id))
    .return_(
        lambda c: ok(
            ReservationView(
                c.payload.reservation_id,
                c.steps["reservation"].show_id,
                c.steps["reservation"].status,
                c.steps["seats"],
                c.steps["reservation"].amount,
                c.steps["reservation"].expires_at,
            )
        )
    ),
)


def _outcome(status: str) -> str:
    """What the run does with a reservation it finds in ``status`` once it stops waiting."""
    return {"paid": "confirmed", "held": "expired", "cancelling": "cancelled"}.get(status, "none")


hold = tickets.workflow(
    "hold",
    trigger=on_event(ReservationHeld),
    pipeline=tickets.workflow_pipeline(ReservationHeld)
    .wait_for_event(
        "answer",
        BuyerAnswered,
        key=lambda c: c.payload.reservation_id,
        event_key=lambda e: e.reservation_id,
        timeout=lambda c: c.payload.expires_at,
    )
    .get_one("reservation", lambda c: _locked_reservation(c.payload.reservation_id))
    .compute("outcome", lambda c: _outcome(c.steps["reservation"].status))
    .branch(
        name="sell",
        when=lambda c: c.steps["outcome"] == "confirmed",
        on_true=lambda b: (
            b.append_event(
                Reservation,
                id=lambda c: c.payload.reservation_id,
                event=lambda c: ReservationConfirmed(c.payload.reservation_id),
            )
            .append_event(
                Show,
                id=lambda c: c.payload.show_id,
                event=lambda c: SeatsSold(c.payload.show_id, c.payload.reservation_id, c.payload.seats),
            )
            .for_each(
                "seat",
                over=lambda c: c.payload.seats,
                do=lambda s: s.unsafe_projection_upsert(
                    Seat,
                    on=["show_id", "number"],
                    row=lambda c: {
                        "show_id": c.payload.show_id,
                        "number": c.scope["seat"],
                        "tenant_id": c.tenant_id,
                        "reservation_id": c.payload.reservation_id,
                        "status": "sold",
                    },
                ),
            )
            .send_mail(
                to=lambda c: c.payload.email,
                subject="Your tickets",
                body=lambda c: (
                    f"Reservation {c.payload.reservation_id}: seats "
                    + ", ".join(map(str, c.payload.seats))
                    + f", {c.payload.amount} paid."
                ),
            )
            .send_webhook(
                url=lambda c: box_office_url("/sold"),
                body=lambda c: {
                    "reservation_id": str(c.payload.reservation_id),
                    "show_id": str(c.payload.show_id),
                    "seats": c.payload.seats,
                },
                retry=DELIVERY,
            )
        ),
    )
    .branch(
        name="release",
        when=lambda c: c.steps["outcome"] in ("expired", "cancelled"),
        on_true=lambda b: (
            b.append_event(
                Reservation,
                id=lambda c: c.payload.reservation_id,
                event=lambda c: ReservationReleased(c.payload.reservation_id, c.steps["outcome"]),
            )
            .append_event(
                Show,
                id=lambda c: c.payload.show_id,
                event=lambda c: SeatsReleased(c.payload.show_id, c.payload.reservation_id, c.payload.seats),
            )
            .unsafe_projection_delete(
                Seat,
                where=lambda c: (Seat.tenant_id == c.tenant_id) & (Seat.reservation_id == c.payload.reservation_id),
            )
            .send_mail(
                to=lambda c: c.payload.email,
                subject=lambda c: f"Your reservation {c.steps['outcome']}",
                body=lambda c: (
                    f"Reservation {c.payload.reservation_id} {c.steps['outcome']}: its seats are on sale again."
                ),
            )
        ),
    )
    .return_(lambda c: ok(c.steps["outcome"])),
)
