"""A looping worker's two sides — workflows (event feed, cron, due runs) and deliveries —
make progress independently, on SQLite and PostgreSQL: a webhook held by its receiver
does not hold up a ``wait_for_event`` wake-up, a due ``wait`` or an event-triggered
start, nor a workflow segment that takes long a delivery.  ``stop_worker()`` during a
held delivery returns once it ends, leaving no thread behind; a fatal error on either
side stops both and comes out of ``run_worker()``."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import attrs
import httpx
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import Hook
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok, on_event
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
#: Generous: only a wake-up that never comes (or a worker that never returns) exceeds it.
BOUND = 30.0


@attrs.frozen
class Await:
    ref: uuid.UUID


@attrs.frozen
class Arrived:
    ref: uuid.UUID


class WsParcel(Entity):
    __tablename__ = "ws_parcel"
    ref: Mapped[uuid.UUID]


#: Opened by the test that blocks a workflow segment (the reverse of a held delivery).
gate = threading.Event()
in_segment = threading.Event()

f = Feature("ws", requires=["webhook.send"])
f.entity(WsParcel)
f.event(Arrived)
hook = f.write_handler(
    "hook",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}).return_(lambda c: ok(None)),
)
announce = f.write_handler(
    "announce",
    f.pipeline(Await)
    .create("parcel", WsParcel, data=lambda c: WsParcel(ref=c.payload.ref))
    .append_event(WsParcel, id=lambda c: c.steps["parcel"].id, event=lambda c: Arrived(c.payload.ref))
    .return_(lambda c: ok(None)),
)
waiter = f.workflow(
    "waiter",
    trigger=manual(Await),
    pipeline=f.workflow_pipeline(Await).wait_for_event(
        "got", Arrived, key=lambda c: c.payload.ref, event_key=lambda e: e.ref, timeout="PT1H"
    ),
)
sleeper = f.workflow(
    "sleeper",
    trigger=manual(Await),
    pipeline=f.workflow_pipeline(Await).wait("PT1M").compute("woke", lambda c: str(c.payload.ref)),
)
on_arrival = f.workflow(
    "on_arrival",
    trigger=on_event(Arrived),
    pipeline=f.workflow_pipeline(Arrived).compute("seen", lambda c: str(c.payload.ref)),
)
notifier = f.workflow(
    "notifier",
    trigger=manual(Hook),
    pipeline=f.workflow_pipeline(Hook).wait("PT0S").send_webhook(url=lambda c: c.payload.url, body=lambda c: {}),
)
slow = f.workflow(
    "slow",
    trigger=manual(Await),
    pipeline=f.workflow_pipeline(Await)
    .wait("PT0S")
    .compute("entered", lambda c: in_segment.set() or True)
    .compute("held", lambda c: gate.wait(60)),
)


def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {BOUND} s: {what}")
        time.sleep(0.02)


def _worker_threads() -> list[str]:
    """The threads a worker starts (its delivery side, the delivery pool's)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("kumiko-")]


class Looping:
    """``app.run_worker()`` in a thread: what it returned or raised."""

    def __init__(self, app: App, poll_interval: float = 0.05) -> None:
        self.app = app
        self.counts: dict[str, int] = {}
        self.raised: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(poll_interval,), daemon=True)
        self.thread.start()

    def _run(self, poll_interval: float) -> None:
        try:
            self.counts.update(self.app.run_worker(poll_interval=poll_interval))
        except BaseException as exc:
            self.raised.append(exc)

    def stop(self) -> None:
        self.app.stop_worker()
        self.thread.join(BOUND)
        assert not self.thread.is_alive(), "run_worker() did not return after stop_worker()"


@attrs.define
class Held:
    """A receiver that holds every request until the test releases it."""

    receiver: Receiver
    entered: threading.Event = attrs.field(factory=threading.Event)
    release: threading.Event = attrs.field(factory=threading.Event)

    def respond(self, _index: int, _path: str) -> tuple[int, dict[str, str]]:
        self.entered.set()
        self.release.wait(90)
        return 200, {}


