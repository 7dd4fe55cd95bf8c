"""Temporal's subscription sample, ported: a customer's run mails a welcome, waits out a
trial, then charges one billing period after another (a ``for_each`` whose body waits), and
ends early when the customer cancels (an event the trial's and each period's
``wait_for_event`` listens for; a ``guard`` fails the run in a period). A period count of
zero completes right after the trial. Both databases, mail to a maildir folder."""

from __future__ import annotations

import email
import email.policy
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, MaildirTransport, Ok, User, fail, manual, ok
from kumiko_typed.testing import FakeClock

TRIAL = timedelta(days=14)
PERIOD = timedelta(days=30)


class SbCustomer(Entity):
    __tablename__ = "sb_customer"
    email: Mapped[str] = mapped_column(sa.String(200))
    cancelled: Mapped[bool] = mapped_column(sa.Boolean, default=False)


@attrs.frozen
class NewCustomer:
    email: str


@attrs.frozen
class Cancel:
    customer: uuid.UUID


@attrs.frozen
class Cancelled:
    customer: uuid.UUID


@attrs.frozen
class Subscribe:
    customer: uuid.UUID
    email: str
    periods: int


billing = Feature("billing", requires=["mail.send"])
billing.entity(SbCustomer)
billing.event(Cancelled, name="cancelled")


@billing.projector(SbCustomer, Cancelled)
def _cancelled(row: SbCustomer, event: Cancelled) -> None:
    row.cancelled = True


new_customer = billing.write_handler(
    "customer:new",
    billing.pipeline(NewCustomer)
    .create("customer", SbCustomer, data=lambda c: SbCustomer(email=c.payload.email))
    .return_(lambda c: ok(c.steps["customer"].id)),
)
cancel = billing.write_handler(
    "customer:cancel",
    billing.pipeline(Cancel)
    .append_event(SbCustomer, id=lambda c: c.payload.customer, event=lambda c: Cancelled(c.payload.customer))
    .return_(lambda c: ok("cancelled")),
)
subscription = billing.workflow(
    "subscription",
    trigger=manual(Subscribe),
    pipeline=billing.workflow_pipeline(Subscribe)
    .send_mail(to=lambda c: c.payload.email, subject="Welcome", body="Your trial has started.")
    .wait_for_event(
        "trial_cancel", Cancelled, key=lambda c: c.payload.customer, event_key=lambda e: e.customer, timeout=TRIAL
    )
    .branch(
        when=lambda c: c.steps["trial_cancel"] is not None,
        on_true=lambda b: b.send_mail(
            to=lambda c: c.payload.email, subject="Goodbye", body="Cancelled in trial."
        ).compute("outcome", lambda c: "cancelled in trial"),
        on_false=lambda b: b.for_each(
            "period",
            over=lambda c: range(1, c.payload.periods + 1),
            do=lambda d: (
                d.send_mail(
                    to=lambda c: c.payload.email, subject=lambda c: f"Charged for period {c.scope['period']}", body="."
                )
                .wait_for_event(
                    "period_cancel",
                    Cancelled,
                    key=lambda c: c.payload.customer,
                    event_key=lambda e: e.customer,
                    timeout=PERIOD,
                )
                .guard(
                    when=lambda c: c.steps["period_cancel"] is None,
                    otherwise=lambda c: fail("cancelled", f"cancelled in period {c.scope['period']}"),
                )
            ),
        ).compute("outcome", lambda c: "all periods charged"),
    )
    .return_(lambda c: ok(c.steps["outcome"])),
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 1, 5, 9, 0, tzinfo=UTC))


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock, tmp_path: Path) -> App:
    return app_on([billing], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))


def _subscribed(app: App, user: User, address: str, periods: int) -> tuple[uuid.UUID, uuid.UUID]:
    customer: uuid.UUID = ok_data(app.dispatch(new_customer, NewCustomer(address), user=user))
    run = app.start_workflow(subscription, Subscribe(customer, address, periods), user=user)
    assert isinstance(run, uuid.UUID), run
    return customer, run


