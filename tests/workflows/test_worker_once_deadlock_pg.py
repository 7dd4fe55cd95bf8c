"""``run_worker(once=True)`` on PostgreSQL, as a cron job calls it, with a second worker
at work: the event feed of one worker and a timeout segment of another must not deadlock.

They did: the feed started a run of an event (its first segment updated a row) and then
waited for the lock of a run whose wait that event matches; the other worker held that
run, resuming it by its timeout, and its segment updated the same row.  PostgreSQL broke
the cycle by failing the feed's statement, and the single pass raised the deadlock (the
looping worker retried it a poll interval later).  The feed now waits for a run's lock
only in a transaction that has run no segment: it commits what came before the event
and matches the event again, holding nothing the other worker waits for."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import lock_waiters
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok, on_event
from kumiko_typed.testing import FakeClock

pytestmark = [pytest.mark.postgres]

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))

side = sa.MetaData()
#: The row both segments update: whoever holds it makes the other wait.
shared = sa.Table("wod_shared", side, sa.Column("id", sa.Integer, primary_key=True), sa.Column("n", sa.Integer))


@attrs.frozen
class Start:
    n: int


@attrs.frozen
class Go:
    key: str


class WodThing(Entity):
    __tablename__ = "wod_thing"
    key: Mapped[str]


class _Gate:
    """Holds the due worker's segment after it claimed its run (inert unless armed)."""

    armed = False
    inside = threading.Event()
    go = threading.Event()


def _hold(c: Any) -> None:
    if _Gate.armed:
        _Gate.inside.set()
        assert _Gate.go.wait(60)


def _bump(c: Any) -> int:
    c.db.execute(sa.update(shared).where(shared.c.id == 1).values(n=shared.c.n + 1))
    return 1


f = Feature("wod")
f.entity(WodThing)
f.event(Go)
go = f.write_handler(
    "go",
    f.pipeline(Go)
    .create("thing", WodThing, data=lambda c: WodThing(key=c.payload.key))
    .append_event(WodThing, id=lambda c: c.steps["thing"].id, event=lambda c: Go(c.payload.key))
    .return_(lambda c: ok(None)),
)
waiter = f.workflow(
    "waiter",
    trigger=manual(Start),
    pipeline=f.workflow_pipeline(Start)
    .wait_for_event("go", Go, key=lambda c: "k", event_key=lambda e: e.key, timeout=timedelta(minutes=1))
    .compute("held", _hold)
    .compute("bumped", _bump),
)
bumper = f.workflow("bumper", trigger=on_event(Go), pipeline=f.workflow_pipeline(Go).compute("bumped", _bump))


@pytest.fixture
def gate() -> Iterator[type[_Gate]]:
    _Gate.inside.clear()
    _Gate.go.clear()
    _Gate.armed = True
    yield _Gate
    _Gate.armed = False
    _Gate.go.set()


def test_a_feed_and_a_timeout_segment_on_one_row_do_not_deadlock_a_single_pass(
    fresh_postgres_url: str, gate: type[_Gate]
) -> None:
    clock = FakeClock(T0)
    app = App([f], database_url=fresh_postgres_url, clock=clock)
    try:
        app.create_all()
        side.create_all(app.engine)
        with app.engine.begin() as conn:
            conn.execute(sa.insert(shared).values(id=1, n=0))
        run_id = app.start_workflow(waiter, Start(1), user=ADA)
        app.run_worker(once=True)  # the feed's cursors made
        app.run_worker(once=True)  # the run's wait armed
        assert app.dispatch(go, Go("k"), user=ADA) == Ok(None)
        # The wait is due: a worker resumes the run, and it looks for an answer before it
        # takes the timeout: the event, which occurred in time (the feed reads it too).
        clock.advance(minutes=2)

        results: dict[str, object] = {}

        def worker(name: str) -> None:
            try:
                results[name] = app.run_worker(once=True)
            except Exception as exc:
                results[name] = exc

        # The timeout worker must leave the event's feed to the other: hold the feed's cursor.
        holder = app.engine.connect()
        holder.begin()
        holder.execute(sa.text("SELECT 1 FROM kumiko_consumers WHERE name = 'workflow-events' FOR UPDATE"))
        timeout_worker = threading.Thread(target=worker, args=("timeout",))
        timeout_worker.start()
        assert gate.inside.wait(60), results
        holder.rollback()
        holder.close()
        feed_worker = threading.Thread(target=worker, args=("feed",))
        feed_worker.start()
        waited = False
        for _ in range(2000):  # the feed waits for the run's lock
            with app.engine.connect() as conn:
                waited = lock_waiters(conn) > 0
            if waited or not feed_worker.is_alive():
                break
            threading.Event().wait(0.01)
        gate.go.set()  # the timeout segment updates the row the event's started run updated
        timeout_worker.join(30)
        feed_worker.join(30)
        assert not isinstance(results["feed"], Exception), results["feed"]
        assert not isinstance(results["timeout"], Exception), results["timeout"]
        assert waited  # for the run, once the feed had committed the started run's update
        run = app.get_run(run_id)
        assert run is not None and run.status == "completed" and run.steps["go"] == Go("k")  # once, in time
        assert len(app.runs(bumper)) == 1
        with app.engine.connect() as conn:
            assert conn.scalar(sa.select(shared.c.n)) == 2  # each segment once
    finally:
        app.dispose()
