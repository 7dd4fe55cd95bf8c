"""The lending library of Axon's, Marten's and EventStore's samples, ported: members borrow
copies of titles and bring them back, late ones with a fine; a member may reserve a title
none of whose copies is on the shelf, and a returned copy is held for the first member in
the title's queue for three days, then offered to the next.

How the pieces map:

- ``Member``, ``Title``, ``Copy`` and ``Reservation`` are aggregates; their rows (the inline
  projections of their events) are the read models: ``Title`` counts its copies on the
  shelf, on loan and on hold (``title:availability``), ``Member`` its loans and unpaid fines
  (``member:loans`` lists the copies it has).
- ``loan:borrow`` is by title: it reads the member and the title *locked*, refuses a member
  blocked by unpaid fines or at their loan limit, and lends the copy held for the member's
  reservation, else one on the shelf.  Two members racing for the last copy are serialized on
  the title's row: the loser reads the shelf empty.  Each loan tells the catalogue (a
  webhook through the outbox).
- ``loan:return`` reads the copy locked, refuses one that is not on loan (so the same return
  twice fines once), fines each started day late (``FINE_PER_DAY``, exact ``Decimal``; at the
  due instant itself nothing) and passes the copy on (``copy:pass-on``, called in the same
  transaction): to the first waiting reservation of its title, or back on the shelf.  A
  handler has no way to be callable only by ``call_feature``, so pass-on acts only on a copy
  just returned or one whose holder lapsed or cancelled, whoever calls it.
- Every writer of a title's copies or queue locks the title's row before a reservation's:
  two returns at once offer their copies to the first two in the queue (PostgreSQL would
  otherwise hand the second ``LIMIT 1 ... FOR UPDATE`` no row once the first offer
  committed), and a loan collecting an offer while its run times out does not deadlock.
- ``reservation:reserve`` reads the title locked and numbers the reservation after the last
  one, so the queue is in the order the reservations committed.
- An offer's run (started by ``ReservationOffered``) mails the member and waits, keyed by the
  reservation, for it to be closed (collected by a loan, or cancelled) until the hold ends;
  then it reads the reservation locked and acts on what it finds: still offered (the
  timeout) it lapses, and lapsed or cancelled the copy goes on to the next in the queue.
- A loan's run (started by ``CopyLent``) waits until two days before the due date and
  reminds the member if the copy is still out on that loan; a daily cron mails every member
  whose loan is overdue (reading every tenant's copies, changing none).
- Another tenant's member, title, copy or reservation is the same ``not_found`` as an id that
  is none.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

import attrs
from sqlalchemy import DateTime, Numeric, Select, String, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import CronTick, Ctx, Entity, Feature, RetryPolicy, cron, fail, mail_address, ok, on_event

T = TypeVar("T")

#: How long a loan lasts.
LOAN_FOR = timedelta(days=21)
#: How long before the due date the member is reminded.
REMIND_BEFORE = timedelta(days=2)
#: How long a returned copy is held for a reservation.
HOLD_FOR = timedelta(days=3)
#: The fine for each started day a copy comes back late.
FINE_PER_DAY = Decimal("0.25")
#: The most loans a member may be allowed.
MAX_LIMIT = 50
#: The largest payment of a fine (the columns hold 10 digits, 2 after the point).
MAX_AMOUNT = Decimal("10000.00")
#: How the catalogue's notification is retried.
DELIVERY = RetryPolicy(times=5, backoff="exponential", base_delay=timedelta(seconds=30))


def catalogue_url(path: str) -> str:
    return os.environ.get("LIBRARY_CATALOGUE_URL", "https://catalogue.example") + path


def _amount(_instance: object, attribute: attrs.Attribute[Decimal], value: Decimal) -> None:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int) or exponent < -2 or not Decimal("0.01") <= value <= MAX_AMOUNT:
        raise ValueError(f"must be 0.01 to {MAX_AMOUNT}, in whole cents")


def _text(longest: int) -> Callable[[Any, Any, str], None]:
    return attrs.validators.and_(attrs.validators.min_len(1), attrs.validators.max_len(longest))


class Member(Entity):
    __tablename__ = "library_member"
    name: Mapped[str] = mapped_column(String(200))
    email: Mapped[str] = mapped_column(String(254))
    loan_limit: Mapped[int] = mapped_column()
    loans: Mapped[int] = mapped_column(default=0)
    fines_due: Mapped[Decimal] = mapped_column(Numeric(10, 2), default=Decimal(0))


class Title(Entity):
    __tablename__ = "library_title"
    name: Mapped[str] = mapped_column(String(300))
    on_shelf: Mapped[int] = mapped_column(default=0)
    on_loan: Mapped[int] = mapped_column(default=0)
    on_hold: Mapped[int] = mapped_column(default=0)
    #: How many reservations were ever made: the next one's place in the queue.
    reserved: Mapped[int] = mapped_column(default=0)


class Copy(Entity):
    __tablename__ = "library_copy"
    title_id: Mapped[uuid.UUID] = mapped_column(index=True)
    #: on_shelf | on_loan | returned | on_hold
    status: Mapped[str] = mapped_column(String(10), default="on_shelf")
    loan_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    member_id: Mapped[uuid.UUID | None] = mapped_column(default=None, index=True)
    email: Mapped[str | None] = mapped_column(String(254), default=None)
    due_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    #: The reservation an ``on_hold`` copy is held for.
    reservation_id: Mapped[uuid.UUID | None] = mapped_column(default=None)


class Reservation(Entity):
    __tablename__ = "library_reservation"
    title_id: Mapped[uuid.UUID] = mapped_column(index=True)
    member_id: Mapped[uuid.UUID] = mapped_column(index=True)
    email: Mapped[str] = mapped_column(String(254))
    place: Mapped[int] = mapped_column()
    #: waiting | offered | collected | cancelled | lapsed
    status: Mapped[str] = mapped_column(String(10), default="waiting")
    copy_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    offered_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class MemberJoined:
    member_id: uuid.UUID
    name: str
    email: str
    loan_limit: int


@attrs.frozen
class LoanOpened:
    member_id: uuid.UUID
    copy_id: uuid.UUID


@attrs.frozen
class LoanClosed:
    member_id: uuid.UUID
    copy_id: uuid.UUID
    fine: Decimal


@attrs.frozen
class FinePaid:
    member_id: uuid.UUID
    amount: Decimal


@attrs.frozen
class TitleAdded:
    title_id: uuid.UUID
    name: str


@attrs.frozen
class CopyMoved:
    """A copy of the title went from one count to another (``None``: a new copy)."""

    title_id: uuid.UUID
    copy_id: uuid.UUID
    source: str | None
    target: str


@attrs.frozen
class TitleReserved:
    title_id: uuid.UUID
    reservation_id: uuid.UUID


@attrs.frozen
class CopyRegistered:
    copy_id: uuid.UUID
    title_id: uuid.UUID


@attrs.frozen
class CopyLent:
    """Starts the loan's run."""

    copy_id: uuid.UUID
    title_id: uuid.UUID
    loan_id: uuid.UUID
    member_id: uuid.UUID
    email: str
    due_at: datetime


