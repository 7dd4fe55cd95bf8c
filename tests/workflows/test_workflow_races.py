"""Races between workers, cancels, starts and events on one database (DESIGN §8), each
side in a thread with an App (and connections) of its own, on SQLite and PostgreSQL,
repeated many times: every outcome is one of the promised ones."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import run_info, together
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, manual, ok
from kumiko_typed._tables import events, workflow_runs
from kumiko_typed._workflow_feed import EventFeed
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TENANT_A = uuid.UUID(int=0xA)
TENANT_B = uuid.UUID(int=0xB)
ADA = User(id=uuid.UUID(int=1), tenant_id=TENANT_A)
BOB = User(id=uuid.UUID(int=2), tenant_id=TENANT_B)

side = sa.MetaData()
#: One row per committed execution of a step (no unique constraint: a doubled one shows).
done = sa.Table(
    "wfr_done",
    side,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Uuid, nullable=False),
    sa.Column("step", sa.String(40), nullable=False),
)


@attrs.frozen
class Job:
    n: int


@attrs.frozen
class Ping:
    n: int
    note: str


@attrs.frozen
class Send:
    n: int
    note: str


class WfrPing(Entity):
    __tablename__ = "wfr_ping"
    note: Mapped[str]


def _mark(step: str, pause: float = 0.0) -> Callable[[Any], str]:
    def write(c: Any) -> str:
        c.db.execute(sa.insert(done).values(run_id=c.workflow.run_id, step=step))
        if pause:
            time.sleep(pause)
        return step

    return write


_flaky_seen: set[uuid.UUID] = set()
_flaky_lock = threading.Lock()


def _flaky(c: Any) -> str:
    """Fails the first attempt of each run (in this process), then succeeds."""
    with _flaky_lock:
        first = c.workflow.run_id not in _flaky_seen
        _flaky_seen.add(c.workflow.run_id)
    if first:
        raise RuntimeError("first attempt fails")
    c.db.execute(sa.insert(done).values(run_id=c.workflow.run_id, step="retried"))
    return "retried"


@attrs.frozen
class Pong:
    n: int


class _Gates:
    """Where the stale-wait test holds a dispatch and a segment (inert unless armed)."""

    armed = False
    e_began = threading.Event()
    e_go = threading.Event()
    noted = threading.Event()
    b_go = threading.Event()


def _hold_dispatch(c: Any) -> None:
    if _Gates.armed:
        _Gates.e_began.set()
        assert _Gates.e_go.wait(60)


def _pong_key(c: Any) -> int:
    # Runs after the wait noted its view of the event store, before its row commits.
    if _Gates.armed:
        _Gates.noted.set()
        assert _Gates.b_go.wait(60)
    n: int = c.payload.n
    return n


def _boom(c: Any) -> str:
    raise RuntimeError("the first segment fails")


f = Feature("wfr")
f.entity(WfrPing)
f.event(Ping)
f.event(Pong)
send_pong = f.write_handler(
    "send_pong",
    f.pipeline(Job)
    .create("ping", WfrPing, data=lambda c: WfrPing(note="pong"))
    .compute("held", _hold_dispatch)
    .append_event(WfrPing, id=lambda c: c.steps["ping"].id, event=lambda c: Pong(c.payload.n))
    .return_(lambda c: ok(None)),
)
send = f.write_handler(
    "send",
    f.pipeline(Send)
    .create("ping", WfrPing, data=lambda c: WfrPing(note=c.payload.note))
    .append_event(WfrPing, id=lambda c: c.steps["ping"].id, event=lambda c: Ping(c.payload.n, c.payload.note))
    .return_(lambda c: ok(None)),
)
timed = f.workflow(
    "timed",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .wait("PT1M")
    .compute("a", _mark("a"))
    .compute("b", _mark("b", pause=0.005))
    .return_(lambda c: ok(c.payload.n)),
)
backoff = f.workflow(
    "backoff",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .retry(times=3, base_delay=timedelta(minutes=1), do=lambda b: b.compute("try", _flaky))
    .compute("after", _mark("after"))
    .return_(lambda c: ok(c.payload.n)),
)
short = f.workflow(
    "short",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .wait_for_event("got", Ping, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout="PT1M")
    .compute("after", _mark("after")),
)
long = f.workflow(
    "long",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .wait_for_event("got", Ping, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout="PT1H")
    .compute("after", _mark("after")),
)
switch = f.workflow(
    "switch",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .wait_for_event("first", Ping, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout="PT1M")
    .wait_for_event("second", Pong, key=_pong_key, event_key=lambda e: e.n, timeout="PT1H")
    .compute("after", _mark("after")),
)
doomed = f.workflow(
    "doomed",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job).compute("first", _mark("first", pause=0.02)).compute("boom", _boom),
)
keyed = f.workflow(
    "keyed",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job).compute("first", _mark("first", pause=0.02)).wait("PT1H"),
)


def _apps(app_on: Callable[..., App], clock: FakeClock, n: int) -> list[App]:
    apps = [app_on([f], clock=clock) for _ in range(n)]
    side.create_all(apps[0].engine)
    return apps


def _marks(app: App, run_id: uuid.UUID) -> list[str]:
    with app.engine.connect() as conn:
        return sorted(conn.scalars(sa.select(done.c.step).where(done.c.run_id == run_id)))


def _drain(app: App) -> None:
    for _ in range(20):
        counts = app.run_worker(once=True)
        if not counts["started"] and not counts["resumed"]:
            return


#: Rounds per race (each both outcomes were seen at 60, with KUMIKO_RACE_ROUNDS=60).
ROUNDS = int(os.environ.get("KUMIKO_RACE_ROUNDS", "12"))


@pytest.mark.parametrize("workflow", ["timed", "backoff"])
def test_a_cancel_racing_a_resume_ends_one_way_and_answers_that_way(app_on: Callable[..., App], workflow: str) -> None:
    clock = FakeClock(T0)
    worker, canceller = _apps(app_on, clock, 2)
    wf = timed if workflow == "timed" else backoff
    steps = ["a", "b"] if workflow == "timed" else ["after", "retried"]
    for n in range(ROUNDS):
        run_id = worker.start_workflow(wf, Job(n), user=ADA)
        clock.advance(minutes=1)
        _, answer = together(
            lambda: worker.run_worker(once=True), lambda: canceller.cancel_run(run_id, user=ADA, reason="stop")
        )
        run = worker.get_run(run_id)
        assert run is not None
        marks = _marks(worker, run_id)
        if isinstance(answer, Ok):
            assert answer.data.status == "cancelled" and run.status == "cancelled"
            assert marks == []  # no segment committed after the resume it won over
        else:
            assert isinstance(answer, Failure) and answer.code == "status_conflict", answer
            assert answer.details == {"status": "completed"} and run.status == "completed"
            assert marks == steps  # the whole segment, once
        clock.advance(hours=2)
        _drain(worker)
        after = worker.get_run(run_id)
        assert after is not None and after.status == run.status and _marks(worker, run_id) == marks


def test_an_event_as_the_timeout_falls_due_wakes_or_times_out_once_and_reaches_the_other_run(
    app_on: Callable[..., App],
) -> None:
    clock = FakeClock(T0)
    feeder, waker, sender = _apps(app_on, clock, 3)
    for n in range(ROUNDS):
        short_run = feeder.start_workflow(short, Job(n), user=ADA)
        long_run = feeder.start_workflow(long, Job(n), user=ADA)
        clock.advance(minutes=1)  # the short wait's timeout is due now
        together(
            lambda: sender.dispatch(send, Send(n, f"e{n}"), user=ADA),
            lambda: waker.run_worker(once=True),
            lambda: feeder.run_worker(once=True),
        )
        _drain(feeder)
        got_short = feeder.get_run(short_run)
        got_long = feeder.get_run(long_run)
        assert got_short is not None and got_long is not None
        assert got_short.status == "completed", got_short
        assert got_short.steps["got"] in (None, Ping(n, f"e{n}"))
        assert _marks(feeder, short_run) == ["after"]
        assert got_long.status == "completed" and got_long.steps["got"] == Ping(n, f"e{n}")
        assert _marks(feeder, long_run) == ["after"]


def test_two_events_for_one_wait_appended_together_wake_it_once_with_the_first(
    app_on: Callable[..., App],
) -> None:
    clock = FakeClock(T0)
    worker, one, two = _apps(app_on, clock, 3)
    for n in range(ROUNDS):
        run_id = worker.start_workflow(long, Job(n), user=ADA)
        together(
            lambda: one.dispatch(send, Send(n, "one"), user=ADA),
            lambda: two.dispatch(send, Send(n, "two"), user=ADA),
            lambda: worker.run_worker(once=True),
        )
        _drain(worker)
        run = worker.get_run(run_id)
        assert run is not None and run.status == "completed"
        with worker.engine.connect() as conn:
            order = conn.execute(
                sa.select(events.c.type, events.c.payload).order_by(events.c.tx, events.c.position)
            ).all()
        notes = [p.payload["note"] for p in order if p.type == "ping" and p.payload["n"] == n]
        assert len(notes) == 2
        assert run.steps["got"] == Ping(n, notes[0])
        assert _marks(worker, run_id) == ["after"]


def test_an_event_wakes_the_waiting_run_of_its_tenant_only_under_racing_workers(
    app_on: Callable[..., App],
) -> None:
    clock = FakeClock(T0)
    w1, w2, sender = _apps(app_on, clock, 3)
    for n in range(ROUNDS):
        mine = w1.start_workflow(long, Job(n), user=ADA)
        theirs = w1.start_workflow(long, Job(n), user=BOB)
        together(
            lambda: sender.dispatch(send, Send(n, "a"), user=ADA),
            lambda: w1.run_worker(once=True),
            lambda: w2.run_worker(once=True),
        )
        _drain(w1)
        got = w1.get_run(mine)
        other = w1.get_run(theirs)
        assert got is not None and got.status == "completed" and got.steps["got"] == Ping(n, "a")
        assert other is not None and other.status == "suspended" and other.path == "got"


def test_a_keyed_start_from_many_callers_at_once_is_one_run_for_all(app_on: Callable[..., App]) -> None:
    clock = FakeClock(T0)
    apps = _apps(app_on, clock, 3)
    for n in range(ROUNDS):
        key = f"order-{n}"
        ids = together(*(lambda a=a: a.start_workflow(keyed, Job(n), user=ADA, key=key) for a in apps))
        assert len(set(ids)) == 1, ids
        with apps[0].engine.connect() as conn:
            runs = conn.scalar(
                sa.select(sa.func.count()).select_from(workflow_runs).where(workflow_runs.c.workflow == "wfr:keyed")
            )
        assert runs == n + 1
        assert _marks(apps[0], ids[0]) == ["first"]  # type: ignore[arg-type]


def test_a_keyed_start_whose_first_segment_fails_is_one_failed_run_for_all_callers(
    app_on: Callable[..., App],
) -> None:
    clock = FakeClock(T0)
    apps = _apps(app_on, clock, 3)
    for n in range(ROUNDS):
        key = f"doomed-{n}"
        ids = together(*(lambda a=a: a.start_workflow(doomed, Job(n), user=ADA, key=key) for a in apps))
        assert len(set(ids)) == 1, ids
        run = apps[0].get_run(ids[0])  # type: ignore[arg-type]
        assert run is not None and run.status == "failed"
        assert _marks(apps[0], ids[0]) == []  # type: ignore[arg-type]  # the failed segment is undone


def test_a_cancel_racing_an_event_wake_ends_one_way_and_answers_that_way(app_on: Callable[..., App]) -> None:
    clock = FakeClock(T0)
    worker, canceller = _apps(app_on, clock, 2)
    for n in range(ROUNDS):
        run_id = worker.start_workflow(long, Job(n), user=ADA)
        assert canceller.dispatch(send, Send(n, "go"), user=ADA) == Ok(None)
        _, answer = together(
            lambda: worker.run_worker(once=True), lambda: canceller.cancel_run(run_id, user=ADA, reason="stop")
        )
        run = worker.get_run(run_id)
        assert run is not None
        if isinstance(answer, Ok):
            assert answer.data.status == run.status == "cancelled" and _marks(worker, run_id) == []
        else:
            assert isinstance(answer, Failure) and answer.details == {"status": "completed"}, answer
            assert run.status == "completed" and _marks(worker, run_id) == ["after"]
        _drain(worker)
        again = worker.get_run(run_id)
        assert again is not None and again.status == run.status


def test_three_workers_resume_a_hundred_due_runs_each_once(app_on: Callable[..., App]) -> None:
    clock = FakeClock(T0)
    apps = _apps(app_on, clock, 3)
    run_ids = [apps[0].start_workflow(timed, Job(n), user=ADA) for n in range(100)]
    clock.advance(minutes=1)
    counts = together(*(lambda a=a: a.run_worker(once=True) for a in apps))
    assert sum(c["resumed"] for c in counts) == 100  # type: ignore[index]
    with apps[0].engine.connect() as conn:
        per_step = conn.execute(
            sa.select(done.c.run_id, done.c.step, sa.func.count()).group_by(done.c.run_id, done.c.step)
        ).all()
    assert {(r, s) for r, s, _ in per_step} == {(r, s) for r in run_ids for s in ("a", "b")}
    assert {k for _, _, k in per_step} == {1}
    assert {r.status for r in apps[0].runs(timed)} == {"completed"}


def test_an_answer_in_time_no_feed_read_yet_wins_over_the_timeout_and_no_other_answer_does(
    app_on: Callable[..., App],
) -> None:
    """Answers that commit after a pass's feed read the events, before its due runs (or
    that an older open transaction, or another worker's feed, keeps from the feed): the
    due runs take the timeout only after looking for an answer the run has not been
    handed.  One that occurred in time wins; one of another tenant or key, or one that
    occurred after the deadline, does not."""
    clock = FakeClock(T0)
    (app,) = _apps(app_on, clock, 1)
    answered = app.start_workflow(short, Job(1), user=ADA)
    unanswered = app.start_workflow(short, Job(2), user=ADA)
    clock.advance(seconds=59)
    for sent, user in ((Send(2, "their tenant"), BOB), (Send(3, "another key"), ADA), (Send(1, "in time"), ADA)):
        assert app.dispatch(send, sent, user=user) == Ok(None)
    clock.advance(seconds=1)  # the deadline: an answer now still occurred in time
    assert app.dispatch(send, Send(1, "at the deadline"), user=ADA) == Ok(None)
    clock.advance(seconds=1)
    assert app.dispatch(send, Send(2, "too late"), user=ADA) == Ok(None)
    assert app._workflow_engine.resume_due() == 2  # a pass's due runs, its feed before the answers
    got = {run_id: run_info(app, run_id) for run_id in (answered, unanswered)}
    assert got[answered].status == "completed" and got[answered].steps["got"] == Ping(1, "in time")
    assert got[unanswered].status == "completed" and got[unanswered].steps["got"] is None
    assert app.run_worker(once=True)["resumed"] == 0  # the feed reads them all now: none again
    assert _marks(app, answered) == _marks(app, unanswered) == ["after"]


@pytest.mark.postgres
def test_a_wait_replaced_while_the_feed_arms_it_still_gets_the_event_the_feed_passed(
    fresh_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The feed reads a run's unarmed wait, and before it locks the run another worker's
    timeout segment replaces that wait with one for another event type, an event of which
    an earlier feed pass already passed by (committed after the new wait noted its view,
    read while the new wait's row was not yet committed).  Arming the new wait must look
    back for ITS event type from ITS view, not the replaced wait's: else the event is lost."""
    clock = FakeClock(T0)
    apps = []
    for _ in range(4):
        app = App([f], database_url=fresh_postgres_url, clock=clock)
        app.create_all()
        apps.append(app)
    starter, timer, sender, feeder = apps
    side.create_all(starter.engine)
    real_lock = EventFeed._lock
    a_pending, b_done = threading.Event(), threading.Event()

    def lock(self: EventFeed, session: Any, run_id: uuid.UUID, *, skip_locked: bool = True) -> Any:
        if threading.current_thread().name == "feed-a" and not a_pending.is_set():
            a_pending.set()  # it has read the unarmed wait; the run is not locked yet
            assert b_done.wait(60)
        return real_lock(self, session, run_id, skip_locked=skip_locked)

    monkeypatch.setattr(EventFeed, "_lock", lock)
    for gate in (_Gates.e_began, _Gates.e_go, _Gates.noted, _Gates.b_go):
        gate.clear()
    _Gates.armed = True
    try:
        run_id = starter.start_workflow(switch, Job(7), user=ADA)
        clock.advance(minutes=1)  # its first wait times out
        e = threading.Thread(target=lambda: sender.dispatch(send_pong, Job(7), user=ADA))
        e.start()  # its transaction begins (and takes its id) before the timeout segment's
        assert _Gates.e_began.wait(60)
        b = threading.Thread(target=timer._workflow_engine.resume_due)
        b.start()
        assert _Gates.noted.wait(60)  # the second wait noted its view: the event is after it
        _Gates.e_go.set()
        e.join(60)
        feeder.run_worker(once=True)  # passes the event: the second wait is not committed yet
        a = threading.Thread(target=lambda: feeder.run_worker(once=True), name="feed-a")
        a.start()
        assert a_pending.wait(60)
        _Gates.b_go.set()
        b.join(60)
        b_done.set()
        a.join(60)
    finally:
        _Gates.armed = False
    _drain(starter)
    run = starter.get_run(run_id)
    assert run is not None and run.status == "completed", run
    assert run.steps["first"] is None and run.steps["second"] == Pong(7)
    for app in apps:
        app.dispose()
