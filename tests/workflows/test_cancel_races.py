"""Operators' cancels and purges against workers busy with the same runs, on SQLite and
PostgreSQL, each side with an App (and connections) of its own and every interleaving
fixed by the test (a step or an event key held on a ``threading.Event``), not by timing:

- a cancel behind a segment in flight answers the run as that segment left it, whole
  (its step values, entity, event and outbox row), and the run never runs a step again;
- a cancel of a run whose event the feed is matching at that moment: the run is either
  resumed or cancelled, never both, and a cancelled run's wait is gone;
- two cancels at once, with different reasons: one cancellation, both told of it;
- a purge beside a worker finishing a run, or a start: only finished runs go, and no
  part or wait is left without its run."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import failure_of, lock_waiters, together
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, RetryPolicy, User, fail, manual, ok
from kumiko_typed._tables import events, outbox, workflow_parts, workflow_runs, workflow_waits
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T = TypeVar("T")
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
BOB = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
#: Events of this ref are held in the feed (``_Hold.key``); the runs wait for their own n.
HELD_REF = 900


@attrs.frozen
class Job:
    n: int


@attrs.frozen
class Rang:
    ref: int


@attrs.frozen
class Ring:
    ref: int


class CrBell(Entity):
    __tablename__ = "cr_bell"
    label: Mapped[str]


class _Hold:
    """Where a test holds a worker: in a step (``step``) or while the feed reads an
    event's key (``key``, events of ``HELD_REF`` only).  ``entered`` is set once held."""

    entered = threading.Event()
    release = threading.Event()

    @classmethod
    def here(cls) -> None:
        cls.entered.set()
        assert cls.release.wait(60), "the test never let the worker go"

    @classmethod
    def step(cls, n: int) -> int:
        cls.here()
        return n

    @classmethod
    def key(cls, ref: int) -> int:
        if ref == HELD_REF:
            cls.here()
        return ref


@pytest.fixture(autouse=True)
def _reset_hold() -> Iterator[None]:
    _Hold.entered.clear()
    _Hold.release.clear()
    yield
    _Hold.release.set()  # a failed test never leaves a worker thread behind it held


def _feature(url: str) -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("cr", requires=["webhook.send"])
    f.entity(CrBell)
    f.event(Rang)
    busy = f.workflow(
        "busy",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job)
        .wait("PT1H")
        .create("bell", CrBell, data=lambda c: CrBell(label=f"b{c.payload.n}"))
        .append_event(CrBell, id=lambda c: c.steps["bell"].id, event=lambda c: Rang(c.payload.n + 1000))
        .send_webhook(url=lambda c: url, body=lambda c: {"n": c.payload.n}, retry=RetryPolicy(times=1))
        .compute("held", lambda c: _Hold.step(c.payload.n))
        .wait_for_event("next", Rang, key=lambda c: c.payload.n, event_key=lambda e: e.ref, timeout="P1D")
        .compute("after", lambda c: c.payload.n)
        .return_(lambda c: ok(c.steps["after"])),
    )
    listens = f.workflow(
        "listens",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job)
        .wait_for_event("got", Rang, key=lambda c: c.payload.n, event_key=lambda e: _Hold.key(e.ref), timeout="P1D")
        .compute("after", lambda c: c.payload.n)
        .return_(lambda c: ok(c.steps["after"])),
    )
    ends = f.workflow(
        "ends",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job)
        .compute("items", lambda c: [f"item-{i}" * 40 for i in range(200)])
        .wait("PT1H")
        .compute("held", lambda c: _Hold.step(c.payload.n))
        .return_(lambda c: ok(c.payload.n)),
    )
    keeps = f.workflow(
        "keeps",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job)
        .compute("items", lambda c: [f"item-{i}" * 40 for i in range(200)])
        .wait_for_event("got", Rang, key=lambda c: c.payload.n, event_key=lambda e: e.ref, timeout="P1D"),
    )
    broken = f.workflow(
        "broken",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job).return_(lambda c: fail("unprocessable", "no")),
    )
    quick = f.workflow(
        "quick",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job).compute("held", lambda c: _Hold.step(c.payload.n)),
    )
    ring = f.write_handler(
        "ring",
        f.pipeline(Ring)
        .create("bell", CrBell, data=lambda c: CrBell(label="r"))
        .append_event(CrBell, id=lambda c: c.steps["bell"].id, event=lambda c: Rang(c.payload.ref))
        .return_(lambda c: ok(None)),
    )
    parts = {"busy": busy, "listens": listens, "ends": ends, "keeps": keeps, "broken": broken, "quick": quick}
    return f, {**parts, "ring": ring}