@attrs.frozen
class CopyReturned:
    copy_id: uuid.UUID
    loan_id: uuid.UUID
    late_days: int
    fine: Decimal


@attrs.frozen
class CopyHeld:
    copy_id: uuid.UUID
    reservation_id: uuid.UUID


@attrs.frozen
class CopyShelved:
    copy_id: uuid.UUID


@attrs.frozen
class Reserved:
    reservation_id: uuid.UUID
    title_id: uuid.UUID
    member_id: uuid.UUID
    email: str
    place: int


@attrs.frozen
class ReservationOffered:
    """Starts the offer's run."""

    reservation_id: uuid.UUID
    title_id: uuid.UUID
    copy_id: uuid.UUID
    email: str
    until: datetime


@attrs.frozen
class ReservationClosed:
    """What the offer's run waits for: collected by a loan, or cancelled by the member."""

    reservation_id: uuid.UUID
    #: collected | cancelled
    reason: str


@attrs.frozen
class ReservationLapsed:
    reservation_id: uuid.UUID


# --- payloads and answers ------------------------------------------------------------------


@attrs.frozen
class Join:
    name: str = attrs.field(validator=_text(200))
    email: str = attrs.field(validator=attrs.validators.and_(attrs.validators.max_len(254), mail_address))
    loan_limit: int = attrs.field(validator=[attrs.validators.ge(1), attrs.validators.le(MAX_LIMIT)])


