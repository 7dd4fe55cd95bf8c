"""Oskar Dudycz's HotelManagement sample (EventSourcing.NetCore), ported: a guest stay's
account (check in, record charges and payments, check out only once the balance is
settled) and a group check-out that checks out many stays at once, each of which may
succeed or fail, and that ends as "completed" (every stay checked out) or "failed" (at
least one refused), with the lists of both.

How the pieces map:

- ``GuestStayAccount`` is an aggregate; its table is the inline projection of its events.
  A guest's own check-out (``stay:check-out``) that finds the balance unsettled is refused
  with a ``Failure`` naming the amount: a ``Failure`` rolls its transaction back, so a
  refused solo check-out leaves no event.  A check-out asked for by a group
  (``stay:check-out-for-group``) records the refusal as a ``GuestCheckOutFailed`` event on
  the stay, with the group's id and the reason, and answers ``Ok`` with the outcome: the
  group must go on with the other stays, and its outcome is the stay's own record.
- ``GroupCheckout`` is an aggregate too: its row counts the stays asked, checked out and
  failed and holds the status; ``GroupCheckoutStay`` (a projection table) lists each
  stay's outcome, so a group of any size costs one row per stay, never a growing value.
- The group's process is a durable workflow started by ``GroupCheckoutInitiated``: it
  checks the stays out in batches of ``BATCH`` (each batch one segment, committed with
  the run's place, so a worker killed mid-group redoes at most that batch), records each
  answer on the group, and completes or fails the group when every stay has answered.
  The clerk is told by mail (the outbox) when the group is done.
- Another tenant's stay, or an id that is no stay, is the same failure ("no such guest
  stay"): a group never checks out, or learns of, a stay outside its tenant.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import attrs
from sqlalchemy import Numeric, Select, String, select
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from kumiko_typed import Ctx, Entity, Feature, fail, mail_address, ok, on_event

#: The largest amount one charge or payment may carry (the columns hold 12 digits, 2 after the point).
MAX_AMOUNT = Decimal("1000000.00")
#: How many stays one group may name.
MAX_GROUP = 1000
#: How many stays one segment of the group's run checks out before it commits.
BATCH = 20
#: The answer for a stay the group cannot see: unknown, or another tenant's (the same words).
NO_SUCH_STAY = "no such guest stay"


def _money(_instance: object, attribute: attrs.Attribute[Decimal], value: Decimal) -> None:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int) or exponent < -2 or not Decimal(0) < value <= MAX_AMOUNT:
        raise ValueError(f"must be more than 0 and at most {MAX_AMOUNT}, in whole cents")


def _stays(_instance: object, attribute: attrs.Attribute[list[uuid.UUID]], value: list[uuid.UUID]) -> None:
    if not 1 <= len(value) <= MAX_GROUP:
        raise ValueError(f"must name 1 to {MAX_GROUP} guest stays")
    if len(set(value)) != len(value):
        raise ValueError("must name each guest stay once")


_EMAIL: Callable[[Any, Any, str], None] = attrs.validators.and_(attrs.validators.max_len(200), mail_address)


class GuestStayAccount(Entity):
    __tablename__ = "hotel_guest_stay"
    guest_id: Mapped[uuid.UUID] = mapped_column(default=uuid.UUID(int=0))
    #: open | checked_out
    status: Mapped[str] = mapped_column(String(20), default="open")
    charges: Mapped[Decimal] = mapped_column(Numeric(14, 2), default=Decimal("0.00"))
    payments: Mapped[Decimal] = mapped_column(Numeric(14, 2), default=Decimal("0.00"))
    #: charges - payments: what the guest still owes (negative: paid too much).
    balance: Mapped[Decimal] = mapped_column(Numeric(14, 2), default=Decimal("0.00"))


class GroupCheckout(Entity):
    __tablename__ = "hotel_group_checkout"
    clerk_id: Mapped[uuid.UUID] = mapped_column(default=uuid.UUID(int=0))
    #: initiated | completed | failed
    status: Mapped[str] = mapped_column(String(20), default="initiated")
    stays: Mapped[int] = mapped_column(default=0)
    checked_out: Mapped[int] = mapped_column(default=0)
    failed: Mapped[int] = mapped_column(default=0)


class HotelReadModels(MappedAsDataclass, DeclarativeBase):
    """Tables that are no aggregate's."""


class GroupCheckoutStay(HotelReadModels):
    """A group's stays, in the order the clerk named them, with each one's answer."""

    __tablename__ = "hotel_group_checkout_stays"
    group_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(index=True)
    stay_id: Mapped[uuid.UUID] = mapped_column()
    #: pending | checked_out | failed
    outcome: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(String(200), default=None)


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class GuestCheckedIn:
    stay_id: uuid.UUID
    guest_id: uuid.UUID
    at: datetime