@pytest.fixture
def held(receiver: Receiver) -> Iterator[Held]:
    h = Held(receiver)
    receiver.respond = h.respond
    yield h
    h.release.set()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock) -> App:
    # The client outwaits the receiver: a held delivery hangs until released.
    return app_on([f], clock=clock, http=httpx.Client(timeout=120))


def _completed(app: App, run_id: uuid.UUID) -> bool:
    info = app.get_run(run_id)
    return info is not None and info.status == "completed"


def _hold_a_delivery(app: App, held: Held, user: User) -> None:
    assert app.dispatch(hook, Hook(held.receiver.url()), user=user) == Ok(None)
    assert held.entered.wait(BOUND), "the worker never reached the receiver"


def test_a_wait_for_event_is_woken_while_a_delivery_is_held(app: App, held: Held, user: User) -> None:
    ref = uuid.uuid4()
    run_id = app.start_workflow(waiter, Await(ref), user=user)
    worker = Looping(app)
    try:
        _hold_a_delivery(app, held, user)
        assert app.dispatch(announce, Await(ref), user=user) == Ok(None)
        _eventually(lambda: _completed(app, run_id), "the waiting run completed")
        assert not held.release.is_set() and len(held.receiver.requests) == 1  # still held
        info = app.get_run(run_id)
        assert info is not None and info.steps["got"] == Arrived(ref)
        # The event also started its triggered run, while the delivery was held.
        _eventually(lambda: [r.status for r in app.runs(on_arrival)] == ["completed"], "the triggered run")
        assert not held.release.is_set()
    finally:
        held.release.set()
        worker.stop()
    assert not worker.raised, worker.raised
    assert (worker.counts["started"], worker.counts["resumed"], worker.counts["sent"]) == (1, 1, 1)
    assert [i.status for i in app.outbox()] == ["sent"]


def test_a_due_wait_is_resumed_while_a_delivery_is_held(app: App, held: Held, user: User, clock: FakeClock) -> None:
    run_id = app.start_workflow(sleeper, Await(uuid.uuid4()), user=user)
    worker = Looping(app)
    try:
        _hold_a_delivery(app, held, user)
        clock.advance(minutes=2)  # the run is due now, the delivery still held
        _eventually(lambda: _completed(app, run_id), "the due run completed")
        assert not held.release.is_set() and len(held.receiver.requests) == 1
    finally:
        held.release.set()
        worker.stop()
    assert not worker.raised, worker.raised
    assert (worker.counts["resumed"], worker.counts["sent"]) == (1, 1)


def test_a_steady_stream_of_rows_neither_holds_up_a_due_run_nor_a_stop(
    app: App, receiver: Receiver, user: User, clock: FakeClock
) -> None:
    """Every delivery queues the next webhook, so a delivery pass would never find nothing
    due: a due run is resumed meanwhile, and a stop ends the stream."""

    def queue_another(_index: int, _path: str) -> tuple[int, dict[str, str]]:
        assert app.dispatch(hook, Hook(receiver.url()), user=user) == Ok(None)
        return 200, {}

    receiver.respond = queue_another
    run_id = app.start_workflow(sleeper, Await(uuid.uuid4()), user=user)
    assert app.dispatch(hook, Hook(receiver.url()), user=user) == Ok(None)
    worker = Looping(app)
    try:
        _eventually(lambda: len(receiver.requests) >= 3, "the stream of deliveries started")
        clock.advance(minutes=2)
        _eventually(lambda: _completed(app, run_id), "the due run completed")
    finally:
        worker.stop()
    assert not worker.raised, worker.raised
    assert worker.counts["resumed"] == 1 and worker.counts["sent"] >= 3
    assert _worker_threads() == []


