"""Temporal's subscription sample, ported: a customer subscribes; the run mails a welcome,
waits out a free trial of the customer's length, then bills one period after another (a
charge, a mail, a wait until the period's end), and mails a goodbye when the last period is
over.  Period ends are counted from the subscription (a ``wait_for_event`` timeout may be
a deadline), so a worker that takes a period late does not shift the periods after it.  The customer may cancel
at any time (a signal in Temporal: here an event the trial's and each period's
``wait_for_event`` listens for, with the period as its timeout), and may change the amount
charged from the next period on (another signal; here the row the run reads before each
charge).  Temporal's query of the billing state is ``subscription:billing``.

The run starts from the subscription's creation event (``on_event``), so a subscription
and its run are committed together or not at all.  Its first step records the run's id on
the subscription (Temporal names a run by its workflow id): ``app.result`` and
``app.cancel_run`` take a run id, and a ``RunInfo`` does not say which event started it.

Each period reads the subscription's row, locked, before it charges: a cancellation that
commits after a period ended but before a worker took that period's timeout is no answer
to the period's wait (it occurred after the timeout), and would not match the next wait
either (it came before it); the read sees it, and the run charges nothing more.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from decimal import Decimal

import attrs
from sqlalchemy import Numeric, String, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Feature, fail, mail_address, ok, on_event

TRIAL = timedelta(days=14)  # the default trial
PERIOD = timedelta(days=30)
#: Statuses in which the subscription still bills.
LIVE = ("trial", "active")


def _amount(_instance: object, attribute: attrs.Attribute[Decimal], value: Decimal) -> None:
    exponent = value.as_tuple().exponent
    if value <= 0 or not isinstance(exponent, int) or exponent < -2:
        raise ValueError("must be positive, in whole cents")


class Subscription(Entity):
    __tablename__ = "sub_subscription"
    email: Mapped[str] = mapped_column(String(254))
    charge: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    max_periods: Mapped[int]
    status: Mapped[str] = mapped_column(String(20), default="trial")
    periods_charged: Mapped[int] = mapped_column(default=0)
    total_charged: Mapped[Decimal] = mapped_column(Numeric(12, 2), default=Decimal("0.00"))
    #: The billing run, once it has started.
    run_id: Mapped[uuid.UUID | None] = mapped_column(default=None)


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class Subscribed:
    subscription_id: uuid.UUID
    email: str
    charge: Decimal
    max_periods: int
    trial_days: int
    #: When the customer subscribed: the trial and every period count from it, also when
    #: the workers start the run late.
    at: datetime


@attrs.frozen
class BillingStarted:
    run_id: uuid.UUID


@attrs.frozen
class Charged:
    period: int
    amount: Decimal


@attrs.frozen
class ChargeChanged:
    amount: Decimal


@attrs.frozen
class Cancelled:
    subscription_id: uuid.UUID
    reason: str


@attrs.frozen
class Ended:
    periods: int


# --- payloads ------------------------------------------------------------------------------


@attrs.frozen
class Subscribe:
    email: str = attrs.field(validator=mail_address)
    charge: Decimal = attrs.field(validator=_amount)
    max_periods: int = attrs.field(validator=[attrs.validators.ge(1), attrs.validators.le(120)])
    trial_days: int = attrs.field(default=TRIAL.days, validator=[attrs.validators.ge(0), attrs.validators.le(90)])


@attrs.frozen
class Cancel:
    subscription_id: uuid.UUID
    reason: str = attrs.field(default="cancelled by the customer", validator=attrs.validators.max_len(200))


@attrs.frozen
class ChangeCharge:
    subscription_id: uuid.UUID
    amount: Decimal = attrs.field(validator=_amount)


@attrs.frozen
class BillingQuery:
    subscription_id: uuid.UUID


@attrs.frozen
class Billing:
    status: str
    charge: Decimal
    periods_charged: int
    total_charged: Decimal
    run_id: uuid.UUID | None


# --- the feature ---------------------------------------------------------------------------

billing = Feature("billing", requires=["mail.send"])
billing.entity(Subscription)
billing.event(Subscribed, name="subscribed")
billing.event(BillingStarted, name="billing-started")
billing.event(Charged, name="charged")
billing.event(ChargeChanged, name="charge-changed")
billing.event(Cancelled, name="subscription-cancelled")
billing.event(Ended, name="subscription-ended")


@billing.projector(Subscription, Subscribed)
def _subscribed(row: Subscription, event: Subscribed) -> None:
    row.email, row.charge, row.max_periods = event.email, event.charge, event.max_periods


@billing.projector(Subscription, BillingStarted)
def _billing_started(row: Subscription, event: BillingStarted) -> None:
    row.run_id = event.run_id


@billing.projector(Subscription, Charged)
def _charged(row: Subscription, event: Charged) -> None:
    row.status = "active"
    row.periods_charged += 1
    row.total_charged += event.amount


@billing.projector(Subscription, ChargeChanged)
def _charge_changed(row: Subscription, event: ChargeChanged) -> None:
    row.charge = event.amount


@billing.projector(Subscription, Cancelled)
def _cancelled(row: Subscription, event: Cancelled) -> None:
    row.status = "cancelled"


@billing.projector(Subscription, Ended)
def _ended(row: Subscription, event: Ended) -> None:
    row.status = "ended"


def _new_subscription(subscription_id: uuid.UUID, payload: Subscribe) -> Subscription:
    """The row under the id its creation event names (``create`` keeps an id the entity has)."""
    row = Subscription(email=payload.email, charge=payload.charge, max_periods=payload.max_periods)
    row.id = subscription_id
    return row


subscribe = billing.write_handler(
    "subscription:subscribe",
    billing.pipeline(Subscribe)
    .compute("id", lambda c: uuid.uuid4())
    .create(
        "subscription",
        Subscription,
        data=lambda c: _new_subscription(c.steps["id"], c.payload),
        event=lambda c: Subscribed(
            c.steps["id"], c.payload.email, c.payload.charge, c.payload.max_periods, c.payload.trial_days, c.now
        ),
    )
    .return_(lambda c: ok(c.steps["id"])),
)

cancel = billing.write_handler(
    "subscription:cancel",
    billing.pipeline(Cancel)
    .get_one("subscription", lambda c: select(Subscription).where(Subscription.id == c.payload.subscription_id))
    .guard(
        lambda c: c.steps["subscription"].status in LIVE,
        otherwise=lambda c: fail("unprocessable", f"the subscription is {c.steps['subscription'].status}"),
    )
    .append_event(
        Subscription,
        id=lambda c: c.payload.subscription_id,
        event=lambda c: Cancelled(c.payload.subscription_id, c.payload.reason),
    )
    .return_(lambda c: ok(c.steps["subscription"].periods_charged)),
)

change_charge = billing.write_handler(
    "subscription:change-charge",
    billing.pipeline(ChangeCharge)
    .get_one("subscription", lambda c: select(Subscription).where(Subscription.id == c.payload.subscription_id))
    .guard(
        lambda c: c.steps["subscription"].status in LIVE,
        otherwise=lambda c: fail("unprocessable", f"the subscription is {c.steps['subscription'].status}"),
    )
    .append_event(Subscription, id=lambda c: c.payload.subscription_id, event=lambda c: ChargeChanged(c.payload.amount))
    .return_(lambda c: ok(c.steps["subscription"].charge)),
)

billing_info = billing.query_handler(
    "subscription:billing",
    billing.query_pipeline(BillingQuery)
    .get_one("subscription", lambda c: select(Subscription).where(Subscription.id == c.payload.subscription_id))
    .return_(
        lambda c: ok(
            Billing(
                c.steps["subscription"].status,
                c.steps["subscription"].charge,
                c.steps["subscription"].periods_charged,
                c.steps["subscription"].total_charged,
                c.steps["subscription"].run_id,
            )
        )
    ),
)


def _period_end(started: datetime, trial_days: int, period: int) -> datetime:
    """When billing period ``period`` (1, 2, ...) ends: the trial's end is period 0's."""
    return started + timedelta(days=trial_days) + PERIOD * period


subscription = billing.workflow(
    "subscription",
    trigger=on_event(Subscribed),
    pipeline=billing.workflow_pipeline(Subscribed)
    .append_event(
        Subscription,
        id=lambda c: c.payload.subscription_id,
        event=lambda c: BillingStarted(c.workflow.run_id),
    )
    .send_mail(
        to=lambda c: c.payload.email,
        subject="Welcome",
        body=lambda c: f"Your free trial of {c.payload.trial_days} days has started.",
    )
    .wait_for_event(
        "trial",
        Cancelled,
        key=lambda c: c.payload.subscription_id,
        event_key=lambda e: e.subscription_id,
        timeout=lambda c: _period_end(c.payload.at, c.payload.trial_days, 0),
    )
    .for_each(
        "period",
        over=lambda c: range(1, c.payload.max_periods + 1),
        do=lambda d: d.get_one(
            "current",
            lambda c: select(Subscription).where(Subscription.id == c.payload.subscription_id).with_for_update(),
        ).branch(
            name="bill",
            when=lambda c: c.steps["current"].status in LIVE,
            on_true=lambda b: (
                b.append_event(
                    Subscription,
                    id=lambda c: c.payload.subscription_id,
                    event=lambda c: Charged(c.scope["period"], c.steps["current"].charge),
                )
                .send_mail(
                    to=lambda c: c.payload.email,
                    subject=lambda c: f"Charged {c.steps['current'].charge} for period {c.scope['period']}",
                    body=lambda c: f"Period {c.scope['period']} of {c.payload.max_periods}.",
                )
                .wait_for_event(
                    "cancel",
                    Cancelled,
                    key=lambda c: c.payload.subscription_id,
                    event_key=lambda e: e.subscription_id,
                    timeout=lambda c: _period_end(c.payload.at, c.payload.trial_days, c.scope["period"]),
                )
            ),
        ),
    )
    .get_one("final", lambda c: select(Subscription).where(Subscription.id == c.payload.subscription_id))
    .branch(
        name="goodbye",
        when=lambda c: c.steps["final"].status == "cancelled",
        on_true=lambda b: b.send_mail(
            to=lambda c: c.payload.email,
            subject="Subscription cancelled",
            body=lambda c: f"Cancelled after {c.steps['final'].periods_charged} paid periods.",
        ),
        on_false=lambda b: b.append_event(
            Subscription,
            id=lambda c: c.payload.subscription_id,
            event=lambda c: Ended(c.steps["final"].periods_charged),
        ).send_mail(
            to=lambda c: c.payload.email,
            subject="Subscription ended",
            body=lambda c: f"All {c.payload.max_periods} periods are paid. Thank you!",
        ),
    )
    .return_(lambda c: ok((c.steps["final"].status, c.steps["final"].total_charged))),
)