@attrs.frozen
class ChargeRecorded:
    stay_id: uuid.UUID
    amount: Decimal
    at: datetime


@attrs.frozen
class PaymentRecorded:
    stay_id: uuid.UUID
    amount: Decimal
    at: datetime


@attrs.frozen
class GuestCheckedOut:
    stay_id: uuid.UUID
    group_id: uuid.UUID | None
    at: datetime


@attrs.frozen
class GuestCheckOutFailed:
    stay_id: uuid.UUID
    group_id: uuid.UUID | None
    reason: str
    at: datetime


@attrs.frozen
class GroupCheckoutInitiated:
    """Starts the group's run.  It names how many stays, not which: those are the
    ``GuestCheckoutRequested`` events after it, so that the run, whose payload this is,
    reads as little at each segment for a group of 500 as for a group of 5."""

    group_id: uuid.UUID
    clerk_id: uuid.UUID
    clerk_email: str
    stays: int
    at: datetime


@attrs.frozen
class GuestCheckoutRequested:
    group_id: uuid.UUID
    position: int
    stay_id: uuid.UUID


@attrs.frozen
class GuestCheckoutRecorded:
    """One stay of the group answered (``reason`` is ``None`` when it was checked out)."""

    group_id: uuid.UUID
    position: int
    stay_id: uuid.UUID
    reason: str | None


@attrs.frozen
class GroupCheckoutCompleted:
    group_id: uuid.UUID
    checked_out: list[uuid.UUID]
    at: datetime


@attrs.frozen
class GroupCheckoutFailed:
    group_id: uuid.UUID
    checked_out: list[uuid.UUID]
    failed: list[uuid.UUID]
    at: datetime


# --- payloads and answers ------------------------------------------------------------------


@attrs.frozen
class CheckIn:
    guest_id: uuid.UUID


@attrs.frozen
class RecordCharge:
    stay_id: uuid.UUID
    amount: Decimal = attrs.field(validator=_money)


@attrs.frozen
class RecordPayment:
    stay_id: uuid.UUID
    amount: Decimal = attrs.field(validator=_money)


@attrs.frozen
class CheckOut:
    stay_id: uuid.UUID


@attrs.frozen
class CheckOutForGroup:
    stay_id: uuid.UUID
    group_id: uuid.UUID


@attrs.frozen
class InitiateGroupCheckout:
    group_id: uuid.UUID
    clerk_email: str = attrs.field(validator=_EMAIL)
    stay_ids: list[uuid.UUID] = attrs.field(validator=_stays)


@attrs.frozen
class GroupStatus:
    group_id: uuid.UUID


@attrs.frozen
class StayOutcome:
    stay_id: uuid.UUID
    checked_out: bool
    reason: str | None


@attrs.frozen
class GroupView:
    group_id: uuid.UUID
    status: str
    stays: int
    checked_out: list[uuid.UUID]
    failed: list[uuid.UUID]
    pending: list[uuid.UUID]


#: What an App serving this feature names in ``App(value_types=...)``: a group's run keeps
#: its stays' outcomes (the ``call_feature`` answers) in its state.
VALUE_TYPES = [StayOutcome]

# --- the feature ---------------------------------------------------------------------------

hotel = Feature("hotel", requires=["mail.send", "call_feature"], projections=[GroupCheckoutStay])
hotel.entity(GuestStayAccount)
hotel.entity(GroupCheckout)
hotel.event(GuestCheckedIn, name="guest-checked-in")
hotel.event(ChargeRecorded, name="charge-recorded")
hotel.event(PaymentRecorded, name="payment-recorded")
hotel.event(GuestCheckedOut, name="guest-checked-out")
hotel.event(GuestCheckOutFailed, name="guest-check-out-failed")
hotel.event(GroupCheckoutInitiated, name="group-checkout-initiated")
hotel.event(GuestCheckoutRequested, name="guest-checkout-requested")
hotel.event(GuestCheckoutRecorded, name="guest-checkout-recorded")
hotel.event(GroupCheckoutCompleted, name="group-checkout-completed")
hotel.event(GroupCheckoutFailed, name="group-checkout-failed")


@hotel.projector(GuestStayAccount, GuestCheckedIn)
def _checked_in(row: GuestStayAccount, event: GuestCheckedIn) -> None:
    row.guest_id = event.guest_id