@attrs.frozen
class AddTitle:
    name: str = attrs.field(validator=_text(300))
    copies: int = attrs.field(validator=[attrs.validators.ge(1), attrs.validators.le(100)])


@attrs.frozen
class Borrow:
    member_id: uuid.UUID
    title_id: uuid.UUID


@attrs.frozen
class Return:
    copy_id: uuid.UUID


@attrs.frozen
class PassOn:
    """Gives a copy that came back (``returned``) or whose hold ended (``on_hold``, its
    reservation lapsed or cancelled) to the title's next waiting reservation, else puts it
    on the shelf."""

    copy_id: uuid.UUID
    source: str = attrs.field(validator=attrs.validators.in_(("returned", "on_hold")))


@attrs.frozen
class PayFine:
    member_id: uuid.UUID
    amount: Decimal = attrs.field(validator=_amount)


@attrs.frozen
class Reserve:
    member_id: uuid.UUID
    title_id: uuid.UUID


@attrs.frozen
class CancelReservation:
    reservation_id: uuid.UUID


@attrs.frozen
class TitleId:
    title_id: uuid.UUID


@attrs.frozen
class MemberId:
    member_id: uuid.UUID


@attrs.frozen
class Lent:
    copy_id: uuid.UUID
    loan_id: uuid.UUID
    due_at: datetime


@attrs.frozen
class Returned:
    copy_id: uuid.UUID
    late_days: int
    fine: Decimal


@attrs.frozen
class Availability:
    title_id: uuid.UUID
    name: str
    on_shelf: int
    on_loan: int
    on_hold: int
    #: The reservations waiting, first in the queue first.
    queue: list[uuid.UUID]


@attrs.frozen
class Loans:
    member_id: uuid.UUID
    loans: int
    fines_due: Decimal
    #: The copies the member has, soonest due first.
    copies: list[uuid.UUID]


# --- the feature ---------------------------------------------------------------------------

# Lent and Returned are stored as the answers of a loan or return sent with an idempotency key.
library = Feature("library", requires=["mail.send", "webhook.send", "call_feature"], value_types=[Lent, Returned])
library.entity(Member)
library.entity(Title)
library.entity(Copy)
library.entity(Reservation)
library.event(MemberJoined, name="member-joined")
library.event(LoanOpened, name="loan-opened")
library.event(LoanClosed, name="loan-closed")
library.event(FinePaid, name="fine-paid")
library.event(TitleAdded, name="title-added")
library.event(CopyMoved, name="copy-moved")
library.event(TitleReserved, name="title-reserved")
library.event(CopyRegistered, name="copy-registered")
library.event(CopyLent, name="copy-lent")
library.event(CopyReturned, name="copy-returned")
library.event(CopyHeld, name="copy-held")
library.event(CopyShelved, name="copy-shelved")
library.event(Reserved, name="reserved")
library.event(ReservationOffered, name="reservation-offered")
library.event(ReservationClosed, name="reservation-closed")
library.event(ReservationLapsed, name="reservation-lapsed")


# The creation events' projectors set every column the row has: a replay
# (``rebuild_projection``) builds the row from the events alone.
@library.projector(Member, MemberJoined)
def _joined(row: Member, event: MemberJoined) -> None:
    row.name, row.email, row.loan_limit = event.name, event.email, event.loan_limit


@library.projector(Member, LoanOpened)
def _loan_opened(row: Member, event: LoanOpened) -> None:
    row.loans += 1


@library.projector(Member, LoanClosed)
def _loan_closed(row: Member, event: LoanClosed) -> None:
    row.loans -= 1
    row.fines_due += event.fine


@library.projector(Member, FinePaid)
def _fine_paid(row: Member, event: FinePaid) -> None:
    row.fines_due -= event.amount


@library.projector(Title, TitleAdded)
def _title_added(row: Title, event: TitleAdded) -> None:
    row.name = event.name