@attrs.frozen
class _Setup:
    worker: App
    operator: App
    clock: FakeClock
    w: dict[str, Any]


@pytest.fixture
def setup(app_on: AppOn, receiver: Receiver) -> _Setup:
    clock = FakeClock(T0)
    f, w = _feature(receiver.url())
    worker = app_on([f], clock=clock)
    operator = app_on([f], clock=clock)
    _patient(operator)
    return _Setup(worker, operator, clock, w)


def _patient(app: App) -> None:
    """Let the operator's App wait a minute for a lock (SQLite's busy timeout is five
    seconds): it waits for a held worker whose release the test controls, and a loaded
    machine must not turn that into ``unavailable``."""

    def wait_longer(dbapi_connection: Any, _record: object) -> None:
        if app.engine.dialect.name == "sqlite":
            dbapi_connection.execute("PRAGMA busy_timeout=60000")

    sa.event.listen(app.engine, "connect", wait_longer)
    app.engine.dispose()


def _began(app: App) -> threading.Event:
    """Set when ``app`` next takes a connection from its pool, right before it begins
    (SQLite's ``BEGIN IMMEDIATE`` then waits for the writer)."""
    began = threading.Event()
    sa.event.listen(app.engine, "checkout", lambda *_: began.set(), once=True)
    return began


def _behind_the_worker(s: _Setup, call: Callable[[], T]) -> T:
    """Run ``call`` (an operator's) in a thread while the worker is held, let the worker go
    once ``call`` has begun its transaction (on PostgreSQL: once it waits for a lock, ≤ 60 s),
    and return its answer."""
    began = _began(s.operator)
    answer: list[T] = []
    thread = threading.Thread(target=lambda: answer.append(call()))
    thread.start()
    assert began.wait(60), "the operator's call never began"
    if s.operator.engine.dialect.name == "postgresql":
        pause = threading.Event()  # never set: a poll's interval
        for _ in range(600):
            with s.operator.engine.connect() as conn:
                if lock_waiters(conn):
                    break
            pause.wait(0.1)
        else:
            raise AssertionError("the operator's call never waited for the worker's lock")
    _Hold.release.set()
    thread.join(60)
    assert not thread.is_alive(), "the operator's call hung"
    (got,) = answer
    return got


def _held(work: Callable[[], object]) -> threading.Thread:
    """``work`` (a worker pass, a start) in a thread, returned once held in ``_Hold``."""
    thread = threading.Thread(target=work)
    thread.start()
    assert _Hold.entered.wait(60), "the worker never reached the held step"
    return thread


def _count(app: App, table: sa.Table, *where: Any) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(table).where(*where)) or 0)


def _orphans(app: App) -> tuple[int, int]:
    """Parts and waits whose run is gone."""
    gone = ~sa.exists().where(workflow_runs.c.run_id == workflow_parts.c.run_id)
    parts = _count(app, workflow_parts, gone)
    gone = ~sa.exists().where(workflow_runs.c.run_id == workflow_waits.c.run_id)
    return parts, _count(app, workflow_waits, gone)


def _drain(s: _Setup) -> None:
    s.clock.advance(days=2)
    for _ in range(5):
        s.worker.run_worker(once=True)


# --- cancel behind a segment in flight ----------------------------------------------------


