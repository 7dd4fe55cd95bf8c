"""A run the event feed starts late waits from its trigger's place in the event order.

Workers lag behind the events (a deploy, an outage): an order is placed and paid a second
later, and only then does a worker's feed start the order's saga.  Before, its
``wait_for_event`` matched only events its own transaction had not seen, so the payment,
committed before the feed read the order, never woke it and the saga timed out.  Now the
first segment's wait counts every event after the trigger as unseen: the same answer as
a worker that ran all along.  Events before the trigger, of another tenant, and the run's
own appends still do not wake it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, Session, mapped_column

from kumiko_typed import App, Entity, Feature, ok, on_event
from kumiko_typed._eventstore import append
from kumiko_typed._tables import workflow_waits
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


@attrs.frozen
class Placed:
    order: uuid.UUID


@attrs.frozen
class Paid:
    order: uuid.UUID


class LateOrder(Entity):
    __tablename__ = "late_order"
    note: Mapped[str] = mapped_column(default="")


feature = Feature("late")
feature.entity(LateOrder)
feature.event(Placed, name="late-placed")
feature.event(Paid, name="late-paid")

saga = feature.workflow(
    "saga",
    trigger=on_event(Placed),
    pipeline=feature.workflow_pipeline(Placed)
    .wait_for_event("paid", Paid, key=lambda c: c.payload.order, event_key=lambda e: e.order, timeout="PT1H")
    .return_(lambda c: ok(c.steps["paid"] is not None)),
)

# Appends the awaited event itself before it waits: its own event must not wake it.
selfpaying = Feature("selfpay")
selfpaying.event(Placed, name="self-placed")
selfpaying.event(Paid, name="self-paid")
selfpaying.entity(LateOrder)
selfpay = selfpaying.workflow(
    "selfpay",
    trigger=on_event(Placed),
    pipeline=selfpaying.workflow_pipeline(Placed)
    .create("order", LateOrder, data=lambda c: LateOrder(note="self"), event=lambda c: Paid(c.payload.order))
    .wait_for_event("paid", Paid, key=lambda c: c.payload.order, event_key=lambda e: e.order, timeout="PT1H")
    .return_(lambda c: ok(c.steps["paid"] is not None)),
)

# Waits for a second order of the key its trigger has: the trigger is before its wait.
repeating = Feature("repeat")
repeating.event(Placed, name="repeat-placed")
again = repeating.workflow(
    "again",
    trigger=on_event(Placed),
    pipeline=repeating.workflow_pipeline(Placed)
    .wait_for_event("again", Placed, key=lambda c: c.payload.order, event_key=lambda e: e.order, timeout="PT1H")
    .return_(lambda c: ok(c.steps["again"] is not None)),
)


def _append(app: App, *made: tuple[str, object, uuid.UUID]) -> None:
    """Append each (type, event, tenant) on a stream of its own, in one transaction."""
    with Session(app.engine) as session, session.begin():
        for name, event, tenant in made:
            append(
                session,
                stream_id=uuid.uuid4(),
                aggregate_type="late-order",
                stream_version=1,
                type=name,
                payload=attrs.asdict(event, value_serializer=lambda _i, _a, v: str(v)),
                tenant_id=tenant,
                user_id=None,
                correlation_id=None,
                occurred_at=T0,
            )


def _outcome(app: App, clock: FakeClock, workflow: Any = saga, key: str = "paid") -> object:
    """Run the workers' passes as a worker that comes back would, then past the timeout:
    what the run's wait got (``None``: it timed out)."""
    for _ in range(3):
        app.run_worker(once=True)
    clock.advance(hours=2)
    app.run_worker(once=True)
    (run,) = app.runs(workflow)
    assert run.status == "completed", run
    return run.steps[key]


def test_a_payment_committed_before_the_late_feed_read_the_order_wakes_its_saga(
    app_on: Callable[..., App],
) -> None:
    clock = FakeClock(T0)
    app = app_on([feature], clock=clock)
    order, tenant = uuid.uuid4(), uuid.uuid4()
    _append(app, ("late-placed", Placed(order), tenant))
    _append(app, ("late-paid", Paid(order), tenant))  # a second later; no worker ran yet

    assert _outcome(app, clock) == Paid(order)


def test_a_payment_after_the_order_in_its_own_transaction_wakes_its_saga(app_on: Callable[..., App]) -> None:
    clock = FakeClock(T0)
    app = app_on([feature], clock=clock)
    order, tenant = uuid.uuid4(), uuid.uuid4()
    _append(app, ("late-placed", Placed(order), tenant), ("late-paid", Paid(order), tenant))

    assert _outcome(app, clock) == Paid(order)


def test_a_payment_before_the_order_does_not_wake_its_saga(app_on: Callable[..., App]) -> None:
    """Before the trigger in the event order, in another transaction or in the trigger's."""
    clock = FakeClock(T0)
    app = app_on([feature], clock=clock)
    order, tenant = uuid.uuid4(), uuid.uuid4()
    _append(app, ("late-paid", Paid(order), tenant))
    _append(app, ("late-paid", Paid(order), tenant), ("late-placed", Placed(order), tenant))

    assert _outcome(app, clock) is None


def test_another_tenants_payment_after_the_order_does_not_wake_its_saga(app_on: Callable[..., App]) -> None:
    clock = FakeClock(T0)
    app = app_on([feature], clock=clock)
    order, tenant = uuid.uuid4(), uuid.uuid4()
    _append(app, ("late-placed", Placed(order), tenant))
    _append(app, ("late-paid", Paid(order), uuid.uuid4()))

    assert _outcome(app, clock) is None


def test_a_saga_started_in_time_still_gets_a_payment_that_comes_later(app_on: Callable[..., App]) -> None:
    clock = FakeClock(T0)
    app = app_on([feature], clock=clock)
    order, tenant = uuid.uuid4(), uuid.uuid4()
    _append(app, ("late-placed", Placed(order), tenant))
    app.run_worker(once=True)
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(workflow_waits)).scalar() == 1
    _append(app, ("late-paid", Paid(order), tenant))

    assert _outcome(app, clock) == Paid(order)


def test_a_run_is_not_woken_by_the_awaited_event_it_appended_itself(app_on: Callable[..., App]) -> None:
    """Its first segment appends a ``Paid`` of its own order before it waits: from the
    trigger's place that event would count, so such a run waits from its own view."""
    clock = FakeClock(T0)
    app = app_on([selfpaying], clock=clock)
    order, tenant = uuid.uuid4(), uuid.uuid4()
    _append(app, ("self-placed", Placed(order), tenant))

    assert _outcome(app, clock, selfpay) is None


def test_a_run_waiting_for_its_triggers_type_is_not_woken_by_its_trigger(app_on: Callable[..., App]) -> None:
    """The wait starts just after the trigger, not at it: a run that waits for another
    event of its trigger's type and key is not handed its own trigger (a mutation run
    found the trigger's own place untested)."""
    clock = FakeClock(T0)
    app = app_on([repeating], clock=clock)
    order, tenant = uuid.uuid4(), uuid.uuid4()
    _append(app, ("repeat-placed", Placed(order), tenant))

    assert _outcome(app, clock, again, "again") is None