def _count(row: Title, status: str, by: int) -> None:
    if status == "on_shelf":
        row.on_shelf += by
    elif status == "on_loan":
        row.on_loan += by
    elif status in ("on_hold",):
        row.on_hold += by


@library.projector(Title, CopyMoved)
def _copy_moved(row: Title, event: CopyMoved) -> None:
    # A returned copy was counted on loan until it is passed on.
    source = "on_loan" if event.source == "returned" else event.source
    if source is not None:
        _count(row, source, -1)
    _count(row, event.target, 1)


@library.projector(Title, TitleReserved)
def _title_reserved(row: Title, event: TitleReserved) -> None:
    row.reserved += 1


@library.projector(Copy, CopyRegistered)
def _registered(row: Copy, event: CopyRegistered) -> None:
    row.title_id = event.title_id


@library.projector(Copy, CopyLent)
def _lent(row: Copy, event: CopyLent) -> None:
    row.status, row.loan_id, row.member_id = "on_loan", event.loan_id, event.member_id
    row.email, row.due_at, row.reservation_id = event.email, event.due_at, None


@library.projector(Copy, CopyReturned)
def _returned(row: Copy, event: CopyReturned) -> None:
    row.status, row.loan_id, row.member_id, row.email, row.due_at = "returned", None, None, None, None


@library.projector(Copy, CopyHeld)
def _copy_held(row: Copy, event: CopyHeld) -> None:
    row.status, row.reservation_id = "on_hold", event.reservation_id


@library.projector(Copy, CopyShelved)
def _shelved(row: Copy, event: CopyShelved) -> None:
    row.status, row.reservation_id = "on_shelf", None


@library.projector(Reservation, Reserved)
def _reserved(row: Reservation, event: Reserved) -> None:
    row.title_id, row.member_id, row.email, row.place = event.title_id, event.member_id, event.email, event.place


@library.projector(Reservation, ReservationOffered)
def _offered(row: Reservation, event: ReservationOffered) -> None:
    row.status, row.copy_id, row.offered_until = "offered", event.copy_id, event.until


@library.projector(Reservation, ReservationClosed)
def _closed(row: Reservation, event: ReservationClosed) -> None:
    row.status = event.reason


@library.projector(Reservation, ReservationLapsed)
def _lapsed(row: Reservation, event: ReservationLapsed) -> None:
    row.status = "lapsed"


def _new_member(joined: MemberJoined) -> Member:
    row = Member(name=joined.name, email=joined.email, loan_limit=joined.loan_limit)
    row.id = joined.member_id
    return row


def _new_title(added: TitleAdded) -> Title:
    row = Title(name=added.name)
    row.id = added.title_id
    return row


def _new_copy(registered: CopyRegistered) -> Copy:
    row = Copy(title_id=registered.title_id)
    row.id = registered.copy_id
    return row


def _new_reservation(reserved: Reserved) -> Reservation:
    row = Reservation(
        title_id=reserved.title_id, member_id=reserved.member_id, email=reserved.email, place=reserved.place
    )
    row.id = reserved.reservation_id
    return row


def _locked_member(member_id: uuid.UUID) -> Select[Member]:
    # Locked: a member's loans, returns and payments decide one after the other.
    return select(Member).where(Member.id == member_id).with_for_update()


def _locked_title(title_id: uuid.UUID) -> Select[Title]:
    # Locked: the loans and reservations of one title decide one after the other.
    return select(Title).where(Title.id == title_id).with_for_update()


def _locked_copy(copy_id: uuid.UUID) -> Select[Copy]:
    return select(Copy).where(Copy.id == copy_id).with_for_update()


def _locked_reservation(reservation_id: uuid.UUID) -> Select[Reservation]:
    # Locked: a loan, a cancel and the offer's run decide on one reservation one after the other.
    return select(Reservation).where(Reservation.id == reservation_id).with_for_update()


def _the(row: T | None) -> T:
    """A row a guard or branch before has found there."""
    if row is None:
        raise LookupError("a row the pipeline checked is gone")
    return row


def _late_days(due_at: datetime, now: datetime) -> int:
    """Each started day after the due instant counts; the due instant itself does not."""
    return max(0, math.ceil((now - due_at) / timedelta(days=1)))