@pytest.mark.postgres
def test_a_delivery_goes_out_while_a_workflow_segment_is_under_way(
    fresh_postgres_url: str, receiver: Receiver, user: User
) -> None:
    """PostgreSQL only: on SQLite a segment under way holds the database's one write lock,
    so a delivery's claim waits for its commit there (docs/operations.md, Workers)."""
    gate.clear()
    in_segment.clear()
    app = App([f], database_url=fresh_postgres_url, clock=FakeClock(T0))
    app.create_all()
    run_id = app.start_workflow(slow, Await(uuid.uuid4()), user=user)
    assert app.dispatch(hook, Hook(receiver.url()), user=user) == Ok(None)
    worker = Looping(app)
    try:
        assert in_segment.wait(BOUND), "the worker never resumed the run"
        _eventually(lambda: [i.status for i in app.outbox()] == ["sent"], "the webhook was delivered")
        assert not gate.is_set() and not _completed(app, run_id)  # the segment is still under way
    finally:
        gate.set()
        worker.stop()
        app.dispose()
    assert not worker.raised, worker.raised
    assert (worker.counts["resumed"], worker.counts["sent"]) == (1, 1)


def test_a_resumed_segment_s_webhook_wakes_the_idle_delivery_side(
    app_on: Callable[..., App], receiver: Receiver, user: User
) -> None:
    """Polling every 60 s, the delivery side is idle when the workflow side commits the
    webhook a resumed run sends: the workflow side wakes it (on SQLite, where no NOTIFY
    comes, only it does)."""
    app = app_on([f])
    run_id = app.start_workflow(notifier, Hook(receiver.url()), user=user)
    worker = Looping(app, poll_interval=60)
    try:
        _eventually(lambda: _completed(app, run_id), "the run sent its webhook")
        _eventually(lambda: [i.status for i in app.outbox()] == ["sent"], "the webhook was delivered")
    finally:
        worker.stop()
    assert not worker.raised, worker.raised
    assert (worker.counts["resumed"], worker.counts["sent"]) == (1, 1)
    assert _worker_threads() == []


def test_stop_during_a_held_delivery_returns_once_it_ends_and_leaves_no_thread(
    app: App, held: Held, user: User
) -> None:
    worker = Looping(app)
    try:
        _hold_a_delivery(app, held, user)
        app.stop_worker()
        worker.thread.join(0.5)
        # Not before the delivery in flight ends (it is recorded, not abandoned).
        assert worker.thread.is_alive()
    finally:
        held.release.set()
    worker.thread.join(BOUND)
    assert not worker.thread.is_alive()
    assert not worker.raised, worker.raised
    assert worker.counts == {"started": 0, "resumed": 0, "sent": 1, "retried": 0, "dead": 0}
    assert [i.status for i in app.outbox()] == ["sent"]
    assert _worker_threads() == []


def test_a_stop_hands_back_the_claimed_rows_not_yet_started(
    app_on: Callable[..., App], held: Held, user: User, clock: FakeClock
) -> None:
    """One delivery at a time: the stop waits for the one in flight, and the other row of
    its batch is handed back, due at once, instead of being delivered first."""
    app = app_on([f], clock=clock, http=httpx.Client(timeout=120), delivery_concurrency=1)
    for _ in range(2):
        assert app.dispatch(hook, Hook(held.receiver.url()), user=user) == Ok(None)
    worker = Looping(app)
    try:
        assert held.entered.wait(BOUND), "the worker never reached the receiver"
        app.stop_worker()
    finally:
        held.release.set()
    worker.thread.join(BOUND)
    assert not worker.thread.is_alive() and not worker.raised, worker.raised
    assert worker.counts["sent"] == 1 and len(held.receiver.requests) == 1
    rows = sorted(app.outbox(), key=lambda i: i.status)
    assert [(i.status, i.attempts) for i in rows] == [("pending", 0), ("sent", 1)]
    assert rows[0].next_attempt_at is not None and rows[0].next_attempt_at <= clock()
    assert app.run_worker(once=True)["sent"] == 1