def test_a_cancel_behind_a_segment_answers_the_run_as_that_segment_left_it_whole(
    setup: _Setup, receiver: Receiver
) -> None:
    """The segment (an entity, an event, an outbox row, two step values, an event wait)
    commits whole; the cancel, which waited for it, cancels the run it left, answers
    exactly what is stored, drops the wait the segment stored, and nothing of the run
    runs again: not the event it waited for, not its timeout."""
    s = setup
    run_id = s.worker.start_workflow(s.w["busy"], Job(5), user=ADA)
    s.clock.advance(hours=1)
    worker = _held(lambda: s.worker.run_worker(once=True))
    answer = _behind_the_worker(s, lambda: s.operator.cancel_run(run_id, user=ADA, reason="stop"))
    worker.join(60)
    assert isinstance(answer, Ok), answer
    info = answer.data
    assert (info.status, info.path, info.wake_at) == ("cancelled", "next", None)
    assert info.steps["held"] == 5 and "bell" in info.steps
    assert info.error == {"code": "cancelled", "message": "stop", "by": str(ADA.id)}
    assert s.worker.get_run(run_id) == info  # the answer is what is stored
    assert _count(s.worker, workflow_waits, workflow_waits.c.run_id == run_id) == 0
    assert _count(s.worker, events) == 2  # the segment's bell created, and rung
    assert _count(s.worker, outbox) == 1
    assert s.worker.dispatch(s.w["ring"], Ring(5), user=ADA) == Ok(None)  # what it waited for
    _drain(s)
    after = s.worker.get_run(run_id)
    assert after is not None and (after.status, after.steps, after.updated_at) == (
        "cancelled",
        info.steps,
        info.updated_at,
    )
    assert len(receiver.requests) == 1  # the committed segment's webhook, sent once


def test_a_cancel_behind_the_last_segment_is_refused_and_the_run_completed_whole(setup: _Setup) -> None:
    """The held segment completes the run: the cancel, which waited for it, is
    ``status_conflict`` naming ``completed``, and the run's parts (its long list) are
    folded into its row, none left behind."""
    s = setup
    run_id = s.worker.start_workflow(s.w["ends"], Job(3), user=ADA)
    assert _count(s.worker, workflow_parts, workflow_parts.c.run_id == run_id) >= 1
    s.clock.advance(hours=1)
    worker = _held(lambda: s.worker.run_worker(once=True))
    answer = _behind_the_worker(s, lambda: s.operator.cancel_run(run_id, user=ADA, reason="stop"))
    worker.join(60)
    assert failure_of(answer, "status_conflict").details == {"status": "completed"}
    assert s.worker.result(s.w["ends"], run_id, user=ADA) == Ok(3)


def test_a_cancel_holding_the_run_leaves_the_worker_nothing_of_it_to_run(setup: _Setup) -> None:
    """The cancel holds the run (its transaction held before its COMMIT) as its timer
    falls due: the worker passes it by (PostgreSQL: locked, skipped) or waits for the
    cancel (SQLite: the writer's lock) and finds it cancelled.  No step of it ever runs:
    no entity, event, outbox row or step value of that segment, in part or whole."""
    s = setup
    _patient(s.worker)
    run_id = s.worker.start_workflow(s.w["busy"], Job(6), user=ADA)
    s.clock.advance(hours=1)
    holding, go = threading.Event(), threading.Event()

    def hold_commit(_conn: object) -> None:
        holding.set()
        assert go.wait(60), "the test never let the cancel commit"

    sa.event.listen(s.operator.engine, "commit", hold_commit, once=True)
    answer: list[object] = []
    cancel = threading.Thread(target=lambda: answer.append(s.operator.cancel_run(run_id, user=ADA, reason="stop")))
    cancel.start()
    try:
        assert holding.wait(60), "the cancel never reached its commit"
        if s.worker.engine.dialect.name == "postgresql":
            assert s.worker.run_worker(once=True)["resumed"] == 0  # while the cancel holds the run
            go.set()
        else:
            began = _began(s.worker)
            worker = threading.Thread(target=lambda: s.worker.run_worker(once=True))
            worker.start()
            assert began.wait(60), "the worker never began"
            go.set()
            worker.join(60)
    finally:
        go.set()
        cancel.join(60)
    (cancelled,) = answer
    assert isinstance(cancelled, Ok) and cancelled.data.status == "cancelled", cancelled
    assert (cancelled.data.path, cancelled.data.steps) == ("@wait", {})
    _drain(s)
    assert s.worker.get_run(run_id) == cancelled.data
    assert _count(s.worker, events) == _count(s.worker, outbox) == 0
    with s.worker.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(CrBell)) == 0


# --- cancel against the event feed -------------------------------------------------------