def _copy_for(c: Ctx[Any, Any, Any], offer: Reservation | None, title_id: uuid.UUID) -> Copy | None:
    """The copy held for the member's offer, else one on the shelf (locked)."""
    if offer is not None and offer.copy_id is not None:
        return c.db.scalar(_locked_copy(offer.copy_id))
    return c.db.scalar(
        select(Copy)
        .where(Copy.title_id == title_id, Copy.status == "on_shelf")
        .order_by(Copy.id)
        .limit(1)
        .with_for_update()
    )


join = library.write_handler(
    "member:join",
    library.pipeline(Join)
    .compute("joined", lambda c: MemberJoined(uuid.uuid4(), c.payload.name, c.payload.email, c.payload.loan_limit))
    .create("member", Member, data=lambda c: _new_member(c.steps["joined"]), event=lambda c: c.steps["joined"])
    .return_(lambda c: ok(c.steps["joined"].member_id)),
)

add_title = library.write_handler(
    "title:add",
    library.pipeline(AddTitle)
    .compute("added", lambda c: TitleAdded(uuid.uuid4(), c.payload.name))
    .create("title", Title, data=lambda c: _new_title(c.steps["added"]), event=lambda c: c.steps["added"])
    .for_each(
        "number",
        over=lambda c: range(c.payload.copies),
        do=lambda b: (
            b.compute("registered", lambda c: CopyRegistered(uuid.uuid4(), c.steps["added"].title_id))
            .create(
                "copy", Copy, data=lambda c: _new_copy(c.steps["registered"]), event=lambda c: c.steps["registered"]
            )
            .append_event(
                Title,
                id=lambda c: c.steps["added"].title_id,
                event=lambda c: CopyMoved(c.steps["added"].title_id, c.steps["registered"].copy_id, None, "on_shelf"),
            )
        ),
    )
    .return_(lambda c: ok(c.steps["added"].title_id)),
)

borrow = library.write_handler(
    "loan:borrow",
    library.pipeline(Borrow)
    .get_one("member", lambda c: _locked_member(c.payload.member_id))
    .guard(
        lambda c: c.steps["member"].fines_due == 0,
        otherwise=lambda c: fail("unprocessable", f"blocked: fines of {c.steps['member'].fines_due} are unpaid"),
    )
    .guard(
        lambda c: c.steps["member"].loans < c.steps["member"].loan_limit,
        otherwise=lambda c: fail("unprocessable", f"the member has {c.steps['member'].loan_limit} loans, the limit"),
    )
    .get_one("title", lambda c: _locked_title(c.payload.title_id))
    .find_one(
        "offer",
        lambda c: (
            select(Reservation)
            .where(
                Reservation.title_id == c.payload.title_id,
                Reservation.member_id == c.payload.member_id,
                Reservation.status == "offered",
            )
            .with_for_update()
        ),
    )
    .compute("copy", lambda c: _copy_for(c, c.steps["offer"], c.payload.title_id))
    .guard(
        lambda c: c.steps["copy"] is not None,
        otherwise=lambda c: fail("unprocessable", "no copy of the title is on the shelf: reserve it"),
    )
    .compute(
        "lent",
        lambda c: CopyLent(
            _the(c.steps["copy"]).id,
            c.payload.title_id,
            uuid.uuid4(),
            c.payload.member_id,
            c.steps["member"].email,
            c.now + LOAN_FOR,
        ),
    )
    .branch(
        name="collect",
        when=lambda c: c.steps["offer"] is not None,
        on_true=lambda b: b.append_event(
            Reservation,
            id=lambda c: _the(c.steps["offer"]).id,
            event=lambda c: ReservationClosed(_the(c.steps["offer"]).id, "collected"),
        ),
    )
    .append_event(
        Title,
        id=lambda c: c.payload.title_id,
        event=lambda c: CopyMoved(
            c.payload.title_id, c.steps["lent"].copy_id, "on_hold" if c.steps["offer"] else "on_shelf", "on_loan"
        ),
    )
    .append_event(Copy, id=lambda c: c.steps["lent"].copy_id, event=lambda c: c.steps["lent"])
    .append_event(
        Member,
        id=lambda c: c.payload.member_id,
        event=lambda c: LoanOpened(c.payload.member_id, c.steps["lent"].copy_id),
    )
    .send_webhook(
        url=lambda c: catalogue_url("/loans"),
        body=lambda c: {
            "loan_id": str(c.steps["lent"].loan_id),
            "title_id": str(c.payload.title_id),
            "copy_id": str(c.steps["lent"].copy_id),
            "due_at": c.steps["lent"].due_at.isoformat(),
        },
        retry=DELIVERY,
    )
    .return_(lambda c: ok(Lent(c.steps["lent"].copy_id, c.steps["lent"].loan_id, c.steps["lent"].due_at))),
)