@pytest.mark.parametrize(("table", "side"), [("kumiko_outbox", "deliveries"), ("kumiko_consumers", "workflows")])
def test_a_fatal_error_on_one_side_stops_both_and_comes_out_of_run(
    app_on: Callable[..., App], table: str, side: str
) -> None:
    """A table missing from the start: the side that reads it never gets through, which
    is fatal; the other side, idle for a 60 s poll, is woken and stops too."""
    app = app_on([f])
    with app.engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {table}"))
    worker = Looping(app, poll_interval=60)
    worker.thread.join(BOUND)
    assert not worker.thread.is_alive(), f"a fatal error on the {side} side did not stop the worker"
    [raised] = worker.raised
    assert isinstance(raised, sa.exc.DBAPIError) and table in str(raised), raised
    assert _worker_threads() == []


def test_both_sides_write_at_once_without_a_failed_pass(
    app_on: Callable[..., App], receiver: Receiver, user: User, caplog: pytest.LogCaptureFixture
) -> None:
    """Runs resumed (each committing a webhook) while their webhooks are claimed and
    recorded: the two sides' transactions queue for the write lock on SQLite (every
    transaction begins IMMEDIATE), so none fails with "database is locked"."""
    caplog.set_level(logging.WARNING, logger="kumiko_typed")
    app = app_on([f])
    runs = [app.start_workflow(notifier, Hook(receiver.url()), user=user) for _ in range(40)]
    for _ in range(40):
        assert app.dispatch(hook, Hook(receiver.url()), user=user) == Ok(None)
    worker = Looping(app, poll_interval=0.01)
    try:
        _eventually(lambda: all(_completed(app, r) for r in runs), "every run completed")
        _eventually(lambda: {i.status for i in app.outbox()} == {"sent"}, "every webhook was delivered")
    finally:
        worker.stop()
    assert not worker.raised, worker.raised
    assert (worker.counts["resumed"], worker.counts["sent"]) == (40, 80)
    assert len(receiver.requests) == 80
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_stop_asked_before_the_loop_starts_still_stops_it(app: App) -> None:
    app.stop_worker()
    assert app.run_worker(poll_interval=60) == dict.fromkeys(("started", "resumed", "sent", "retried", "dead"), 0)
    assert _worker_threads() == []


def test_once_runs_everything_in_one_sequential_pass(app: App, receiver: Receiver, user: User) -> None:
    """``once=True``: the run resumed, then the webhook it queued delivered, in the same pass."""
    run_id = app.start_workflow(notifier, Hook(receiver.url()), user=user)
    assert app.run_worker(once=True) == {"started": 0, "resumed": 1, "sent": 1, "retried": 0, "dead": 0}
    assert _completed(app, run_id) and len(receiver.requests) == 1
    assert _worker_threads() == []


def test_a_worker_on_an_in_memory_sqlite_database_loops_in_one_thread(receiver: Receiver, user: User) -> None:
    """Only the thread that made an in-memory database sees it: such a worker does both
    kinds of work in the calling thread, in order, as one pass does."""
    made: list[App] = []
    counts: dict[str, int] = {}
    raised: list[BaseException] = []

    def work() -> None:
        try:
            app = App([f], database_url="sqlite://")
            made.append(app)
            app.create_all()
            app.start_workflow(notifier, Hook(receiver.url()), user=user)
            assert app.dispatch(hook, Hook(receiver.url()), user=user) == Ok(None)
            counts.update(app.run_worker(poll_interval=0.05))
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        _eventually(lambda: len(receiver.requests) == 2 or not thread.is_alive(), "both webhooks were delivered")
    finally:
        if made:
            made[0].stop_worker()
        thread.join(BOUND)
    assert not thread.is_alive() and not raised, raised
    assert (counts["resumed"], counts["sent"]) == (1, 2)
    assert _worker_threads() == []
    made[0].dispose()


@pytest.mark.parametrize("interval", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_a_poll_interval_that_is_no_positive_finite_number_is_refused_before_any_pass(
    app: App, interval: object
) -> None:
    """0 or less would poll the database in a busy loop; NaN and infinity made the idle
    wait raise deep in ``selectors`` (``cannot convert float NaN to integer``)."""
    with pytest.raises(ValueError, match="poll_interval must be a positive number of seconds"):
        app.run_worker(poll_interval=interval)  # type: ignore[arg-type]
    assert _worker_threads() == []
