"""An ``on_event`` workflow starts one run per event also when the deploy that reads the
event lacks the workflow (docs/workflows.md, "Triggers"): the feed's cursor is shared by
every deploy, so a worker of a rolling deploy's old code, or of a deploy that removed the
workflow, moves it past the events that start its runs.  The workflow's own cursor says
which of them its runs were started for; the first feed with the workflow reads the rest
again.  A workflow registered for the first time starts no run for earlier events.
Both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, ok, on_event
from kumiko_typed._tables import consumers
from kumiko_typed._workflow_feed import TRIGGER_CURSOR
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
RUNG = "etd:rung"


@attrs.frozen
class Bell:
    n: int


class EtdTower(Entity):
    __tablename__ = "etd_tower"
    n: Mapped[int]


def _service() -> Feature[Any]:
    """The feature every deploy has: the handler appending ``Bell`` events."""
    f: Feature[Any] = Feature("etd")
    f.event(Bell)
    f.entity(EtdTower)
    f.write_handler(
        "ring",
        f.pipeline(Bell)
        .create("tower", EtdTower, data=lambda c: EtdTower(n=c.payload.n))
        .append_event(EtdTower, id=lambda c: c.steps["tower"].id, event=lambda c: c.payload)
        .return_(lambda c: ok(None)),
    )
    return f


def deploy(app_on: AppOn, clock: FakeClock, *, with_workflow: bool) -> App:
    """The service as deployed with or without the ``rung`` workflow (the handler
    appending ``Bell`` events is in both)."""
    f = _service()
    if with_workflow:
        f.workflow(
            "rung", trigger=on_event(Bell), pipeline=f.workflow_pipeline(Bell).compute("n", lambda c: c.payload.n)
        )
    return app_on([f], clock=clock)


def ring(app: App, user: User, *numbers: int) -> None:
    for n in numbers:
        assert app.dispatch(app.handlers["etd:ring"], Bell(n), user=user) == Ok(None)


def started_for(app: App) -> list[int]:
    return sorted(run.steps["n"] for run in app.runs(RUNG))


def test_a_rolling_deploy_adding_the_workflow_starts_its_runs_for_the_events_the_old_workers_read(
    app_on: AppOn, user: User
) -> None:
    clock = FakeClock(T0)
    old = deploy(app_on, clock, with_workflow=False)
    ring(old, user, 1)
    old.run_worker(once=True)
    new = deploy(app_on, clock, with_workflow=True)
    assert new.run_worker(once=True)["started"] == 0  # registered now: no run for event 1
    ring(old, user, 2)
    ring(new, user, 3)
    assert old.run_worker(once=True)["started"] == 0  # the old code's feed reads 2 and 3
    ring(new, user, 4)
    assert new.run_worker(once=True)["started"] == 3
    assert new.run_worker(once=True)["started"] == 0
    assert started_for(new) == [2, 3, 4]
    assert {run.status for run in new.runs(RUNG)} == {"completed"}


def test_a_workflow_registered_again_starts_runs_for_the_events_of_the_time_it_was_removed(
    app_on: AppOn, user: User
) -> None:
    """As a cron workflow starts the ticks it missed; each event still starts one run."""
    clock = FakeClock(T0)
    first = deploy(app_on, clock, with_workflow=True)
    first.run_worker(once=True)
    ring(first, user, 1)
    assert first.run_worker(once=True)["started"] == 1
    removed = deploy(app_on, clock, with_workflow=False)
    ring(removed, user, *range(2, 2 + 250))  # more than one transaction's catch-up
    assert removed.run_worker(once=True)["started"] == 0
    back = deploy(app_on, clock, with_workflow=True)
    assert back.run_worker(once=True)["started"] == 250
    assert started_for(back) == list(range(1, 252))
    with back.engine.connect() as conn:  # caught up: the workflow's cursor is the feed's
        rows = conn.execute(sa.select(consumers.c.name, consumers.c.tx, consumers.c.position)).all()
    cursors = {name: (tx, position) for name, tx, position in rows}
    assert cursors[f"{TRIGGER_CURSOR}{RUNG}"] == cursors["workflow-events"]


def deploy_two(app_on: AppOn, clock: FakeClock, *, with_rung: bool) -> App:
    """``deploy``'s service with a second event-triggered workflow, ``tolled``, in every
    version; both record the tenant their run was started under."""
    f = _service()
    names = ["tolled", "rung"] if with_rung else ["tolled"]
    for name in names:
        f.workflow(
            name,
            trigger=on_event(Bell),
            pipeline=f.workflow_pipeline(Bell)
            .compute("n", lambda c: c.payload.n)
            .compute("tenant", lambda c: str(c.user.tenant_id)),
        )
    return app_on([f], clock=clock)


def test_a_lagging_workflow_catches_up_beside_one_that_kept_up_for_every_tenant(app_on: AppOn, user: User) -> None:
    """The workflow that kept up starts no second run for an event the lagging one reads
    again, and each caught-up run runs as the tenant whose event started it."""
    clock = FakeClock(T0)
    other = User(uuid.uuid4(), uuid.uuid4(), frozenset())
    first = deploy_two(app_on, clock, with_rung=True)
    first.run_worker(once=True)
    removed = deploy_two(app_on, clock, with_rung=False)
    ring(removed, user, 1, 2)
    ring(removed, other, 3)
    assert removed.run_worker(once=True)["started"] == 3  # tolled's three
    back = deploy_two(app_on, clock, with_rung=True)
    ring(back, other, 4)
    assert back.run_worker(once=True)["started"] == 5  # rung's 1–3 caught up, 4 for both
    assert back.run_worker(once=True)["started"] == 0
    tenants = {user.tenant_id: [1, 2], other.tenant_id: [3, 4]}
    for name in ("etd:tolled", RUNG):
        runs = back.runs(name)
        assert sorted(run.steps["n"] for run in runs) == [1, 2, 3, 4], name
        for run in runs:
            n = run.steps["n"]
            assert isinstance(n, int)
            assert n in tenants[uuid.UUID(str(run.steps["tenant"]))], (name, run.steps)
