"""Durable workflows under several workers on one database, on SQLite and PostgreSQL
(DESIGN §8, docs/workflows.md "Waits, isolation and bad values" and "Workers",
docs/operations.md "Workers"): a thousand runs woken at once, an event's fan-out
committed a batch at a time, timers at the very instant they fall due, cron ticks fired
by racing workers, hostile event payloads handed to the runs they wake, and a worker
process killed after a retry's attempt.  Each worker is an App of its own (its own engine
and connections), in a thread, as a worker on another host is, or a process."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import together
from sqlalchemy.orm import Mapped

from kumiko_typed import App, CronTick, Entity, Failure, Feature, Ok, User, _workflow_feed, cron, manual, ok, on_event
from kumiko_typed._tables import workflow_runs
from kumiko_typed._workflow_engine import BATCH
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))
BOB = User(id=uuid.UUID(int=2), tenant_id=uuid.UUID(int=0xB))
MICRO = timedelta(microseconds=1)
#: Bounds a hang only: a thread that has not ended by then is a failure, never a timing.
HANG_S = 120.0

side = sa.MetaData()
#: One row per committed execution of a step (no unique constraint: a doubled one shows).
marks = sa.Table(
    "wfa_marks",
    side,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Uuid, nullable=False),
    sa.Column("step", sa.String(40), nullable=False),
)


@attrs.frozen
class Job:
    n: int


@attrs.frozen
class Ring:
    group: int
    body: str


@attrs.frozen
class Rung:
    """The event waits match by ``group``; ``body`` is carried to the run as it is."""

    group: int
    body: str


@attrs.frozen
class Poke:
    """An event without fields."""


class WfaBell(Entity):
    __tablename__ = "wfa_bell"
    group: Mapped[int]


#: Called with a step's name each time a ``_mark`` step runs (``"failed"``: a failing
#: attempt): a worker process that is to die once a step ran hooks in here (``WORKER``).
_ran: list[Callable[[str], None]] = []


def _mark(step: str) -> Callable[[Any], str]:
    def write(c: Any) -> str:
        c.db.execute(sa.insert(marks).values(run_id=c.workflow.run_id, step=step))
        for hook in _ran:
            hook(step)
        return step

    return write


#: The engine a fanned-out segment reads committed marks through: another connection, as
#: another host's reader sees the database (set by the test that uses it).
_observer: list[sa.Engine] = []


def _seen_committed(c: Any) -> int:
    """How many runs' marks had committed when this segment ran; then marks its own."""
    with _observer[0].connect() as conn:
        seen: int = conn.scalar(sa.select(sa.func.count()).select_from(marks))
    c.db.execute(sa.insert(marks).values(run_id=c.workflow.run_id, step="fanned"))
    return seen


def _fails_before(minutes: int) -> Callable[[Any], str]:
    """An attempt that fails before T0 + ``minutes`` and succeeds after."""

    def attempt(c: Any) -> str:
        if c.now < T0 + timedelta(minutes=minutes):
            for hook in _ran:
                hook("failed")
            raise RuntimeError("too early")
        return _mark("attempt")(c)

    return attempt


