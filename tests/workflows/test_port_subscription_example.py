"""Temporal's subscription sample as an example app (examples/ports/subscription.py), run
end to end with a FakeClock on SQLite and PostgreSQL: the trial, billing periods, a charge
changed between periods, cancellation in the trial, in a period and in the gap between a
period's end and the worker that takes it, and another tenant's attempts."""

from __future__ import annotations

import email
import email.policy
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from _support import failure_of, ok_data

from examples.ports.subscription import (
    PERIOD,
    TRIAL,
    Billing,
    BillingQuery,
    BillingStarted,
    Cancel,
    Cancelled,
    ChangeCharge,
    ChargeChanged,
    Charged,
    Ended,
    Subscribe,
    Subscribed,
    Subscription,
    billing,
    billing_info,
    cancel,
    change_charge,
    subscribe,
    subscription,
)
from kumiko_typed import App, Failure, MaildirTransport, Ok, User
from kumiko_typed.testing import FakeClock

D = Decimal
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock, tmp_path: Path) -> App:
    return app_on([billing], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))


def _subscribed(
    app: App, user: User, address: str, charge: str = "9.99", periods: int = 3
) -> tuple[uuid.UUID, uuid.UUID]:
    """A new subscription, and its billing run (started by a worker pass from the creation
    event, which records the run's id on the subscription)."""
    subscription_id: uuid.UUID = ok_data(app.dispatch(subscribe, Subscribe(address, D(charge), periods), user=user))
    assert app.run_worker(once=True)["started"] == 1
    run_id = _billing(app, user, subscription_id).run_id
    assert run_id is not None
    return subscription_id, run_id


def _billing(app: App, user: User, subscription_id: uuid.UUID) -> Billing:
    info: Billing = ok_data(app.query(billing_info, BillingQuery(subscription_id), user=user))
    return info


def _mail(tmp_path: Path) -> list[tuple[str, str]]:
    folder = tmp_path / "mail"
    parsed = [email.message_from_bytes(p.read_bytes(), policy=email.policy.default) for p in folder.rglob("*.eml")]
    return sorted((str(m["To"]), str(m["Subject"])) for m in parsed)