pass_on = library.write_handler(
    "copy:pass-on",
    library.pipeline(PassOn)
    .get_one("copy", lambda c: _locked_copy(c.payload.copy_id))
    .get_one("title", lambda c: _locked_title(c.steps["copy"].title_id))
    .find_one(
        "holder",
        lambda c: select(Reservation).where(Reservation.id == c.steps["copy"].reservation_id),
    )
    .guard(
        lambda c: c.steps["copy"].status == c.payload.source,
        otherwise=lambda c: fail("unprocessable", f"the copy is {c.steps['copy'].status}"),
    )
    .guard(
        lambda c: (held := c.steps["holder"]) is None or held.status in ("lapsed", "cancelled"),
        otherwise=lambda c: fail("unprocessable", "the copy is held for a reservation still offered"),
    )
    .find_one(
        "next",
        lambda c: (
            select(Reservation)
            .where(Reservation.title_id == c.steps["copy"].title_id, Reservation.status == "waiting")
            .order_by(Reservation.place)
            .limit(1)
            .with_for_update()
        ),
    )
    .branch(
        name="offer",
        when=lambda c: c.steps["next"] is not None,
        on_true=lambda b: (
            b.compute(
                "offered",
                lambda c: ReservationOffered(
                    _the(c.steps["next"]).id,
                    c.steps["copy"].title_id,
                    c.payload.copy_id,
                    _the(c.steps["next"]).email,
                    c.now + HOLD_FOR,
                ),
            )
            .append_event(
                Reservation, id=lambda c: c.steps["offered"].reservation_id, event=lambda c: c.steps["offered"]
            )
            .append_event(
                Copy,
                id=lambda c: c.payload.copy_id,
                event=lambda c: CopyHeld(c.payload.copy_id, c.steps["offered"].reservation_id),
            )
        ),
        on_false=lambda b: b.append_event(
            Copy, id=lambda c: c.payload.copy_id, event=lambda c: CopyShelved(c.payload.copy_id)
        ),
    )
    .append_event(
        Title,
        id=lambda c: c.steps["copy"].title_id,
        event=lambda c: CopyMoved(
            c.steps["copy"].title_id,
            c.payload.copy_id,
            c.payload.source,
            "on_hold" if c.steps["next"] is not None else "on_shelf",
        ),
    )
    .return_(lambda c: ok(n.id if (n := c.steps["next"]) is not None else None)),
)

return_copy = library.write_handler(
    "loan:return",
    library.pipeline(Return)
    .get_one("copy", lambda c: _locked_copy(c.payload.copy_id))
    .guard(
        lambda c: c.steps["copy"].status == "on_loan",
        otherwise=lambda c: fail("unprocessable", "the copy is not on loan"),
    )
    .compute("late_days", lambda c: _late_days(c.steps["copy"].due_at or c.now, c.now))
    .compute(
        "returned",
        lambda c: CopyReturned(
            c.payload.copy_id,
            c.steps["copy"].loan_id or uuid.uuid4(),
            c.steps["late_days"],
            FINE_PER_DAY * c.steps["late_days"],
        ),
    )
    .compute("member_id", lambda c: c.steps["copy"].member_id or uuid.uuid4())
    .append_event(Copy, id=lambda c: c.payload.copy_id, event=lambda c: c.steps["returned"])
    .append_event(
        Member,
        id=lambda c: c.steps["member_id"],
        event=lambda c: LoanClosed(c.steps["member_id"], c.payload.copy_id, c.steps["returned"].fine),
    )
    .call_feature("passed", pass_on, payload=lambda c: PassOn(c.payload.copy_id, "returned"))
    .return_(lambda c: ok(Returned(c.payload.copy_id, c.steps["returned"].late_days, c.steps["returned"].fine))),
)