@hotel.projector(GuestStayAccount, ChargeRecorded)
def _charged(row: GuestStayAccount, event: ChargeRecorded) -> None:
    row.charges += event.amount
    row.balance += event.amount


@hotel.projector(GuestStayAccount, PaymentRecorded)
def _paid(row: GuestStayAccount, event: PaymentRecorded) -> None:
    row.payments += event.amount
    row.balance -= event.amount


@hotel.projector(GuestStayAccount, GuestCheckedOut)
def _checked_out(row: GuestStayAccount, event: GuestCheckedOut) -> None:
    row.status = "checked_out"


@hotel.projector(GroupCheckout, GroupCheckoutInitiated)
def _initiated(row: GroupCheckout, event: GroupCheckoutInitiated) -> None:
    row.clerk_id, row.stays = event.clerk_id, event.stays


@hotel.projector(GroupCheckout, GuestCheckoutRecorded)
def _recorded(row: GroupCheckout, event: GuestCheckoutRecorded) -> None:
    if event.reason is None:
        row.checked_out += 1
    else:
        row.failed += 1


@hotel.projector(GroupCheckout, GroupCheckoutCompleted)
def _completed(row: GroupCheckout, event: GroupCheckoutCompleted) -> None:
    row.status = "completed"


@hotel.projector(GroupCheckout, GroupCheckoutFailed)
def _failed(row: GroupCheckout, event: GroupCheckoutFailed) -> None:
    row.status = "failed"


def refusal(stay: GuestStayAccount) -> str | None:
    """Why ``stay`` cannot be checked out now, or ``None`` when it can."""
    if stay.status != "open":
        return "the guest stay is checked out already"
    if stay.balance > 0:
        return f"the balance is not settled: {stay.balance} outstanding"
    if stay.balance < 0:
        return f"the balance is not settled: {-stay.balance} to pay back"
    return None


def _new_stay(stay_id: uuid.UUID) -> GuestStayAccount:
    """An empty row under the id the creation event names; the projector fills it."""
    row = GuestStayAccount()
    row.id = stay_id
    return row


def _new_group(group_id: uuid.UUID) -> GroupCheckout:
    row = GroupCheckout()
    row.id = group_id
    return row


def _locked_stay(stay_id: uuid.UUID) -> Select[GuestStayAccount]:
    # Locked: a charge, a payment and a check-out of one stay decide one after the other.
    return select(GuestStayAccount).where(GuestStayAccount.id == stay_id).with_for_update()


def _stays_of(c: Ctx[Any, Any, Any], group_id: uuid.UUID, first: int) -> list[tuple[int, uuid.UUID]]:
    """Positions and ids of the group's stays ``first`` to ``first + BATCH - 1``."""
    rows = c.db.execute(
        select(GroupCheckoutStay.position, GroupCheckoutStay.stay_id)
        .where(
            GroupCheckoutStay.tenant_id == c.tenant_id,
            GroupCheckoutStay.group_id == group_id,
            GroupCheckoutStay.position >= first,
            GroupCheckoutStay.position < first + BATCH,
        )
        .order_by(GroupCheckoutStay.position)
    )
    return [(position, stay_id) for position, stay_id in rows]


def _outcomes(c: Ctx[Any, Any, Any], group_id: uuid.UUID) -> list[tuple[uuid.UUID, str, str | None]]:
    """Each stay of the group with its outcome and reason, in the clerk's order."""
    rows = c.db.execute(
        select(GroupCheckoutStay.stay_id, GroupCheckoutStay.outcome, GroupCheckoutStay.reason)
        .where(GroupCheckoutStay.tenant_id == c.tenant_id, GroupCheckoutStay.group_id == group_id)
        .order_by(GroupCheckoutStay.position)
    )
    return [(stay_id, outcome, reason) for stay_id, outcome, reason in rows]


check_in = hotel.write_handler(
    "stay:check-in",
    hotel.pipeline(CheckIn)
    .compute("id", lambda c: uuid.uuid4())
    .create(
        "stay",
        GuestStayAccount,
        data=lambda c: _new_stay(c.steps["id"]),
        event=lambda c: GuestCheckedIn(c.steps["id"], c.payload.guest_id, c.now),
    )
    .return_(lambda c: ok(c.steps["id"])),
)

record_charge = hotel.write_handler(
    "stay:record-charge",
    hotel.pipeline(RecordCharge)
    .get_one("stay", lambda c: _locked_stay(c.payload.stay_id))
    .guard(
        lambda c: c.steps["stay"].status == "open",
        otherwise=lambda c: fail("unprocessable", "the guest stay is checked out"),
    )
    .append_event(
        GuestStayAccount,
        id=lambda c: c.payload.stay_id,
        event=lambda c: ChargeRecorded(c.payload.stay_id, c.payload.amount, c.now),
    )
    .return_(lambda c: ok(c.steps["stay"].balance)),
)

