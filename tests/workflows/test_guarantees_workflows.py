"""Workflow guarantees (DESIGN §8) that no other test would notice losing (issue 20): a
segment ending in a ``Failure`` leaves nothing behind, trigger keys still stop a second
start when the feed's cursor is reset, a retry that succeeded leaves no retry record, and
(PostgreSQL) a segment blocked in one worker does not hold up another worker's due runs.
Time is a hand-moved clock."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, CronTick, Entity, Feature, Ok, User, cron, manual, ok, on_event
from kumiko_typed._tables import consumers, events, workflow_runs
from kumiko_typed._workflow_feed import EVENT_CURSOR
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)


class GtwThing(Entity):
    __tablename__ = "gtw_thing"
    label: Mapped[str]


@attrs.frozen
class Go:
    label: str
    wait_first: bool = False


@attrs.frozen
class Rang:
    label: str


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def _feature() -> Feature[Any]:
    f: Feature[Any] = Feature("gtw")
    f.entity(GtwThing)
    f.event(Rang)
    return f


def _stored(app: App, run_id: uuid.UUID) -> Any:
    """The run's row as stored."""
    with app.engine.connect() as conn:
        return conn.execute(sa.select(workflow_runs).where(workflow_runs.c.run_id == run_id)).one()


def _things_and_events(app: App) -> tuple[int, int]:
    with app.engine.connect() as conn:
        things = conn.scalar(sa.select(sa.func.count()).select_from(GtwThing.__table__))
        evs = conn.scalar(sa.select(sa.func.count()).select_from(events).where(events.c.aggregate_type == "gtw-thing"))
    return int(things or 0), int(evs or 0)


# --- 4. a segment ending in a Failure is rolled back -------------------------------------------


@pytest.mark.parametrize("segment", ["first", "resumed"])
def test_a_segment_that_ends_in_a_failure_leaves_no_row_and_no_event(
    app_on: AppOn, clock: FakeClock, user: User, segment: str
) -> None:
    f = _feature()
    pipeline = f.workflow_pipeline(Go).branch(
        when=lambda c: c.payload.wait_first,
        on_true=lambda b: b.wait("PT1M"),
        on_false=lambda b: b.compute("at_once", lambda c: True),
    )
    pipeline = pipeline.create("thing", GtwThing, data=lambda c: GtwThing(label=c.payload.label)).get_one(
        "missing", lambda c: sa.select(GtwThing).where(GtwThing.label == "nowhere")
    )
    flow = f.workflow("fails", trigger=manual(Go), pipeline=pipeline)
    app = app_on([f], clock=clock)

    run_id = app.start_workflow(flow, Go("doomed", wait_first=segment == "resumed"), user=user)
    if segment == "resumed":
        assert app.get_run(run_id) is not None and _things_and_events(app) == (0, 0)
        clock.advance(minutes=1)
        assert app.run_worker(once=True)["resumed"] == 1

    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.error) == ("failed", {"code": "not_found", "message": 'step "missing": no row matched'})
    assert _things_and_events(app) == (0, 0)


# --- 8. trigger keys are a second line of defence ----------------------------------------------


def test_an_event_feed_reset_starts_no_second_run_for_the_same_event(
    app_on: AppOn, clock: FakeClock, user: User
) -> None:
    f = _feature()
    flow = f.workflow("on-rang", trigger=on_event(Rang), pipeline=f.workflow_pipeline(Rang).compute("x", lambda c: 1))
    ring = f.write_handler(
        "ring",
        f.pipeline(Go)
        .create("thing", GtwThing, data=lambda c: GtwThing(label=c.payload.label))
        .append_event(GtwThing, id=lambda c: c.steps["thing"].id, event=lambda c: Rang(c.payload.label))
        .return_(lambda c: ok(None)),
    )
    app = app_on([f], clock=clock)
    for label in ("one", "two"):
        assert app.dispatch(ring, Go(label), user=user) == Ok(None)
    assert app.run_worker(once=True)["started"] == 2

    with app.engine.begin() as conn:  # as after restoring an older backup of the cursor
        reset = conn.execute(sa.update(consumers).where(consumers.c.name == EVENT_CURSOR).values(position=0))
        assert reset.rowcount == 1
    assert app.run_worker(once=True)["started"] == 0
    assert sorted(r.status for r in app.runs(flow)) == ["completed", "completed"]


def test_a_cron_cursor_reset_starts_no_second_run_for_the_same_tick(app_on: AppOn, clock: FakeClock) -> None:
    f = _feature()
    flow = f.workflow(
        "every-five",
        trigger=cron("*/5 * * * *"),
        pipeline=f.workflow_pipeline(CronTick).compute("at", lambda c: c.payload.scheduled_at),
    )
    app = app_on([f], clock=clock)
    assert app.run_worker(once=True)["started"] == 0  # 09:01: the first pass notes the time
    clock.advance(minutes=10)
    assert app.run_worker(once=True)["started"] == 2  # 09:05, 09:10

    with app.engine.begin() as conn:
        reset = conn.execute(sa.update(consumers).where(consumers.c.name == f"cron:{flow.name}").values(tick=T0))
        assert reset.rowcount == 1
    assert app.run_worker(once=True)["started"] == 0
    ticks = sorted(r.steps["at"] for r in app.runs(flow))
    assert ticks == [datetime(2026, 3, 2, 9, m, tzinfo=UTC) for m in (5, 10)]


