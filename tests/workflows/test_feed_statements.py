"""What the workers' event feed sends per event that wakes no run (most events: a shop's
payments that no workflow waits on), on SQLite and PostgreSQL.  Counted as the statements
on the waits table a worker pass sends for n and 4n such events: an event of a type some
run waits for costs one (its key's waits in its group), an event of a type no run waits
for none.  The feed stepped through the match index for each event's groups, two more
statements per event whatever its type (bench/event_feed.py: 7-25 times a feed written
by hand in Core)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from _sql_log import statements
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
class Note:
    n: int
    shipped: bool


class FsParcel(Entity):
    __tablename__ = "fs_parcel"
    n: Mapped[int]


def _shop() -> tuple[Feature[Any], Any, Any]:
    f: Feature[Any] = Feature("fs")
    f.entity(FsParcel)
    f.event(Paid)
    f.event(Shipped)
    saga = f.workflow(
        "saga",
        trigger=manual(Order),
        pipeline=f.workflow_pipeline(Order)
        .wait_for_event("paid", Paid, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout=timedelta(days=1))
        .compute("done", lambda c: c.steps["paid"] is not None),
    )
    note = f.write_handler(
        "note",
        f.pipeline(Note)
        .create(
            "parcel",
            FsParcel,
            data=lambda c: FsParcel(n=c.payload.n),
            event=lambda c: Shipped(c.payload.n) if c.payload.shipped else Paid(c.payload.n),
        )
        .return_(lambda c: ok(c.payload.n)),
    )
    return f, saga, note


@pytest.mark.parametrize(("shipped", "per_event"), [(False, 1), (True, 0)], ids=["waited-type", "unwaited-type"])
def test_an_event_that_wakes_no_run_costs_the_feed_one_statement_at_most(
    app_on: Callable[..., App], user: User, shipped: bool, per_event: int
) -> None:
    f, saga, note = _shop()
    app = app_on([f], clock=FakeClock(T0))
    waiting = [app.start_workflow(saga, Order(n), user=user) for n in range(5)]
    app.run_worker(once=True)  # the runs reach their wait, the feed arms it
    numbers = iter(range(100, 10_000))

    def on_waits(events: int) -> int:
        for _ in range(events):
            assert isinstance(app.dispatch(note, Note(next(numbers), shipped), user=user).data, int)
        with statements(app.engine) as sent:
            assert app.run_worker(once=True)["resumed"] == 0
        return sum("kumiko_workflow_waits" in s for s in sent)

    few, many = on_waits(20), on_waits(80)
    assert many - few == 60 * per_event, (few, many)
    assert [run_info(app, r).status for r in waiting] == ["suspended"] * 5
    # The waits are still found: a payment for one of them wakes it.
    assert isinstance(app.dispatch(note, Note(3, False), user=user).data, int)
    assert app.run_worker(once=True)["resumed"] == 1
    assert run_info(app, waiting[3]).steps["done"] is True
