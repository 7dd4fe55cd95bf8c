"""A deferred foreign key broken by one run's segment in a worker's pass fails that run
alone, as a dispatch's COMMIT refusal is answered; the other runs of the pass go on.
A worker runs many segments in one transaction, each in a savepoint, and a deferred key is
checked at the COMMIT, not at a savepoint's release: the pass's COMMIT failed, rolled back
every run's segment and raised ``IntegrityError`` out of ``run_worker``, at every pass —
for resumed runs, for runs an event starts (the event feed then stood still for every
workflow) and for cron runs (their cursor too).  Both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy.orm import Mapped, Session, mapped_column

from kumiko_typed import App, CronTick, Entity, Feature, User, cron, manual, ok, on_event
from kumiko_typed._eventstore import append
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]


class DkDesk(Entity):
    __tablename__ = "dk_desk"


class DkLoan(Entity):
    __tablename__ = "dk_loan"
    desk_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("dk_desk.id", deferrable=True, initially="DEFERRED"))


@attrs.frozen
class Lend:
    desk: uuid.UUID


f: Feature[Any] = Feature("dk")
f.entity(DkDesk)
f.entity(DkLoan)

f.event(Lend, name="lent")
started = f.workflow(
    "on_lent",
    trigger=on_event(Lend),
    pipeline=f.workflow_pipeline(Lend).create("loan", DkLoan, data=lambda c: DkLoan(desk_id=c.payload.desk)),
)
ticking = f.workflow(
    "minutely",
    trigger=cron("* * * * *"),
    pipeline=f.workflow_pipeline(CronTick).create("loan", DkLoan, data=lambda c: DkLoan(desk_id=uuid.uuid4())),
)


@attrs.frozen
class Open:
    pass


open_desk = f.write_handler(
    "open", f.pipeline(Open).create("desk", DkDesk, data=lambda c: DkDesk()).return_(lambda c: ok(c.steps["desk"].id))
)
lend = f.workflow(
    "lend",
    trigger=manual(Lend),
    pipeline=f.workflow_pipeline(Lend)
    .wait("PT0S")
    .create("loan", DkLoan, data=lambda c: DkLoan(desk_id=c.payload.desk)),
)


def test_a_broken_deferred_key_fails_its_run_alone(app_on: AppOn, user: User) -> None:
    app = app_on([f])
    desk = ok_data(app.dispatch(open_desk, Open(), user=user))
    good = app.start_workflow(lend, Lend(desk), user=user)
    bad = app.start_workflow(lend, Lend(uuid.uuid4()), user=user)
    more = app.start_workflow(lend, Lend(desk), user=user)

    counts = app.run_worker(once=True)

    assert counts["resumed"] == 3
    statuses = {r.run_id: r.status for r in app.runs()}
    assert [statuses[good], statuses[more]] == ["completed", "completed"]
    assert statuses[bad] == "failed"
    error = app.get_run(bad).error  # type: ignore[union-attr]
    assert error["code"] == "validation_error"
    assert "refers to a row that does not exist" in error["message"]
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(DkLoan.__table__)) == 2
    assert app.run_worker(once=True)["resumed"] == 0


def _loans(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(DkLoan.__table__)) or 0)


def test_a_broken_deferred_key_of_an_event_started_run_fails_it_and_the_feed_goes_on(app_on: AppOn, user: User) -> None:
    app = app_on([f])
    desk = ok_data(app.dispatch(open_desk, Open(), user=user))
    with Session(app.engine) as session, session.begin():
        for target in (desk, uuid.uuid4(), desk):
            append(
                session,
                stream_id=uuid.uuid4(),
                aggregate_type="lending",
                stream_version=1,
                type="lent",
                payload={"desk": str(target)},
                tenant_id=user.tenant_id,
                user_id=user.id,
                correlation_id=None,
                occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
            )

    assert app.run_worker(once=True)["started"] == 3
    assert sorted(r.status for r in app.runs(started)) == ["completed", "completed", "failed"]
    assert _loans(app) == 2
    assert app.run_worker(once=True)["started"] == 0


def test_a_broken_deferred_key_of_a_cron_run_fails_it_and_the_cursor_moves_on(app_on: AppOn) -> None:
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    app = app_on([f], clock=clock)
    assert app.run_worker(once=True)["started"] == 0  # the schedule starts now
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["started"] == 2
    assert [r.status for r in app.runs(ticking)] == ["failed", "failed"]
    assert app.run_worker(once=True)["started"] == 0
