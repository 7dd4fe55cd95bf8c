"""Faults an outside reviewer injects into the workflow engine: a wake time given without
a time zone, on a PostgreSQL server whose time zone is not UTC; the clock moved back;
an event appended by another run of the same worker transaction.  Both databases; time
is a hand-moved clock."""

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
from _support import lock_waiters, ok_data, run_info, server_time_zone
from sqlalchemy.orm import Mapped

from kumiko_typed import App, CronTick, Entity, Feature, User, cron, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
AppOn = Callable[..., App]
USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


@attrs.frozen
class Go:
    n: int


def test_a_wake_time_without_a_time_zone_is_utc_on_both_databases(db_url: str) -> None:
    """A ``wait`` resolver's naive datetime is taken as UTC (``UtcDateTime``).  Before, on
    PostgreSQL it was sent as a ``timestamp`` and read in the server's time zone: at +14
    hours the run woke 14 hours early; SQLite woke it at 10:00 UTC."""
    server_time_zone(db_url, "Pacific/Kiritimati")  # UTC+14
    f = Feature("naive_wake")
    flow = f.workflow(
        "flow",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).wait(lambda c: datetime(2026, 3, 2, 10, 0)).compute("done", lambda c: 1),
    )
    clock = FakeClock(T0)
    app = App([f], database_url=db_url, clock=clock)
    try:
        app.create_all()
        run_id = app.start_workflow(flow, Go(1), user=USER)
        assert run_info(app, run_id).wake_at == datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
        clock.advance(minutes=30)
        app.run_worker(once=True)
        assert run_info(app, run_id).status == "suspended"  # 09:30 UTC: not yet
        clock.advance(minutes=30)
        app.run_worker(once=True)
        assert run_info(app, run_id).status == "completed"
    finally:
        app.dispose()