# --- 9. a retry that succeeded leaves no retry record ------------------------------------------


@pytest.mark.parametrize("first_attempt", ["failure", "raise"])
def test_a_retry_that_succeeded_leaves_no_retry_record_in_the_stored_run(
    app_on: AppOn, clock: FakeClock, user: User, first_attempt: str
) -> None:
    f = _feature()
    tries: list[int] = []

    def flaky(c: Any) -> int:
        tries.append(len(tries) + 1)
        if len(tries) == 1 and first_attempt == "raise":
            raise RuntimeError("first attempt broke")
        return len(tries)

    make = f.write_handler(
        "make",
        f.pipeline(Go)
        .create("thing", GtwThing, data=lambda c: GtwThing(label=c.payload.label))
        .return_(lambda c: ok(None)),
    )
    pipeline = (
        f.workflow_pipeline(Go)
        .retry(
            times=3,
            base_delay=timedelta(seconds=10),
            do=lambda b: b.compute("try", flaky).get_one(
                "ready", lambda c: sa.select(GtwThing).where(GtwThing.label == "ready")
            ),
        )
        .wait("PT1H")
        .compute("done", lambda c: c.steps["try"])
    )
    flow = f.workflow("flaky", trigger=manual(Go), pipeline=pipeline)
    app = app_on([f], clock=clock)
    if first_attempt == "raise":
        assert app.dispatch(make, Go("ready"), user=user) == Ok(None)
    run_id = app.start_workflow(flow, Go("x"), user=user)
    record = _stored(app, run_id).state["retries"]
    # The failed attempt, kept.
    assert record == {"@retry": {"attempts": 1, "last_error": record["@retry"]["last_error"]}}

    if first_attempt == "failure":
        assert app.dispatch(make, Go("ready"), user=user) == Ok(None)
    clock.advance(seconds=10)
    app.run_worker(once=True)  # attempt 2 succeeds; the run goes on to the wait
    row = _stored(app, run_id)
    assert (row.status, row.path, row.error) == ("suspended", "@wait", None)
    assert row.state["retries"] == {}
    assert "attempts" not in str(row.state) and "last_error" not in str(row.state)
    info = app.get_run(run_id)
    assert info is not None and info.error is None

    clock.advance(hours=1)
    app.run_worker(once=True)
    info = app.get_run(run_id)
    assert info is not None and (info.status, info.steps["done"], info.error) == ("completed", 2, None)


# --- 7. workers do not wait on each other (PostgreSQL) -----------------------------------------


@attrs.frozen
class Nap:
    n: int


@pytest.mark.postgres
def test_a_segment_blocked_in_one_worker_does_not_stall_another_workers_due_runs(
    fresh_postgres_url: str, clock: FakeClock, user: User
) -> None:
    """11 due runs (more than one claim batch); the earliest one's segment blocks worker 1
    with its batch claimed.  Worker 2's pass resumes the run left over, and returns."""
    entered, release = threading.Event(), threading.Event()

    def slow(c: Any) -> int:
        if c.payload.n == 0:
            entered.set()
            release.wait(60)
        return int(c.payload.n)

    f = _feature()
    flow = f.workflow(
        "nap",
        trigger=manual(Nap),
        pipeline=f.workflow_pipeline(Nap)
        .wait(lambda c: c.now + timedelta(seconds=30 if c.payload.n == 0 else 60))
        .compute("slow", slow),
    )
    first = App([f], database_url=fresh_postgres_url, clock=clock)
    second = App([f], database_url=fresh_postgres_url, clock=clock)
    counts: dict[str, dict[str, int]] = {}

    def work(name: str, app: App) -> None:
        counts[name] = app.run_worker(once=True)

    try:
        first.create_all()
        runs = [first.start_workflow(flow, Nap(n), user=user) for n in range(11)]
        clock.advance(minutes=2)
        one = threading.Thread(target=work, args=("first", first), daemon=True)
        two = threading.Thread(target=work, args=("second", second), daemon=True)
        one.start()
        assert entered.wait(30), "worker 1 never reached the slow segment"
        began = time.monotonic()
        two.start()
        two.join(30)  # worker 1's segment is held until the release below: waiting for it would hang
        took = time.monotonic() - began
        release.set()
        one.join(60)
        two.join(60)
        assert took < 30, f"worker 2's pass waited {took:.1f} s for worker 1"
        assert (counts["second"]["resumed"], counts["first"]["resumed"]) == (1, 10)
        assert {first.get_run(r).status for r in runs} == {"completed"}  # type: ignore[union-attr]
    finally:
        release.set()
        first.dispose()
        second.dispose()
