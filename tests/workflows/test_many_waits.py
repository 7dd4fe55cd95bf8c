"""Many runs waiting for one event type (a saga per order waiting for its payment): an
event wakes its run by reading the waits of its key, not every wait of the type, on
SQLite and PostgreSQL.  Counted as the wait rows a worker pass reads, at n and 4n
waiting runs: the pass read all of them per event (10,000 waits: 0.5 s a payment).

And an event that wakes no run (most events: a shop's payments no workflow waits on)
costs the feed one statement on the waits table, its key's waits in its group, or none
if no run waits for its type; counted for n and 4n such events.  The feed stepped
through the match index for each event's groups, two more statements per event whatever
its type (bench/event_feed.py: 7-25 times a feed written by hand in Core)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from _sql_log import rows_read, statements
from _support import run_info
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, User, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)


@attrs.frozen
class Order:
    n: int


@attrs.frozen
class Paid:
    n: int


@attrs.frozen
class Shipped:
    n: int


@attrs.frozen
class Pay:
    n: int
    shipped: bool = False


class MwPayment(Entity):
    __tablename__ = "mw_payment"
    n: Mapped[int]


def _saga() -> tuple[Feature[Any], Any, Any]:
    """The saga, and a handler appending a payment's ``Paid`` (``Shipped`` if asked, a
    type no run waits for)."""
    f: Feature[Any] = Feature("mw")
    f.entity(MwPayment)
    f.event(Paid)
    f.event(Shipped)
    saga = f.workflow(
        "saga",
        trigger=manual(Order),
        pipeline=f.workflow_pipeline(Order)
        .wait_for_event("paid", Paid, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout=timedelta(days=1))
        .compute("done", lambda c: c.steps["paid"] is not None),
    )
    pay = f.write_handler(
        "pay",
        f.pipeline(Pay)
        .create("payment", MwPayment, data=lambda c: MwPayment(n=c.payload.n))
        .append_event(
            MwPayment,
            id=lambda c: c.steps["payment"].id,
            event=lambda c: Shipped(c.payload.n) if c.payload.shipped else Paid(c.payload.n),
        )
        .return_(lambda c: ok(c.payload.n)),
    )
    return f, saga, pay


def test_an_event_reads_the_waits_of_its_key_not_all_of_its_type(app_on: Callable[..., App], user: User) -> None:
    f, saga, pay = _saga()
    app = app_on([f], clock=FakeClock(T0))
    runs: dict[int, uuid.UUID] = {}

    def waiting(upto: int) -> None:
        for n in range(len(runs), upto):
            runs[n] = app.start_workflow(saga, Order(n), user=user)
        app.run_worker(once=True)  # the feed arms the new waits

    def paid(n: int) -> int:
        assert isinstance(app.dispatch(pay, Pay(n), user=user).data, int)
        with rows_read(app.engine, "kumiko_workflow_waits") as read:
            assert app.run_worker(once=True)["resumed"] == 1
        info = run_info(app, runs[n])
        assert (info.status, info.steps["done"]) == ("completed", True)
        return read.get("kumiko_workflow_waits", 0)

    waiting(10)
    at_n = paid(3)
    waiting(40)
    at_4n = paid(27)
    assert at_4n == at_n <= 3, (at_n, at_4n)
    # The others still wait for theirs.
    assert [run_info(app, r).status for n, r in runs.items() if n not in (3, 27)] == ["suspended"] * 38


@pytest.mark.parametrize("shipped", [False, True], ids=["waited-type", "unwaited-type"])
def test_an_event_that_wakes_no_run_costs_the_feed_no_statement(
    app_on: Callable[..., App], user: User, shipped: bool
) -> None:
    """Of a type no run waits for, or of a key none does: a feed transaction's events
    are matched against the waits in a probe per window of events (32, 32, 64, 128:
    20 events one, 80 three), not a statement per event (before, an event of a waited
    type read its key's waits in one of its own: 60 more for 80 events than for 20)."""
    f, saga, pay = _saga()
    app = app_on([f], clock=FakeClock(T0))
    waiting = [app.start_workflow(saga, Order(n), user=user) for n in range(5)]
    app.run_worker(once=True)  # the runs reach their wait, the feed arms it
    numbers = iter(range(100, 10_000))

    def on_waits(events: int) -> int:
        for _ in range(events):
            assert isinstance(app.dispatch(pay, Pay(next(numbers), shipped), user=user).data, int)
        with statements(app.engine) as sent:
            assert app.run_worker(once=True)["resumed"] == 0
        return sum("kumiko_workflow_waits" in s for s in sent)

    few, many = on_waits(20), on_waits(80)
    assert many <= few + 2, (few, many)
    assert [run_info(app, r).status for r in waiting] == ["suspended"] * 5
    # The waits are still found: a payment for one of them wakes it.
    assert isinstance(app.dispatch(pay, Pay(3), user=user).data, int)
    assert app.run_worker(once=True)["resumed"] == 1
    assert run_info(app, waiting[3]).steps["done"] is True