def test_cron_ticks_in_utc_on_both_databases_whatever_the_servers_time_zone(db_url: str) -> None:
    """``cron("0 9 * * *")`` is 09:00 UTC.  Before, PostgreSQL read the schedule's cursor
    back in the server's time zone and croniter went on in that zone: at +14 hours the
    ticks came at 19:00 UTC (09:00 there), and ``scheduled_at`` carried +14:00."""
    server_time_zone(db_url, "Pacific/Kiritimati")
    f = Feature("cron_zone")
    f.workflow(
        "daily",
        trigger=cron("0 9 * * *"),
        pipeline=f.workflow_pipeline(CronTick).compute("at", lambda c: c.payload.scheduled_at),
    )
    clock = FakeClock(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
    app = App([f], database_url=db_url, clock=clock)
    try:
        app.create_all()
        app.run_worker(once=True)  # starts the schedule
        fired = []
        for _hour in range(26):
            clock.advance(hours=1)
            if app.run_worker(once=True)["started"]:
                fired.append(clock.now)
        assert fired == [datetime(2026, 3, 2, 9, 0, tzinfo=UTC), datetime(2026, 3, 3, 9, 0, tzinfo=UTC)]
        ticks = sorted(run.steps["at"] for run in app.runs())
        assert ticks == fired
        assert {tick.utcoffset() for tick in ticks} == {timedelta(0)}
    finally:
        app.dispose()


class WffCounter(Entity):
    __tablename__ = "wff_counter"
    n: Mapped[int]


@attrs.frozen
class NewCounter:
    n: int


@attrs.frozen
class Bump:
    counter: uuid.UUID


locking = Feature("wff_lock")
locking.entity(WffCounter)
new_counter = locking.write_handler(
    "new",
    locking.pipeline(NewCounter)
    .create("counter", WffCounter, data=lambda c: WffCounter(n=c.payload.n))
    .return_(lambda c: ok(c.steps["counter"].id)),
)


def _read_locked(c: object) -> int:
    """Read the counter ``FOR UPDATE``, as a read-decide-write does before a wait."""
    stmt = sa.select(WffCounter.n).where(WffCounter.id == c.payload.counter).with_for_update()  # type: ignore[attr-defined]
    return int(c.db.execute(stmt).scalar_one())  # type: ignore[attr-defined]


bump = locking.workflow(
    "bump",
    trigger=manual(Bump),
    pipeline=locking.workflow_pipeline(Bump).wait("PT1M").compute("seen", _read_locked),
)


@pytest.mark.postgres
def test_a_resumed_segment_that_times_out_on_a_lock_is_tried_again_not_failed(fresh_postgres_url: str) -> None:
    """A segment a worker resumed that waits past the server's ``lock_timeout`` for a row
    another transaction holds (or loses a deadlock) is ``unavailable``: the database, not
    the run.  Before, the worker stored that as the run's end (``failed``, "try again",
    with no one to try); now it is tried again shortly from where it stood, like a
    segment that lost a race (``version_conflict``)."""
    _lock_timeout(fresh_postgres_url, "200ms")
    clock = FakeClock(T0)
    app = App([locking], database_url=fresh_postgres_url, clock=clock)
    try:
        app.create_all()
        counter = ok_data(app.dispatch(new_counter, NewCounter(7), user=USER))
        run_id = app.start_workflow(bump, Bump(counter), user=USER)
        clock.advance(minutes=2)
        holder = sa.create_engine(fresh_postgres_url, poolclass=sa.pool.NullPool)
        with holder.begin() as conn:  # another transaction holds the row the segment reads
            conn.execute(sa.select(WffCounter.n).where(WffCounter.id == counter).with_for_update())
            app.run_worker(once=True)
            run = run_info(app, run_id)
            assert (run.status, run.path) == ("suspended", "@wait"), run
            # An operator sees why it waits: the error, and how many tries so far.
            assert run.error is not None and (run.error["code"], run.error["tries"]) == ("unavailable", "1")
        holder.dispose()
        clock.advance(seconds=2)
        app.run_worker(once=True)
        run = run_info(app, run_id)
        assert (run.status, dict(run.steps), run.error) == ("completed", {"seen": 7}, None)
    finally:
        app.dispose()


def _lock_timeout(db_url: str, value: str) -> None:
    """An operator's ``lock_timeout`` for every new connection to the database."""
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        name = conn.execute(sa.text("SELECT current_database()")).scalar_one()
        conn.execute(sa.text(f"ALTER DATABASE \"{name}\" SET lock_timeout = '{value}'"))
    engine.dispose()


@attrs.frozen
class Ping:
    key: int


@attrs.frozen
class Listen:
    counter: uuid.UUID


locking.event(Ping)
ping = locking.write_handler(
    "ping",
    locking.pipeline(Listen)
    .append_event(WffCounter, id=lambda c: c.payload.counter, event=lambda c: Ping(1))
    .return_(lambda c: ok(None)),
)
listen = locking.workflow(
    "listen",
    trigger=manual(Listen),
    pipeline=locking.workflow_pipeline(Listen).wait_for_event(
        "got", Ping, key=lambda c: 1, event_key=lambda e: e.key, timeout="PT1H"
    ),
)


@pytest.mark.postgres
def test_an_event_a_locked_run_missed_wakes_it_once_the_lock_holder_rolls_back(fresh_postgres_url: str) -> None:
    """The event commits before the wait's timeout; when the feed reads it, another
    worker holds the run (resuming it by its timeout, which had come meanwhile) and the
    feed passes it by: the timeout won.  But that worker dies, or its pass rolls back:
    the timeout never happened.  Before, the event was lost for the run all the same
    (the feed's cursor had moved on) and the next worker resumed it with ``None``, where
    one worker alone — or SQLite, whose transactions run one at a time — gives it the
    event."""
    clock = FakeClock(T0)
    app = App([locking], database_url=fresh_postgres_url, clock=clock)
    try:
        app.create_all()
        counter = ok_data(app.dispatch(new_counter, NewCounter(1), user=USER))
        run_id = app.start_workflow(listen, Listen(counter), user=USER)
        app.run_worker(once=True)  # the feed arms the wait
        clock.advance(minutes=30)
        ok_data(app.dispatch(ping, Listen(counter), user=USER))  # in time
        clock.advance(minutes=31)  # no worker ran meanwhile: the timeout is due too
        other = sa.create_engine(fresh_postgres_url, poolclass=sa.pool.NullPool)
        with other.connect() as conn:  # the other worker, in the middle of resuming the run
            conn.execute(sa.text("SELECT 1 FROM kumiko_workflow_runs WHERE run_id = :r FOR UPDATE"), {"r": run_id})
            passing = threading.Thread(target=app.run_worker, kwargs={"once": True})
            passing.start()  # its feed reads the event; the run is held
            deadline = time.monotonic() + 30
            while passing.is_alive() and not lock_waiters(conn) and time.monotonic() < deadline:
                time.sleep(0.02)
            conn.rollback()  # ... and that worker dies before it commits
            passing.join(30)
            assert not passing.is_alive()
        other.dispose()
        app.run_worker(once=True)
        run = run_info(app, run_id)
        assert (run.status, dict(run.steps)) == ("completed", {"got": Ping(1)})
    finally:
        app.dispose()


def test_an_event_that_came_before_the_wait_does_not_wake_it_while_another_transaction_runs(db_url: str) -> None:
    """The event commits five minutes before the run reaches its wait, while an unrelated
    transaction (a long report, another worker's batch) is still open.  Before, PostgreSQL
    noted the wait's view as the oldest transaction still running, so every event
    committed since that one began counted as unseen: the run was woken by an event that
    came before it waited, where SQLite (and the docs) leave it waiting."""
    clock = FakeClock(T0)
    app = App([locking], database_url=db_url, clock=clock)
    other = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        app.create_all()
        counter = ok_data(app.dispatch(new_counter, NewCounter(1), user=USER))
        with other.connect() as conn:
            if db_url.startswith("postgresql"):
                conn.execute(sa.text("SELECT pg_current_xact_id()"))  # a transaction with an id, left open
            ok_data(app.dispatch(ping, Listen(counter), user=USER))
            clock.advance(minutes=5)
            run_id = app.start_workflow(listen, Listen(counter), user=USER)
            app.run_worker(once=True)
            conn.rollback()
        app.run_worker(once=True)
        assert (run_info(app, run_id).status, run_info(app, run_id).path) == ("suspended", "got")
        ok_data(app.dispatch(ping, Listen(counter), user=USER))  # one after the wait does wake it
        app.run_worker(once=True)
        assert run_info(app, run_id).status == "completed"
    finally:
        other.dispose()
        app.dispose()


def _sleeps_once(slept: list[int]) -> Callable[[Any], int]:
    """A step whose first run waits in the database (until the test kills its backend)."""

    def step(c: Any) -> int:
        if not slept:
            slept.append(1)
            c.db.execute(sa.text("SELECT pg_sleep(30)"))
        return 1

    return step


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["resumed", "cron"])
def test_a_looping_worker_outlives_its_connection_killed_in_a_segment(fresh_postgres_url: str, how: str) -> None:
    """``pg_terminate_backend`` while a step's statement runs: the interpreter makes it
    the segment's ``unavailable``, and the worker went on to undo the segment on the dead
    connection, which SQLAlchemy refuses with ``PendingRollbackError`` — no database
    error, so the looping worker stopped with it (a resumed segment, lazily in a
    savepoint; a cron run's first, in one taken at once).  Now the pass fails as for any
    lost connection and is done again: the run completes."""
    slept: list[int] = []
    f = Feature(f"killed_{how}")
    if how == "cron":
        f.workflow(
            "flow",
            trigger=cron("* * * * *"),
            pipeline=f.workflow_pipeline(CronTick).compute("done", _sleeps_once(slept)),
        )
    else:
        flow = f.workflow(
            "flow",
            trigger=manual(Go),
            pipeline=f.workflow_pipeline(Go).wait("PT1M").compute("done", _sleeps_once(slept)),
        )
    clock = FakeClock(T0)
    app = App([f], database_url=fresh_postgres_url, clock=clock)
    killer = sa.create_engine(fresh_postgres_url, poolclass=sa.pool.NullPool)
    raised: list[BaseException] = []

    def loop() -> None:
        try:
            app.run_worker(poll_interval=0.05)
        except BaseException as exc:
            raised.append(exc)

    worker = threading.Thread(target=loop, daemon=True)
    try:
        app.create_all()
        app.run_worker(once=True)  # starts the cron schedule
        if how == "resumed":
            app.start_workflow(flow, Go(1), user=USER)
        clock.advance(minutes=1, seconds=1)
        worker.start()
        _eventually(lambda: _kill(killer, "SELECT pg_sleep%") > 0, "the step's statement was killed")
        _eventually(lambda: [r.status for r in app.runs()] == ["completed"] or not worker.is_alive(), "the run ended")
        assert not raised, raised
        assert [(r.status, dict(r.steps)) for r in app.runs()] == [("completed", {"done": 1})]
    finally:
        app.stop_worker()
        worker.join(30)
        killer.dispose()
        app.dispose()


def _kill(engine: sa.Engine, query: str) -> int:
    """Terminate the backends running ``query`` (a LIKE pattern): how many."""
    stmt = sa.text(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE :q AND pid <> pg_backend_pid()"
    )
    with engine.connect() as conn:
        return int(conn.execute(stmt, {"q": query}).scalar_one())


def _eventually(check: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)