pay_fine = library.write_handler(
    "member:pay-fine",
    library.pipeline(PayFine)
    .get_one("member", lambda c: _locked_member(c.payload.member_id))
    .guard(
        lambda c: c.payload.amount <= c.steps["member"].fines_due,
        otherwise=lambda c: fail("unprocessable", f"the member owes {c.steps['member'].fines_due}"),
    )
    .append_event(
        Member, id=lambda c: c.payload.member_id, event=lambda c: FinePaid(c.payload.member_id, c.payload.amount)
    )
    .return_(lambda c: ok(c.steps["member"].fines_due)),  # the projector has run: what is left
)

reserve = library.write_handler(
    "reservation:reserve",
    library.pipeline(Reserve)
    .get_one("member", lambda c: select(Member).where(Member.id == c.payload.member_id))
    .get_one("title", lambda c: _locked_title(c.payload.title_id))
    .guard(
        lambda c: c.steps["title"].on_shelf == 0,
        otherwise=lambda c: fail("unprocessable", "a copy is on the shelf: borrow it"),
    )
    .compute(
        "reserved",
        lambda c: Reserved(
            uuid.uuid4(),
            c.payload.title_id,
            c.payload.member_id,
            c.steps["member"].email,
            c.steps["title"].reserved + 1,
        ),
    )
    .create(
        "reservation",
        Reservation,
        data=lambda c: _new_reservation(c.steps["reserved"]),
        event=lambda c: c.steps["reserved"],
    )
    .append_event(
        Title,
        id=lambda c: c.payload.title_id,
        event=lambda c: TitleReserved(c.payload.title_id, c.steps["reserved"].reservation_id),
    )
    .return_(lambda c: ok(c.steps["reserved"].reservation_id)),
)

# The member's cancel.  Cancelling again, or a reservation that lapsed, answers as the first did.
cancel_reservation = library.write_handler(
    "reservation:cancel",
    library.pipeline(CancelReservation)
    .get_one("reservation", lambda c: _locked_reservation(c.payload.reservation_id))
    .guard(
        lambda c: c.steps["reservation"].status != "collected",
        otherwise=lambda c: fail("unprocessable", "the reservation was collected: return the copy instead"),
    )
    .branch(
        name="first",
        when=lambda c: c.steps["reservation"].status in ("waiting", "offered"),
        on_true=lambda b: b.append_event(
            Reservation,
            id=lambda c: c.payload.reservation_id,
            event=lambda c: ReservationClosed(c.payload.reservation_id, "cancelled"),
        ),
    )
    .return_(lambda c: ok(c.payload.reservation_id)),
)

availability = library.query_handler(
    "title:availability",
    library.query_pipeline(TitleId)
    .get_one("title", lambda c: select(Title).where(Title.id == c.payload.title_id))
    .find_many(
        "queue",
        lambda c: (
            select(Reservation)
            .where(Reservation.title_id == c.payload.title_id, Reservation.status == "waiting")
            .order_by(Reservation.place)
        ),
    )
    .return_(
        lambda c: ok(
            Availability(
                c.payload.title_id,
                c.steps["title"].name,
                c.steps["title"].on_shelf,
                c.steps["title"].on_loan,
                c.steps["title"].on_hold,
                [r.id for r in c.steps["queue"]],
            )
        )
    ),
)

member_loans = library.query_handler(
    "member:loans",
    library.query_pipeline(MemberId)
    .get_one("member", lambda c: select(Member).where(Member.id == c.payload.member_id))
    .find_many(
        "copies",
        lambda c: (
            select(Copy)
            .where(Copy.member_id == c.payload.member_id, Copy.status == "on_loan")
            .order_by(Copy.due_at, Copy.id)
        ),
    )
    .return_(
        lambda c: ok(
            Loans(
                c.payload.member_id,
                c.steps["member"].loans,
                c.steps["member"].fines_due,
                [copy.id for copy in c.steps["copies"]],
            )
        )
    ),
)