def test_a_cancel_while_the_feed_matches_the_runs_event_ends_one_way(setup: _Setup) -> None:
    """The feed is held as it reads the event's key, before it takes the run.  PostgreSQL:
    the run's row is free, the cancel wins at once, and the feed then finds the run
    cancelled (its wait gone) and leaves it.  SQLite: the feed's transaction holds the
    writer's lock, the cancel waits for it, finds the run completed and says so.  Either
    way the run is resumed or cancelled, never both, and the answer is what is stored."""
    s = setup
    run_id = s.worker.start_workflow(s.w["listens"], Job(HELD_REF), user=ADA)
    s.worker.run_worker(once=True)  # arms the wait: the held pass takes no lock of the run before
    assert s.operator.dispatch(s.w["ring"], Ring(HELD_REF), user=ADA) == Ok(None)
    feed = _held(lambda: s.worker.run_worker(once=True))
    if s.worker.engine.dialect.name == "postgresql":
        answer = s.operator.cancel_run(run_id, user=ADA, reason="stop")  # while the feed is held
        _Hold.release.set()
    else:
        answer = _behind_the_worker(s, lambda: s.operator.cancel_run(run_id, user=ADA, reason="stop"))
    feed.join(60)
    _drain(s)
    run = s.worker.get_run(run_id)
    assert run is not None
    if s.worker.engine.dialect.name == "postgresql":
        assert isinstance(answer, Ok) and answer.data.status == "cancelled", answer
        assert run.status == "cancelled" and "after" not in run.steps and run.path == "got"
    else:
        assert failure_of(answer, "status_conflict").details == {"status": "completed"}
        assert run.status == "completed" and run.steps["after"] == HELD_REF
    assert _count(s.worker, workflow_waits) == 0  # resumed or cancelled, its wait is gone
    assert s.operator.purge_runs(older_than=timedelta(0)) == 1
    assert _orphans(s.worker) == (0, 0)


# --- two operators -------------------------------------------------------------------------


def test_two_cancels_at_once_are_one_cancellation_both_told_of_it(setup: _Setup) -> None:
    s = setup
    other = s.worker  # a second operator, with connections of its own
    for n in range(5):
        run_id = s.worker.start_workflow(s.w["listens"], Job(n), user=ADA)
        one, two = together(
            lambda: s.operator.cancel_run(run_id, user=ADA, reason="one"),
            lambda: other.cancel_run(run_id, user=ADA, reason="two"),
        )
        assert isinstance(one, Ok) and isinstance(two, Ok), (one, two)
        assert one == two  # the second finds it cancelled: the first reason stands
        assert one.data.error is not None and one.data.error["message"] in ("one", "two")
        assert s.worker.get_run(run_id) == one.data
        assert _count(s.worker, workflow_waits, workflow_waits.c.run_id == run_id) == 0