record_payment = hotel.write_handler(
    "stay:record-payment",
    hotel.pipeline(RecordPayment)
    .get_one("stay", lambda c: _locked_stay(c.payload.stay_id))
    .guard(
        lambda c: c.steps["stay"].status == "open",
        otherwise=lambda c: fail("unprocessable", "the guest stay is checked out"),
    )
    .append_event(
        GuestStayAccount,
        id=lambda c: c.payload.stay_id,
        event=lambda c: PaymentRecorded(c.payload.stay_id, c.payload.amount, c.now),
    )
    .return_(lambda c: ok(c.steps["stay"].balance)),
)

check_out = hotel.write_handler(
    "stay:check-out",
    hotel.pipeline(CheckOut)
    .get_one("stay", lambda c: _locked_stay(c.payload.stay_id))
    .compute("refusal", lambda c: refusal(c.steps["stay"]))
    .guard(
        lambda c: c.steps["refusal"] is None,
        otherwise=lambda c: fail("unprocessable", c.steps["refusal"] or ""),
    )
    .append_event(
        GuestStayAccount,
        id=lambda c: c.payload.stay_id,
        event=lambda c: GuestCheckedOut(c.payload.stay_id, None, c.now),
    )
    .return_(lambda c: ok(c.payload.stay_id)),
)

# The group's check-out of one stay: it always answers Ok, with the outcome, and records a
# refusal on the stay as an event (the stay's own record of why it was not checked out).
check_out_for_group = hotel.write_handler(
    "stay:check-out-for-group",
    hotel.pipeline(CheckOutForGroup)
    .find_one("stay", lambda c: _locked_stay(c.payload.stay_id))
    .compute("refusal", lambda c: NO_SUCH_STAY if (s := c.steps["stay"]) is None else refusal(s))
    .branch(
        name="known",
        when=lambda c: c.steps["stay"] is not None,
        on_true=lambda b: b.branch(
            name="settled",
            when=lambda c: c.steps["refusal"] is None,
            on_true=lambda t: t.append_event(
                GuestStayAccount,
                id=lambda c: c.payload.stay_id,
                event=lambda c: GuestCheckedOut(c.payload.stay_id, c.payload.group_id, c.now),
            ),
            on_false=lambda f: f.append_event(
                GuestStayAccount,
                id=lambda c: c.payload.stay_id,
                event=lambda c: GuestCheckOutFailed(
                    c.payload.stay_id, c.payload.group_id, c.steps["refusal"] or "", c.now
                ),
            ),
        ),
    )
    .return_(lambda c: ok(StayOutcome(c.payload.stay_id, c.steps["refusal"] is None, c.steps["refusal"]))),
)


initiate_group_checkout = hotel.write_handler(
    "group:initiate-checkout",
    hotel.pipeline(InitiateGroupCheckout)
    .find_one("existing", lambda c: select(GroupCheckout).where(GroupCheckout.id == c.payload.group_id))
    .find_many(
        "named",  # the stays an earlier command under this id named (none for a new group)
        lambda c: (
            select(GroupCheckoutStay)
            .where(GroupCheckoutStay.tenant_id == c.tenant_id, GroupCheckoutStay.group_id == c.payload.group_id)
            .order_by(GroupCheckoutStay.position)
        ),
    )
    .guard(  # the same command again is answered as the first; another one under its id is refused
        lambda c: c.steps["existing"] is None or [r.stay_id for r in c.steps["named"]] == c.payload.stay_ids,
        otherwise=lambda c: fail("unprocessable", "that group check-out was initiated with other guest stays"),
    )
    .branch(
        name="new",
        when=lambda c: c.steps["existing"] is None,
        on_true=lambda b: b.create(
            "group",
            GroupCheckout,
            data=lambda c: _new_group(c.payload.group_id),
            event=lambda c: GroupCheckoutInitiated(
                c.payload.group_id, c.user.id, c.payload.clerk_email, len(c.payload.stay_ids), c.now
            ),
        ).for_each(
            "stay",
            over=lambda c: list(enumerate(c.payload.stay_ids)),
            do=lambda r: r.append_event(
                GroupCheckout,
                id=lambda c: c.payload.group_id,
                event=lambda c: GuestCheckoutRequested(c.payload.group_id, c.scope["stay"][0], c.scope["stay"][1]),
            ).unsafe_projection_upsert(
                GroupCheckoutStay,
                on=["group_id", "position"],
                row=lambda c: {
                    "group_id": c.payload.group_id,
                    "position": c.scope["stay"][0],
                    "tenant_id": c.tenant_id,
                    "stay_id": c.scope["stay"][1],
                    "outcome": "pending",
                },
            ),
        ),
    )
    .return_(lambda c: ok(c.payload.group_id)),
)