def test_a_subscription_bills_every_period_at_the_charge_of_the_day(
    app: App, clock: FakeClock, user: User, tmp_path: Path
) -> None:
    sub, run = _subscribed(app, user, "ann@example.com", periods=3)
    clock.advance(TRIAL - timedelta(seconds=1))
    assert app.run_worker(once=True)["resumed"] == 0
    assert _billing(app, user, sub).status == "trial"
    clock.advance(seconds=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.dispatch(change_charge, ChangeCharge(sub, D("12.50")), user=user) == Ok(D("12.50"))
    for _period in (2, 3):
        clock.advance(PERIOD)
        assert app.run_worker(once=True)["resumed"] == 1
    assert failure_of(app.result(subscription, run, user=user), "status_conflict").details == {"status": "suspended"}
    clock.advance(PERIOD)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(subscription, run, user=user) == Ok(("ended", D("34.99")))
    assert _billing(app, user, sub) == Billing("ended", D("12.50"), 3, D("34.99"), run)
    app.run_worker(once=True)
    assert _mail(tmp_path) == [
        ("ann@example.com", "Charged 12.50 for period 2"),
        ("ann@example.com", "Charged 12.50 for period 3"),
        ("ann@example.com", "Charged 9.99 for period 1"),
        ("ann@example.com", "Subscription ended"),
        ("ann@example.com", "Welcome"),
    ]
    stream = ok_data(app.read_stream(Subscription, sub, user=user))
    assert [e.event for e in stream] == [
        Subscribed(sub, "ann@example.com", D("9.99"), 3, 14, START),
        BillingStarted(run),
        Charged(1, D("9.99")),
        ChargeChanged(D("12.50")),
        Charged(2, D("12.50")),
        Charged(3, D("12.50")),
        Ended(3),
    ]
    assert ok_data(app.rebuild_projection(Subscription, user=user, verify=True)).matches
    # An ended subscription is neither cancelled nor repriced.
    assert app.dispatch(cancel, Cancel(sub), user=user) == Failure("unprocessable", "the subscription is ended")
    assert app.dispatch(change_charge, ChangeCharge(sub, D(1)), user=user) == Failure(
        "unprocessable", "the subscription is ended"
    )


def test_cancelling_in_the_trial_or_in_a_period_stops_the_billing_at_once(
    app: App, clock: FakeClock, user: User, tmp_path: Path
) -> None:
    in_trial, trial_run = _subscribed(app, user, "bob@example.com")
    in_period, period_run = _subscribed(app, user, "cy@example.com")
    assert app.dispatch(cancel, Cancel(in_trial, "changed my mind"), user=user) == Ok(0)
    assert app.run_worker(once=True)["resumed"] == 1  # the event wakes it, no time passed
    assert app.result(subscription, trial_run, user=user) == Ok(("cancelled", D("0.00")))

    clock.advance(TRIAL)
    assert app.run_worker(once=True)["resumed"] == 1
    clock.advance(PERIOD)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.dispatch(cancel, Cancel(in_period), user=user) == Ok(2)
    assert app.dispatch(cancel, Cancel(in_period), user=user) == Failure(
        "unprocessable", "the subscription is cancelled"
    )
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(subscription, period_run, user=user) == Ok(("cancelled", D("19.98")))
    clock.advance(PERIOD * 5)
    assert app.run_worker(once=True)["resumed"] == 0  # nothing waits any more
    assert _mail(tmp_path) == [
        ("bob@example.com", "Subscription cancelled"),
        ("bob@example.com", "Welcome"),
        ("cy@example.com", "Charged 9.99 for period 1"),
        ("cy@example.com", "Charged 9.99 for period 2"),
        ("cy@example.com", "Subscription cancelled"),
        ("cy@example.com", "Welcome"),
    ]
    assert ok_data(app.read_stream(Subscription, in_trial, user=user))[-1].event == Cancelled(
        in_trial, "changed my mind"
    )


def test_a_cancel_after_a_period_ended_but_before_a_worker_took_it_is_not_charged(
    app: App, clock: FakeClock, user: User, tmp_path: Path
) -> None:
    """The period's wait times out (the cancel occurred after its timeout) and the next wait
    would never see the cancel (it came before that wait): the locked read of the row before
    each charge is what stops the run."""
    sub, run = _subscribed(app, user, "di@example.com")
    clock.advance(TRIAL + timedelta(hours=1))  # the trial is over; no worker ran
    assert app.dispatch(cancel, Cancel(sub), user=user) == Ok(0)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(subscription, run, user=user) == Ok(("cancelled", D("0.00")))
    assert [s for _, s in _mail(tmp_path)] == ["Subscription cancelled", "Welcome"]


def test_a_cancel_before_the_run_started_reaches_it(app: App, user: User, tmp_path: Path) -> None:
    """A worker that reads the creation event only after the cancel (workers were down) still
    starts the run from the event's place in the event order: its trial wait gets the cancel."""
    sub: uuid.UUID = ok_data(app.dispatch(subscribe, Subscribe("ed@example.com", D("5"), 2), user=user))
    assert app.dispatch(cancel, Cancel(sub), user=user) == Ok(0)
    assert app.run_worker(once=True)["started"] == 1
    run = _billing(app, user, sub).run_id
    assert run is not None
    assert app.run_worker(once=True)["resumed"] in (0, 1)
    assert app.result(subscription, run, user=user) == Ok(("cancelled", D("0.00")))


def test_a_customers_own_trial_and_a_late_worker_do_not_move_the_period_ends(
    app: App, clock: FakeClock, user: User
) -> None:
    """Period n ends n periods after the trial's end, counted from the subscription: a period
    a worker took ten days late is ten days shorter, not the whole schedule ten days later
    (each period's wait is a deadline, not a duration from when the worker got there)."""
    start = clock()
    sub: uuid.UUID = ok_data(app.dispatch(subscribe, Subscribe("gus@example.com", D("3"), 3, trial_days=3), user=user))
    clock.advance(timedelta(days=1))  # the run starts a day late: its trial is still three days long
    assert app.run_worker(once=True)["started"] == 1
    run = _billing(app, user, sub).run_id
    assert run is not None
    info = app.get_run(run)
    assert info is not None and info.wake_at == start + timedelta(days=3)
    clock.now = start + timedelta(days=3 + 10)  # the trial ended ten days ago: the workers were down
    assert app.run_worker(once=True)["resumed"] == 1
    info = app.get_run(run)
    assert info is not None and info.wake_at == start + timedelta(days=3) + PERIOD
    clock.now = start + timedelta(days=3) + PERIOD
    assert app.run_worker(once=True)["resumed"] == 1
    info = app.get_run(run)
    assert info is not None and info.wake_at == start + timedelta(days=3) + 2 * PERIOD
    assert _billing(app, user, sub).periods_charged == 2


def test_another_tenant_cannot_cancel_reprice_or_read_the_subscription(
    app: App, clock: FakeClock, user: User, make_user: Callable[..., User]
) -> None:
    sub, run = _subscribed(app, user, "fay@example.com", periods=1)
    stranger = make_user()
    for result in (
        app.dispatch(cancel, Cancel(sub), user=stranger),
        app.dispatch(change_charge, ChangeCharge(sub, D("0.01")), user=stranger),
        app.query(billing_info, BillingQuery(sub), user=stranger),
        app.result(subscription, run, user=stranger),
        app.cancel_run(run, user=stranger, reason="mine now"),
    ):
        assert failure_of(result).code == "not_found", result
    # The stranger's own cancel of a subscription of the same id would not reach the run
    # either: waits match within the run's tenant.
    clock.advance(TRIAL)
    assert app.run_worker(once=True)["resumed"] == 1
    clock.advance(PERIOD)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(subscription, run, user=user) == Ok(("ended", D("9.99")))


def test_untrusted_subscriptions_are_validated(app: App, user: User) -> None:
    refused = failure_of(
        app.dispatch_json(
            "billing:subscription:subscribe", {"email": "nobody", "charge": "0.001", "max_periods": 0}, user=user
        ),
        "validation_error",
    )
    assert [d["path"] for d in refused.details] == ["$.email", "$.charge", "$.max_periods"]
    assert app.run_worker(once=True)["started"] == 0