def _offer_outcome(status: str) -> str:
    """What the offer's run does with a reservation it finds in ``status`` once it stops waiting."""
    return {"offered": "lapsed", "cancelled": "pass-on"}.get(status, "none")


offer = library.workflow(
    "offer",
    trigger=on_event(ReservationOffered),
    pipeline=library.workflow_pipeline(ReservationOffered)
    # The title first, as every writer of its copies and queue locks it: no lock taken in
    # another order, so no deadlock with a loan collecting the offer meanwhile.
    .get_one("title", lambda c: _locked_title(c.payload.title_id))
    # Read locked before waiting: an offer collected or cancelled before this run started
    # (the workers were down) is no answer the wait would get.
    .get_one("before", lambda c: _locked_reservation(c.payload.reservation_id))
    .branch(
        name="wait",
        when=lambda c: c.steps["before"].status == "offered",
        on_true=lambda b: b.send_mail(
            to=lambda c: c.payload.email,
            subject="A copy is held for you",
            body=lambda c: (
                f"Reservation {c.payload.reservation_id}: collect it by {c.payload.until:%Y-%m-%d %H:%M} UTC."
            ),
        ).wait_for_event(
            "closed",
            ReservationClosed,
            key=lambda c: c.payload.reservation_id,
            event_key=lambda e: e.reservation_id,
            timeout=lambda c: c.payload.until,
        ),
    )
    .get_one("title_now", lambda c: _locked_title(c.payload.title_id))
    .get_one("reservation", lambda c: _locked_reservation(c.payload.reservation_id))
    .compute("outcome", lambda c: _offer_outcome(c.steps["reservation"].status))
    .branch(
        name="lapse",
        when=lambda c: c.steps["outcome"] == "lapsed",
        on_true=lambda b: b.append_event(
            Reservation,
            id=lambda c: c.payload.reservation_id,
            event=lambda c: ReservationLapsed(c.payload.reservation_id),
        ).send_mail(
            to=lambda c: c.payload.email,
            subject="Your reservation lapsed",
            body=lambda c: f"Reservation {c.payload.reservation_id} lapsed: the copy went to the next member.",
        ),
    )
    .branch(
        name="pass",
        when=lambda c: c.steps["outcome"] != "none",
        on_true=lambda b: b.call_feature("passed", pass_on, payload=lambda c: PassOn(c.payload.copy_id, "on_hold")),
    )
    .return_(lambda c: ok(c.steps["outcome"])),
)

loan = library.workflow(
    "loan",
    trigger=on_event(CopyLent),
    pipeline=library.workflow_pipeline(CopyLent)
    .wait(lambda c: c.payload.due_at - REMIND_BEFORE)
    .find_one("copy", lambda c: select(Copy).where(Copy.id == c.payload.copy_id, Copy.loan_id == c.payload.loan_id))
    .branch(
        name="remind",
        when=lambda c: c.steps["copy"] is not None,
        on_true=lambda b: b.send_mail(
            to=lambda c: c.payload.email,
            subject="Your loan is due soon",
            body=lambda c: f"Copy {c.payload.copy_id} is due back by {c.payload.due_at:%Y-%m-%d %H:%M} UTC.",
        ),
    )
    .return_(lambda c: ok(c.steps["copy"] is not None)),
)

overdue = library.workflow(
    "overdue",
    trigger=cron("0 6 * * *"),
    pipeline=library.workflow_pipeline(CronTick)
    .find_many(
        "late",
        # A cron run has no tenant: it reads every tenant's copies on purpose, and changes none.
        lambda c: (
            select(Copy)
            .where(Copy.status == "on_loan", Copy.due_at < c.payload.scheduled_at)
            .order_by(Copy.due_at, Copy.id)
            .execution_options(kumiko_all_tenants=True)
        ),
    )
    .for_each(
        "copy",
        over=lambda c: [(copy.email or "", copy.id, copy.due_at) for copy in c.steps["late"]],
        do=lambda b: b.send_mail(
            to=lambda c: c.scope["copy"][0],
            subject="Your loan is overdue",
            body=lambda c: f"Copy {c.scope['copy'][1]} was due back on {c.scope['copy'][2]}.",
        ),
    )
    .return_(lambda c: ok(len(c.steps["late"]))),
)