def _view(group: GroupCheckout, rows: Sequence[GroupCheckoutStay]) -> GroupView:
    def of(outcome: str) -> list[uuid.UUID]:
        return [r.stay_id for r in rows if r.outcome == outcome]

    return GroupView(group.id, group.status, group.stays, of("checked_out"), of("failed"), of("pending"))


group_status = hotel.query_handler(
    "group:status",
    hotel.query_pipeline(GroupStatus)
    .get_one("group", lambda c: select(GroupCheckout).where(GroupCheckout.id == c.payload.group_id))
    .find_many(
        "rows",
        lambda c: (
            select(GroupCheckoutStay)
            .where(GroupCheckoutStay.tenant_id == c.tenant_id, GroupCheckoutStay.group_id == c.payload.group_id)
            .order_by(GroupCheckoutStay.position)
        ),
    )
    .return_(lambda c: ok(_view(c.steps["group"], c.steps["rows"]))),
)


group_checkout = hotel.workflow(
    "group-checkout",
    trigger=on_event(GroupCheckoutInitiated),  # one run per group, in the clerk's tenant
    pipeline=hotel.workflow_pipeline(GroupCheckoutInitiated)
    .for_each(
        "batch",  # the batches' first positions: the stays themselves are read batch by batch
        over=lambda c: list(range(0, c.payload.stays, BATCH)),
        do=lambda b: (
            b.compute("stays", lambda c: _stays_of(c, c.payload.group_id, c.scope["batch"]))
            .for_each(
                "stay",
                over=lambda c: c.steps["stays"],
                do=lambda s: (
                    s.call_feature(
                        "outcome",
                        check_out_for_group,
                        payload=lambda c: CheckOutForGroup(c.scope["stay"][1], c.payload.group_id),
                    )
                    .append_event(
                        GroupCheckout,
                        id=lambda c: c.payload.group_id,
                        event=lambda c: GuestCheckoutRecorded(
                            c.payload.group_id, c.scope["stay"][0], c.scope["stay"][1], c.steps["outcome"].reason
                        ),
                    )
                    .unsafe_projection_upsert(
                        GroupCheckoutStay,
                        on=["group_id", "position"],
                        row=lambda c: {
                            "group_id": c.payload.group_id,
                            "position": c.scope["stay"][0],
                            "tenant_id": c.tenant_id,
                            "stay_id": c.scope["stay"][1],
                            "outcome": "checked_out" if c.steps["outcome"].checked_out else "failed",
                            "reason": c.steps["outcome"].reason,
                        },
                    )
                ),
            )
            # Commit this batch with the run's place: the next one is the next segment.
            .wait(timedelta(0), name="next-batch")
        ),
    )
    .compute("answers", lambda c: _outcomes(c, c.payload.group_id))
    .compute("checked_out", lambda c: [stay for stay, outcome, _ in c.steps["answers"] if outcome == "checked_out"])
    .compute("failed", lambda c: [stay for stay, outcome, _ in c.steps["answers"] if outcome != "checked_out"])
    .branch(
        name="outcome",
        when=lambda c: c.steps["failed"] == [],
        on_true=lambda b: b.append_event(
            GroupCheckout,
            id=lambda c: c.payload.group_id,
            event=lambda c: GroupCheckoutCompleted(c.payload.group_id, c.steps["checked_out"], c.now),
        ),
        on_false=lambda b: b.append_event(
            GroupCheckout,
            id=lambda c: c.payload.group_id,
            event=lambda c: GroupCheckoutFailed(c.payload.group_id, c.steps["checked_out"], c.steps["failed"], c.now),
        ),
    )
    .send_mail(
        to=lambda c: c.payload.clerk_email,
        subject=lambda c: f"Group check-out {'completed' if c.steps['failed'] == [] else 'failed'}",
        body=lambda c: (
            f"Group {c.payload.group_id}: {len(c.steps['checked_out'])} checked out, "
            f"{len(c.steps['failed'])} failed."
            + "".join(f"\nnot checked out: {stay}: {reason}" for stay, _, reason in c.steps["answers"] if reason)
        ),
    )
    .return_(lambda c: ok("completed" if c.steps["failed"] == [] else "failed")),
)