def _mail(tmp_path: Path) -> list[tuple[str, str]]:
    folder = tmp_path / "mail"
    if not folder.exists():
        return []
    parsed = [email.message_from_bytes(p.read_bytes(), policy=email.policy.default) for p in folder.iterdir()]
    return sorted((str(m["To"]), str(m["Subject"])) for m in parsed)


def test_a_subscription_charges_every_period_then_completes(
    app: App, clock: FakeClock, user: User, tmp_path: Path
) -> None:
    _customer, run = _subscribed(app, user, "ann@example.com", periods=2)
    app.run_worker(once=True)
    clock.advance(TRIAL - timedelta(seconds=1))
    assert app.run_worker(once=True)["resumed"] == 0
    clock.advance(seconds=1)
    assert app.run_worker(once=True)["resumed"] == 1
    clock.advance(PERIOD)
    assert app.run_worker(once=True)["resumed"] == 1
    info = app.get_run(run)
    assert info is not None and info.status == "suspended"
    clock.advance(PERIOD)
    app.run_worker(once=True)
    assert app.result(subscription, run, user=user) == Ok("all periods charged")
    app.run_worker(once=True)
    assert _mail(tmp_path) == [
        ("ann@example.com", "Charged for period 1"),
        ("ann@example.com", "Charged for period 2"),
        ("ann@example.com", "Welcome"),
    ]


def test_cancelling_in_the_trial_and_in_a_period_ends_only_that_customers_run(
    app: App, clock: FakeClock, user: User, tmp_path: Path
) -> None:
    trial_customer, in_trial = _subscribed(app, user, "bob@example.com", periods=3)
    period_customer, in_period = _subscribed(app, user, "cy@example.com", periods=3)
    _none_customer, no_periods = _subscribed(app, user, "di@example.com", periods=0)
    app.run_worker(once=True)
    assert app.dispatch(cancel, Cancel(trial_customer), user=user) == Ok("cancelled")
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(subscription, in_trial, user=user) == Ok("cancelled in trial")

    clock.advance(TRIAL)
    assert app.run_worker(once=True)["resumed"] == 2
    assert app.result(subscription, no_periods, user=user) == Ok("all periods charged")
    clock.advance(PERIOD)
    app.run_worker(once=True)
    assert app.dispatch(cancel, Cancel(period_customer), user=user) == Ok("cancelled")
    assert app.run_worker(once=True)["resumed"] == 1
    refused = failure_of(app.result(subscription, in_period, user=user), "status_conflict")
    assert refused.details["error"] == {"code": "cancelled", "message": "cancelled in period 2"}
    # A cancelled customer's late period mail never goes out; nothing else is waiting.
    clock.advance(PERIOD * 3)
    assert app.run_worker(once=True)["resumed"] == 0
    assert _mail(tmp_path) == [
        ("bob@example.com", "Goodbye"),
        ("bob@example.com", "Welcome"),
        ("cy@example.com", "Charged for period 1"),
        ("cy@example.com", "Charged for period 2"),
        ("cy@example.com", "Welcome"),
        ("di@example.com", "Welcome"),
    ]


def test_another_tenants_cancel_of_the_same_customer_id_does_not_end_the_run(
    app: App, clock: FakeClock, user: User
) -> None:
    customer, run = _subscribed(app, user, "eve@example.com", periods=1)
    app.run_worker(once=True)
    stranger = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset())
    # The stranger cannot append to this tenant's customer at all, and its own event with
    # the same key does not reach the run.
    assert failure_of(app.dispatch(cancel, Cancel(customer), user=stranger)).code == "not_found"
    theirs = ok_data(app.dispatch(new_customer, NewCustomer("mallory@example.com"), user=stranger))
    assert app.dispatch(cancel, Cancel(theirs), user=stranger) == Ok("cancelled")
    assert app.run_worker(once=True)["resumed"] == 0
    clock.advance(TRIAL)  # a period's wait starts when the trial's ends, not when it was due
    assert app.run_worker(once=True)["resumed"] == 1
    clock.advance(PERIOD)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(subscription, run, user=user) == Ok("all periods charged")