def test_cancels_of_what_cannot_be_cancelled_are_failures_that_name_it(
    setup: _Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed run, a completed one, another tenant's, a purged one and an id never used:
    each a ``Failure`` (nothing logged as an error, no SQL in it), and nothing changed."""
    s = setup
    failed = s.worker.start_workflow(s.w["broken"], Job(1), user=ADA)
    _Hold.release.set()  # "quick" runs through its held step
    done = s.worker.start_workflow(s.w["quick"], Job(2), user=ADA)
    bobs = s.worker.start_workflow(s.w["listens"], Job(3), user=BOB)
    purged = s.worker.start_workflow(s.w["listens"], Job(4), user=ADA)
    assert isinstance(s.operator.cancel_run(purged, user=ADA), Ok)
    assert s.operator.purge_runs(older_than=timedelta(0), status="cancelled") == 1
    before = {run.run_id: run for run in s.worker.runs()}
    answers = {
        "failed": failure_of(s.operator.cancel_run(failed, user=ADA), "status_conflict"),
        "completed": failure_of(s.operator.cancel_run(done, user=ADA), "status_conflict"),
        "bobs": failure_of(s.operator.cancel_run(bobs, user=ADA), "not_found"),
        "purged": failure_of(s.operator.cancel_run(purged, user=ADA), "not_found"),
        "unknown": failure_of(s.operator.cancel_run(uuid.UUID(int=7), user=ADA), "not_found"),
    }
    assert answers["failed"].details == {"status": "failed"}
    assert answers["completed"].details == {"status": "completed"}
    assert answers["bobs"].message == f"no workflow run {bobs}"
    assert all("SELECT" not in a.message and "UPDATE" not in a.message for a in answers.values())
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert {run.run_id: run for run in s.worker.runs()} == before
    assert _count(s.worker, workflow_waits, workflow_waits.c.run_id == bobs) == 1


# --- purge beside workers ------------------------------------------------------------------


def test_a_purged_cancelled_run_takes_its_parts_and_leaves_no_wait(setup: _Setup) -> None:
    """A run holding a long list (stored as parts) and an event wait, cancelled, then
    purged: nothing of it stays, and the event it waited for wakes nothing."""
    s = setup
    run_id = s.worker.start_workflow(s.w["keeps"], Job(8), user=ADA)
    assert _count(s.worker, workflow_parts, workflow_parts.c.run_id == run_id) >= 1
    assert _count(s.worker, workflow_waits, workflow_waits.c.run_id == run_id) == 1
    assert isinstance(s.operator.cancel_run(run_id, user=ADA), Ok)
    assert s.operator.purge_runs(older_than=timedelta(0)) == 1
    assert s.worker.get_run(run_id) is None
    assert _count(s.worker, workflow_parts) == _count(s.worker, workflow_waits) == 0
    assert s.worker.dispatch(s.w["ring"], Ring(8), user=ADA) == Ok(None)
    assert s.worker.run_worker(once=True)["resumed"] == 0


def test_a_purge_beside_a_worker_finishing_a_run_deletes_it_only_once_finished(setup: _Setup) -> None:
    """PostgreSQL: the purge does not see the completion the held worker has not committed,
    and deletes nothing.  SQLite: the purge waits for the worker's transaction and then
    deletes the run it completed.  Neither leaves a part or wait of it."""
    s = setup
    run_id = s.worker.start_workflow(s.w["ends"], Job(3), user=ADA)
    waiting = s.worker.start_workflow(s.w["listens"], Job(1), user=ADA)  # suspended: stays
    s.clock.advance(hours=1)
    worker = _held(lambda: s.worker.run_worker(once=True))

    def purge() -> int:
        return s.operator.purge_runs(older_than=timedelta(0))  # everything finished by now

    if s.worker.engine.dialect.name == "postgresql":
        deleted = purge()
        _Hold.release.set()
    else:
        deleted = _behind_the_worker(s, purge)
    worker.join(60)
    finished = s.worker.get_run(run_id)
    if s.worker.engine.dialect.name == "postgresql":
        assert deleted == 0 and finished is not None and finished.status == "completed"
        assert s.operator.purge_runs(older_than=timedelta(0)) == 1
    else:
        assert deleted == 1 and finished is None
    assert s.worker.get_run(run_id) is None
    still = s.worker.get_run(waiting)
    assert still is not None and still.status == "suspended"
    assert _count(s.worker, workflow_waits, workflow_waits.c.run_id == waiting) == 1
    assert _orphans(s.worker) == (0, 0)


def test_a_purge_beside_a_start_never_deletes_the_run_being_started(setup: _Setup) -> None:
    """The start's first segment is held (its run's row not yet written): a purge of
    everything finished leaves it, on PostgreSQL at once, on SQLite once the start has
    committed (then it is finished: the purge that waited for it deletes it)."""
    s = setup
    started: list[uuid.UUID] = []
    starter = _held(lambda: started.append(s.worker.start_workflow(s.w["quick"], Job(1), user=ADA)))

    def purge() -> int:
        return s.operator.purge_runs(older_than=timedelta(0))

    if s.worker.engine.dialect.name == "postgresql":
        deleted = purge()
        _Hold.release.set()
    else:
        deleted = _behind_the_worker(s, purge)
    starter.join(60)
    (run_id,) = started
    run = s.worker.get_run(run_id)
    if s.worker.engine.dialect.name == "postgresql":
        assert deleted == 0 and run is not None and run.status == "completed"
    else:
        assert deleted == 1 and run is None
    assert _orphans(s.worker) == (0, 0)