f = Feature("wfa")
f.entity(WfaBell)
f.event(Rung)
f.event(Poke)
ring = f.write_handler(
    "ring",
    f.pipeline(Ring)
    .create("bell", WfaBell, data=lambda c: WfaBell(group=c.payload.group))
    .append_event(WfaBell, id=lambda c: c.steps["bell"].id, event=lambda c: Rung(c.payload.group, c.payload.body))
    .return_(lambda c: ok(None)),
)
poke = f.write_handler(
    "poke",
    f.pipeline(Job)
    .create("bell", WfaBell, data=lambda c: WfaBell(group=c.payload.n))
    .append_event(WfaBell, id=lambda c: c.steps["bell"].id, event=lambda c: Poke())
    .return_(lambda c: ok(None)),
)
timer = f.workflow(
    "timer",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job).wait("PT1M").compute("after", _mark("after")).return_(lambda c: ok(c.payload.n)),
)
waiter = f.workflow(
    "waiter",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .wait_for_event("got", Rung, key=lambda c: c.payload.n, event_key=lambda e: e.group, timeout="PT1H")
    .compute("after", _mark("after")),
)
poked = f.workflow(
    "poked",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .wait_for_event("got", Poke, key=lambda c: None, event_key=lambda e: None, timeout="PT1H")
    .compute("after", _mark("after")),
)
fanned = f.workflow(
    "fanned",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .wait_for_event("got", Rung, key=lambda c: c.payload.n, event_key=lambda e: e.group, timeout="PT1H")
    .compute("seen", _seen_committed),
)
#: Two workflows waiting for the same event: the feed reads its waits by (workflow, path),
#: so "alpha"'s run is matched before "beta"'s.
alpha, beta = (
    f.workflow(
        name,
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job)
        .wait_for_event("got", Rung, key=lambda c: c.payload.n, event_key=lambda e: e.group, timeout="PT1H")
        .compute("after", _mark("after")),
    )
    for name in ("alpha", "beta")
)
backoff = f.workflow(
    "backoff",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .retry(times=2, base_delay=timedelta(minutes=1), do=lambda b: b.compute("try", _fails_before(1)))
    .compute("after", _mark("after")),
)
late_backoff = f.workflow(
    "late-backoff",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .wait("PT1M")
    .retry(times=2, base_delay=timedelta(minutes=1), do=lambda b: b.compute("try", _fails_before(2)))
    .compute("after", _mark("after")),
)
ticker = f.workflow(
    "ticker",
    trigger=cron("*/5 * * * *"),
    pipeline=f.workflow_pipeline(CronTick)
    .compute("at", lambda c: c.payload.scheduled_at)
    .compute("mark", _mark("tick")),
)


@attrs.frozen
class Hello:
    n: int


