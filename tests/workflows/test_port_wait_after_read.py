"""The recipe docs/workflows.md gives for an event that may come before a run waits for it
(used by examples/ports/order_saga.py): read the aggregate the event is appended to with
``.with_for_update()`` and wait only when the event has not happened yet.

Here the writer of the event commits while the run is between that read and its wait,
the one moment a plain read would lose it on PostgreSQL (the wait sees only what commits
after it; checked by hand: without the lock the run timed out).  With the lock the writer
waits for the run's segment, so its event comes after the wait and wakes the run.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed.testing import FakeClock


class T15Parcel(Entity):
    __tablename__ = "t15_parcel"
    delivered: Mapped[bool] = mapped_column(default=False)


@attrs.frozen
class Delivered:
    parcel_id: uuid.UUID


@attrs.frozen
class NewParcel:
    pass


@attrs.frozen
class Deliver:
    parcel_id: uuid.UUID


@attrs.frozen
class Watch:
    parcel_id: uuid.UUID


#: Run between the run's read and its wait.
BETWEEN: list[Callable[[], object]] = []

feature = Feature("t15")
feature.entity(T15Parcel)
feature.event(Delivered, name="t15-delivered")


@feature.projector(T15Parcel, Delivered)
def _delivered(row: T15Parcel, event: Delivered) -> None:
    row.delivered = True


new_parcel = feature.write_handler(
    "parcel:new",
    feature.pipeline(NewParcel)
    .create("parcel", T15Parcel, data=lambda c: T15Parcel())
    .return_(lambda c: ok(c.steps["parcel"].id)),
)

deliver = feature.write_handler(
    "parcel:deliver",
    feature.pipeline(Deliver)
    .get_one("parcel", lambda c: sa.select(T15Parcel).where(T15Parcel.id == c.payload.parcel_id))
    .append_event(T15Parcel, id=lambda c: c.payload.parcel_id, event=lambda c: Delivered(c.payload.parcel_id))
    .return_(lambda c: ok(None)),
)

watch = feature.workflow(
    "watch",
    trigger=manual(Watch),
    pipeline=feature.workflow_pipeline(Watch)
    .get_one("parcel", lambda c: sa.select(T15Parcel).where(T15Parcel.id == c.payload.parcel_id).with_for_update())
    .compute("between", lambda c: [hook() for hook in BETWEEN])
    .branch(
        name="await",
        when=lambda c: not c.steps["parcel"].delivered,
        on_true=lambda b: b.wait_for_event(
            "delivery", Delivered, key=lambda c: c.payload.parcel_id, event_key=lambda e: e.parcel_id, timeout="P1D"
        ),
    )
    .return_(lambda c: ok(c.steps["parcel"].delivered or c.steps["delivery"] is not None)),
)


def test_an_event_committing_between_the_locked_read_and_the_wait_wakes_the_run(
    app_on: Callable[..., App], user: User
) -> None:
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    app = app_on([feature], clock=clock)
    created = app.dispatch(new_parcel, NewParcel(), user=user)
    assert isinstance(created, Ok)
    parcel = created.data
    done = threading.Event()
    results: list[object] = []

    def writer() -> None:
        results.append(app.dispatch(deliver, Deliver(parcel), user=user))
        done.set()

    def between() -> None:
        threading.Thread(target=writer).start()
        # The writer needs the parcel's row: it cannot commit while this segment holds it.
        assert not done.wait(1.0)

    BETWEEN.append(between)
    try:
        run_id = app.start_workflow(watch, Watch(parcel), user=user)
    finally:
        BETWEEN.clear()
    assert done.wait(30) and results == [Ok(None)]
    app.run_worker(once=True)
    clock.advance(timedelta(days=1))
    app.run_worker(once=True)
    assert app.result(watch, run_id, user=user) == Ok(True)
    run = app.get_run(run_id)
    assert run is not None and run.steps["delivery"] == Delivered(parcel)