#: Its own feature: an ``on_event`` workflow of ``f``'s events would start runs in every test.
g = Feature("wfa-starts")
g.entity(WfaBell)
g.event(Hello)
hello = g.write_handler(
    "hello",
    g.pipeline(Job)
    .create("bell", WfaBell, data=lambda c: WfaBell(group=c.payload.n))
    .append_event(WfaBell, id=lambda c: c.steps["bell"].id, event=lambda c: Hello(c.payload.n))
    .return_(lambda c: ok(None)),
)
greeted = g.workflow(
    "greeted", trigger=on_event(Hello), pipeline=g.workflow_pipeline(Hello).compute("seen", _seen_committed)
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def _apps(
    app_on: Callable[..., App], clock: FakeClock, n: int, features: list[Feature[str]] | None = None
) -> list[App]:
    apps = [app_on(features or [f], clock=clock) for _ in range(n)]
    side.create_all(apps[0].engine)
    return apps


def _drain(app: App) -> dict[str, int]:
    """Worker passes until one starts and resumes nothing; the counts added up."""
    total = {"started": 0, "resumed": 0}
    for _ in range(500):
        counts = app.run_worker(once=True)
        total["started"] += counts["started"]
        total["resumed"] += counts["resumed"]
        if not counts["started"] and not counts["resumed"]:
            return total
    raise AssertionError("the workers never ran out of work")


def _marked(app: App) -> dict[tuple[uuid.UUID, str], int]:
    """How often each (run, step) committed."""
    with app.engine.connect() as conn:
        rows = conn.execute(
            sa.select(marks.c.run_id, marks.c.step, sa.func.count()).group_by(marks.c.run_id, marks.c.step)
        )
        return {(run_id, step): n for run_id, step, n in rows}


def _dispatch(app: App, handler: Any, payload: object, user: User) -> object:
    """``app.dispatch``, tried again while it answers ``unavailable`` (docs: "try again"):
    on SQLite a racing worker's transaction may hold the one write lock past the busy
    timeout on a loaded machine."""
    for _ in range(20):
        answer = app.dispatch(handler, payload, user=user)
        if not (isinstance(answer, Failure) and answer.code == "unavailable"):
            return answer
    return answer


def _passes(*apps: App) -> list[Callable[[], object]]:
    return [lambda a=a: a.run_worker(once=True) for a in apps]


def _added(answers: list[object], key: str) -> int:
    return sum(a[key] for a in answers if isinstance(a, dict))


# --- a thousand runs at once --------------------------------------------------------------------

RUNS = 1000


def test_a_thousand_runs_woken_by_two_events_at_once_resume_each_once_and_are_counted_once(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    """Two events, each for the 500 runs of its key, append while three workers pass: every
    run resumes once with its own event, the workers' counts add up to the runs, and the
    other tenant's run of the same key is not woken."""
    w1, w2, w3 = _apps(app_on, clock, 3)
    runs = {n: w1.start_workflow(waiter, Job(n % 2), user=ADA) for n in range(RUNS)}
    other = w1.start_workflow(waiter, Job(0), user=BOB)
    answers = together(
        lambda: _dispatch(w2, ring, Ring(0, "even"), ADA),
        lambda: _dispatch(w3, ring, Ring(1, "odd"), ADA),
        *_passes(w1, w2, w3),
    )
    assert answers[:2] == [Ok(None), Ok(None)]
    resumed = _added(answers, "resumed") + sum(_drain(w)["resumed"] for w in (w1, w2, w3))
    assert resumed == RUNS
    listed = {r.run_id: r for r in w1.runs(waiter)}
    for n, run_id in runs.items():
        run = listed[run_id]
        assert run.status == "completed", run
        assert run.steps["got"] == Rung(n % 2, "odd" if n % 2 else "even")
    assert listed[other].status == "suspended" and listed[other].path == "got"
    assert _marked(w1) == {(run_id, "after"): 1 for run_id in runs.values()}


#: The feed's runs per transaction in the tests below (its own, 100, takes 400 runs to show).
FEW = 10


def test_an_event_that_wakes_many_runs_commits_them_a_batch_at_a_time(
    app_on: Callable[..., App], clock: FakeClock, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the feed resumed every run an event woke in one transaction: a thousand
    segments held SQLite's write lock (2,500 trivial ones: 6 s, and a handler dispatched
    meanwhile failed with ``unavailable``), held a PostgreSQL transaction open as long, and
    a stopping worker could not stop before the end.  Now each transaction resumes at most
    ``RUNS_PER_TRANSACTION`` runs: each segment sees the batches before its own committed."""
    monkeypatch.setattr(_workflow_feed, "RUNS_PER_TRANSACTION", FEW)
    (app,) = _apps(app_on, clock, 1)
    _observer[:] = [sa.create_engine(db_url)]
    try:
        runs = [app.start_workflow(fanned, Job(4), user=ADA) for _ in range(4 * FEW)]
        assert app.dispatch(ring, Ring(4, "all"), user=ADA) == Ok(None)
        assert _drain(app)["resumed"] == len(runs)
    finally:
        _observer.pop().dispose()
    seen = sorted(app.get_run(run_id).steps["seen"] for run_id in runs)  # type: ignore[union-attr]
    assert seen == [k * FEW for k in range(4) for _ in range(FEW)]


def test_events_that_start_many_runs_start_them_a_batch_at_a_time(
    app_on: Callable[..., App], clock: FakeClock, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a feed transaction started a run for each of up to 200 events."""
    monkeypatch.setattr(_workflow_feed, "RUNS_PER_TRANSACTION", FEW)
    (app,) = _apps(app_on, clock, 1, [g])
    app.run_worker(once=True)  # the workflow's trigger cursor starts here
    _observer[:] = [sa.create_engine(db_url)]
    try:
        for n in range(4 * FEW):
            assert app.dispatch(hello, Job(n), user=ADA) == Ok(None)
        assert _drain(app)["started"] == 4 * FEW
    finally:
        _observer.pop().dispose()
    seen = sorted(r.steps["seen"] for r in app.runs(greeted))
    assert seen == [k * FEW for k in range(4) for _ in range(FEW)]


@pytest.mark.postgres
def test_the_runs_an_event_woke_before_it_met_a_locked_run_are_counted(fresh_postgres_url: str) -> None:
    """The feed resumes "alpha"'s run, then finds "beta"'s locked by another transaction
    (a worker resuming it by its timeout), commits what it did and matches the event again,
    waiting for that lock.  Before, the pass did not count the run it had resumed: its
    ``resumed`` said 1 for the 2 runs it resumed."""
    clock = FakeClock(T0)
    app = App([f], database_url=fresh_postgres_url, clock=clock)
    holder = sa.create_engine(fresh_postgres_url)
    try:
        app.create_all()
        side.create_all(app.engine)
        first = app.start_workflow(alpha, Job(5), user=ADA)
        second = app.start_workflow(beta, Job(5), user=ADA)
        assert app.run_worker(once=True)["resumed"] == 0  # the feed arms their waits
        assert app.dispatch(ring, Ring(5, "both"), user=ADA) == Ok(None)
        with holder.connect() as conn:
            conn.execute(sa.select(workflow_runs.c.run_id).where(workflow_runs.c.run_id == second).with_for_update())
            counts: list[dict[str, int]] = []
            passing = threading.Thread(target=lambda: counts.append(app.run_worker(once=True)))
            passing.start()
            waiting = sa.text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            deadline = time.monotonic() + HANG_S
            while conn.scalar(waiting) == 0:  # the feed's second transaction waits for the lock
                assert time.monotonic() < deadline and passing.is_alive(), "the feed never waited for the run"
                time.sleep(0.01)
            conn.rollback()
            passing.join(HANG_S)
        assert counts and counts[0]["resumed"] == 2
        assert {app.get_run(r).status for r in (first, second)} == {"completed"}  # type: ignore[union-attr]
        assert _marked(app) == {(first, "after"): 1, (second, "after"): 1}
    finally:
        holder.dispose()
        app.dispose()


def test_a_pass_the_database_cuts_short_counts_the_runs_it_had_committed(tmp_path: Path) -> None:
    """Another connection takes SQLite's write lock once the pass's first batch of due runs
    has committed: the next batch waits the busy timeout and the pass is cut short.  Before,
    it returned ``resumed=0`` (the workflow part's counts were added when it ended) for the
    ten runs it had resumed, and its log line said so."""
    clock = FakeClock(T0)
    url = f"sqlite:///{tmp_path / 'cut.sqlite3'}"
    app = App([f], database_url=url, clock=clock)
    holder = sa.create_engine(url)
    try:
        app.create_all()
        side.create_all(app.engine)
        runs = [app.start_workflow(timer, Job(n), user=ADA) for n in range(BATCH + 5)]
        clock.advance(minutes=1)
        resumed = threading.Event()
        _ran.append(lambda step: resumed.set())
        with holder.connect() as conn:

            def hold(worker_conn: Any) -> None:
                if resumed.is_set() and not conn.in_transaction():  # the first batch committed
                    conn.exec_driver_sql("BEGIN IMMEDIATE")

            sa.event.listen(app.engine, "begin", hold, insert=True)  # before the App's own BEGIN
            try:
                counts = app.run_worker(once=True)
            finally:
                sa.event.remove(app.engine, "begin", hold)
            conn.rollback()
        assert counts["resumed"] == BATCH
        assert sum(app.get_run(r).status == "completed" for r in runs) == BATCH  # type: ignore[union-attr]
        assert app.run_worker(once=True)["resumed"] == 5
    finally:
        _ran.clear()
        holder.dispose()
        app.dispose()


def test_a_thousand_timers_due_at_one_instant_resume_each_once_under_three_workers(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    w1, w2, w3 = _apps(app_on, clock, 3)
    runs = [w1.start_workflow(timer, Job(n), user=ADA) for n in range(RUNS)]
    clock.advance(minutes=1)
    answers = together(*_passes(w1, w2, w3))
    resumed = _added(answers, "resumed") + sum(_drain(w)["resumed"] for w in (w1, w2, w3))
    assert resumed == RUNS
    assert {r.status for r in w1.runs(timer)} == {"completed"}
    assert _marked(w1) == {(run_id, "after"): 1 for run_id in runs}
    for n, run_id in enumerate(runs):
        assert w1.result(timer, run_id, user=ADA) == Ok(n)


# --- the instant a run falls due ----------------------------------------------------------------


def test_a_wake_time_a_timeout_and_a_backoff_are_due_at_their_instant_not_a_microsecond_before(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    (app,) = _apps(app_on, clock, 1)
    slept = app.start_workflow(timer, Job(1), user=ADA)
    waited = app.start_workflow(waiter, Job(1), user=ADA)
    retried = app.start_workflow(backoff, Job(1), user=ADA)
    assert [app.get_run(r).path for r in (slept, waited, retried)] == ["@wait", "got", "@retry/#2"]  # type: ignore[union-attr]

    clock.advance(minutes=1, microseconds=-1)
    assert app.run_worker(once=True)["resumed"] == 0
    assert {app.get_run(r).status for r in (slept, waited, retried)} == {"suspended"}  # type: ignore[union-attr]
    clock.advance(microseconds=1)  # T0 + 1 minute: the wait's wake time and the backoff's
    assert app.run_worker(once=True)["resumed"] == 2
    assert app.get_run(slept).status == app.get_run(retried).status == "completed"  # type: ignore[union-attr]
    assert app.get_run(waited).status == "suspended"  # type: ignore[union-attr]

    clock.advance(minutes=59, microseconds=-1)
    assert app.run_worker(once=True)["resumed"] == 0
    clock.advance(microseconds=1)  # T0 + 1 hour: the timeout
    assert app.run_worker(once=True)["resumed"] == 1
    run = app.get_run(waited)
    assert run is not None and run.status == "completed" and run.steps["got"] is None
    expected = {(slept, "after"): 1, (waited, "after"): 1, (retried, "after"): 1, (retried, "attempt"): 1}
    assert {k: n for k, n in _marked(app).items() if k[1] != "tick"} == expected  # the cron ticks aside


@pytest.mark.parametrize(("late", "answered"), [(timedelta(0), True), (MICRO, False)], ids=["at", "after"])
def test_an_event_at_the_deadline_answers_and_one_a_microsecond_after_does_not(
    app_on: Callable[..., App], clock: FakeClock, late: timedelta, answered: bool
) -> None:
    """Both read by the same pass that finds the timeout due (the feed reads events first)."""
    (app,) = _apps(app_on, clock, 1)
    run_id = app.start_workflow(waiter, Job(3), user=ADA)
    clock.advance(timedelta(hours=1) + late)
    assert app.dispatch(ring, Ring(3, "late?"), user=ADA) == Ok(None)
    assert app.run_worker(once=True)["resumed"] == 1
    run = app.get_run(run_id)
    assert run is not None and run.status == "completed"
    assert run.steps["got"] == (Rung(3, "late?") if answered else None)
    assert _marked(app) == {(run_id, "after"): 1}


# --- cron across workers ------------------------------------------------------------------------


def test_cron_ticks_fired_by_three_racing_workers_start_one_run_each(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    """The tick at the pass's very instant is due; the one a microsecond later is not."""
    w1, w2, w3 = _apps(app_on, clock, 3)
    together(*_passes(w1, w2, w3))  # the schedule starts at T0: no backfill
    assert w1.runs(ticker) == []
    started = 0
    for minutes in (5, 12, 60, 3, 4):  # ends at T0 + 84 minutes
        clock.advance(minutes=minutes)
        answers = together(*_passes(w1, w2, w3))
        started += _added(answers, "started")
    clock.advance(minutes=1, microseconds=-1)  # a microsecond before T0 + 85
    started += _added(together(*_passes(w1, w2, w3)), "started")
    ticks = sorted(r.steps["at"] for r in w1.runs(ticker))
    assert ticks == [T0 + timedelta(minutes=m) for m in range(5, 85, 5)]
    clock.advance(microseconds=1)
    started += _added(together(*_passes(w1, w2, w3)), "started")
    started += sum(_drain(w)["started"] for w in (w1, w2, w3))
    ticks = sorted(r.steps["at"] for r in w1.runs(ticker))
    assert ticks == [T0 + timedelta(minutes=m) for m in range(5, 90, 5)]
    assert started == len(ticks) == 17
    assert sorted(_marked(w1).values()) == [1] * 17


# --- hostile payloads in events that wake runs --------------------------------------------------

HOSTILE = {
    "empty": "",
    "five-megabytes": "x" * 5_000_000,
    "tag-lookalike": '{"__t": "uuid", "v": "not-a-uuid"}',
    "sql": "'); DELETE FROM kumiko_workflow_runs; --",
    "unicode": "ключ ☃ \U0001f600 \u202e",
}


@pytest.mark.parametrize("body", list(HOSTILE.values()), ids=list(HOSTILE))
def test_an_event_with_a_hostile_body_wakes_its_runs_with_the_body_as_it_was(
    app_on: Callable[..., App], clock: FakeClock, body: str
) -> None:
    w1, w2 = _apps(app_on, clock, 2)
    runs = [w1.start_workflow(waiter, Job(9), user=ADA) for _ in range(3)]
    answers = together(lambda: _dispatch(w2, ring, Ring(9, body), ADA), *_passes(w1, w2))
    assert answers[0] == Ok(None)
    assert _added(answers, "resumed") + _drain(w1)["resumed"] == 3
    for run_id in runs:
        run = w2.get_run(run_id)
        assert run is not None and run.status == "completed" and run.steps["got"] == Rung(9, body)
    assert _marked(w1) == {(run_id, "after"): 1 for run_id in runs}


def test_an_event_without_fields_wakes_the_runs_waiting_for_it(app_on: Callable[..., App], clock: FakeClock) -> None:
    w1, w2 = _apps(app_on, clock, 2)
    mine = w1.start_workflow(poked, Job(1), user=ADA)
    theirs = w1.start_workflow(poked, Job(1), user=BOB)
    answers = together(lambda: _dispatch(w2, poke, Job(1), ADA), *_passes(w1, w2))
    assert answers[0] == Ok(None)
    _drain(w1)
    got = w1.get_run(mine)
    assert got is not None and got.status == "completed" and got.steps["got"] == Poke()
    assert w1.get_run(theirs).status == "suspended"  # type: ignore[union-attr]


# --- a worker killed after a retry's attempt ----------------------------------------------------

#: A worker process: one pass of an App of this module at the given time, that dies
#: (``os._exit(137)``: no clean-up, its transaction open) at the COMMIT of the transaction
#: in which the named step ran, as a SIGKILLed worker does.
WORKER = """
import os, sys
from datetime import datetime
sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]
import sqlalchemy as sa
import test_workflow_concurrency_audit as m
from kumiko_typed import App
from kumiko_typed.testing import FakeClock

url, at, die_after = sys.argv[2], datetime.fromisoformat(sys.argv[3]), sys.argv[4]
app = App([m.f], database_url=url, clock=FakeClock(at))
ran = []
m._ran.append(lambda step: ran.append(step) if step == die_after else None)
sa.event.listen(app.engine, "commit", lambda conn: os._exit(137) if ran else None)
print(app.run_worker(once=True), flush=True)
"""


def _worker(db_url: str, at: datetime, die_after: str) -> subprocess.CompletedProcess[str]:
    here = Path(__file__).resolve().parent
    return subprocess.run(
        [sys.executable, "-c", WORKER, str(here), db_url, at.isoformat(), die_after],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        cwd=here.parents[1],
        check=False,
    )


def test_a_worker_killed_after_a_retrys_attempt_succeeded_loses_the_segment_and_another_redoes_it_once(
    app_on: Callable[..., App], clock: FakeClock, db_url: str
) -> None:
    (app,) = _apps(app_on, clock, 1)
    run_id = app.start_workflow(backoff, Job(1), user=ADA)  # attempt 1 fails: due again at T0 + 1 min
    died = _worker(db_url, T0 + timedelta(minutes=1), "after")  # attempt 2 and the step after it, then dies
    assert died.returncode == 137, died.stderr
    run = app.get_run(run_id)
    assert run is not None and (run.status, run.path) == ("suspended", "@retry/#2") and _marked(app) == {}
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    run = app.get_run(run_id)
    assert run is not None and run.status == "completed" and run.steps["try"] == "attempt"
    assert _marked(app) == {(run_id, "attempt"): 1, (run_id, "after"): 1}


def test_a_worker_killed_after_a_failed_attempt_leaves_the_attempt_uncounted(
    app_on: Callable[..., App], clock: FakeClock, db_url: str
) -> None:
    """The attempt the dead worker made is not one of ``times``: the run is not failed as
    having used its two attempts, its first is made again."""
    (app,) = _apps(app_on, clock, 1)
    run_id = app.start_workflow(late_backoff, Job(1), user=ADA)
    died = _worker(db_url, T0 + timedelta(minutes=1), "failed")  # attempt 1 fails, then the worker dies
    assert died.returncode == 137, died.stderr
    run = app.get_run(run_id)
    assert run is not None and (run.status, run.path) == ("suspended", "@wait")
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1  # attempt 1 again, failed
    run = app.get_run(run_id)
    assert run is not None and (run.status, run.path) == ("suspended", "@retry/#2")
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    run = app.get_run(run_id)
    assert run is not None and run.status == "completed"
    assert _marked(app) == {(run_id, "attempt"): 1, (run_id, "after"): 1}
