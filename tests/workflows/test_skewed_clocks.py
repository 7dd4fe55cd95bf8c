"""Workers on machines whose clocks differ, against one PostgreSQL database, with the
App's default clock (docs/operations.md, "Clocks").  A machine's clock is set wrong by
making the App on it while the system time it reads (``_app._utc_now``) is shifted.

Before, each App compared the times other machines wrote (a lease, a wake time, a cron
cursor) with its own machine's clock: a worker six minutes fast took a row another was
still delivering and sent it again, and woke a run early; one six minutes slow wrote
leases that had already run out for everyone else.  Now every App with the default clock
reads the server's time.  SQLite has no such case: its file, and every process using
it, is on one machine."""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import Hook, hook_feature, run_info

from kumiko_typed import App, CronTick, Feature, User, cron, manual, ok
from kumiko_typed import _app as app_module
from kumiko_typed import _server_clock as server_clock

SIX_MINUTES = timedelta(minutes=6)  # more than the outbox's five-minute lease
Machine = Callable[..., App]

skewed, hook = hook_feature("skew")


@attrs.frozen
class Go:
    n: int


flow = skewed.workflow(
    "flow",
    trigger=manual(Go),
    pipeline=skewed.workflow_pipeline(Go).wait(timedelta(minutes=3)).compute("done", lambda c: 1),
)


@pytest.fixture
def machine(fresh_postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Machine]:
    """``machine(skew, features)``: an App with the default clock on a machine whose
    system clock is ``skew`` off, on the test's database (tables created)."""
    apps: list[App] = []

    def make(skew: timedelta, features: Sequence[Feature[Any]] = (skewed,)) -> App:
        with monkeypatch.context() as patch:
            patch.setattr(app_module, "_utc_now", lambda: datetime.now(UTC) + skew)
            app = App(features, database_url=fresh_postgres_url)
        apps.append(app)
        app.create_all()
        return app

    yield make
    for app in apps:
        app.dispose()


@pytest.mark.parametrize(
    ("claimer", "other"),
    [(timedelta(0), SIX_MINUTES), (-SIX_MINUTES, timedelta(0))],
    ids=["other-machine-fast", "claiming-machine-slow"],
)
def test_a_row_under_delivery_is_not_taken_by_a_worker_whose_machine_clock_differs(
    machine: Machine, receiver: Receiver, user: User, claimer: timedelta, other: timedelta
) -> None:
    first, second = machine(claimer), machine(other)
    entered, release = threading.Event(), threading.Event()

    def respond(index: int, _path: str) -> tuple[int, dict[str, str]]:
        if index == 0:  # the first worker's delivery is under way until the test says
            entered.set()
            release.wait(60)
        return 200, {}

    receiver.respond = respond
    assert first.dispatch(hook, Hook(receiver.url()), user=user) == ok(None)
    counts: dict[str, int] = {}
    delivering = threading.Thread(target=lambda: counts.update(first.run_worker(once=True)))
    delivering.start()
    try:
        assert entered.wait(60), "the first worker never reached the receiver"
        assert second.run_worker(once=True)["sent"] == 0  # before: 1, the same row again
    finally:
        release.set()
        delivering.join(30)
    assert counts["sent"] == 1
    assert len(receiver.requests) == 1
    assert [item.status for item in second.outbox()] == ["sent"]


def test_a_wait_is_not_resumed_early_by_a_worker_whose_machine_clock_is_fast(
    machine: Machine, caplog: pytest.LogCaptureFixture
) -> None:
    web, fast = machine(timedelta(0)), machine(SIX_MINUTES)
    run_id = web.start_workflow(flow, Go(1), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4()))
    with caplog.at_level(logging.WARNING, "kumiko_typed"):
        assert fast.run_worker(once=True)["resumed"] == 0  # before: resumed 3 minutes early
    assert run_info(fast, run_id).status == "suspended"
    (record,) = [r for r in caplog.records if "clock" in r.getMessage()]
    # The reading is off by up to half its round trip, which a loaded machine makes long:
    # about six minutes, not to the tenth of a second the message prints.
    told = re.match(r"this machine's clock is (\d+\.\d) s ahead of the database server's", record.getMessage())
    assert told is not None, record.getMessage()
    assert abs(float(told[1]) - 360) < 5
    assert abs(record.kumiko_clock_ahead - 360) < 5  # type: ignore[attr-defined]


def test_a_wait_a_slow_machine_schedules_is_not_due_early(machine: Machine) -> None:
    """The run is started on a machine six minutes slow that runs no worker: its wait
    ended, for everyone else, three minutes before it began."""
    slow, worker = machine(-SIX_MINUTES), machine(timedelta(0))
    run_id = slow.start_workflow(flow, Go(1), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4()))
    assert run_info(worker, run_id).wake_at > datetime.now(UTC) + timedelta(minutes=2)
    assert worker.run_worker(once=True)["resumed"] == 0


hourly = Feature("skew_cron")
hourly.workflow(
    "hourly",
    trigger=cron("0 * * * *"),
    pipeline=hourly.workflow_pipeline(CronTick).compute("at", lambda c: c.payload.scheduled_at),
)


def _clear_of_the_next_hour() -> None:
    """The passes below run on the real clock: the next hour's tick, once it came between
    them, would be due for every machine (a run at hh:59:59.9 failed).  Within a minute
    of it, wait until it has passed: the passes then have most of an hour."""
    now = datetime.now(UTC)
    left = 3600 - (now.minute * 60 + now.second + now.microsecond / 1e6)
    if left < 60:
        time.sleep(left + 1)


def test_a_cron_tick_is_not_fired_early_by_a_worker_whose_machine_clock_is_fast(machine: Machine) -> None:
    """A machine an hour fast (a local time read as UTC, say): its first pass fired the
    next hour's tick at once, an hour early, and its cursor held that tick back from the
    others."""
    right, fast = machine(timedelta(0), [hourly]), machine(timedelta(hours=1), [hourly])
    _clear_of_the_next_hour()
    right.run_worker(once=True)  # starts the schedule now
    assert fast.run_worker(once=True)["started"] == 0
    assert right.runs() == []


def test_a_machine_clock_stepped_after_a_reading_is_corrected_at_the_next_pass(
    fresh_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NTP steps this machine's clock an hour back between two passes (within
    ``READ_EVERY`` of the reading): the next pass reads the server's time again at once.
    Before, the worker wrote leases that had run out an hour ago for everyone else."""
    step = [timedelta(0)]
    monkeypatch.setattr(app_module, "_utc_now", lambda: datetime.now(UTC) + step[0])
    app = App([skewed], database_url=fresh_postgres_url)
    try:
        app.create_all()
        app.run_worker(once=True)  # reads the server's time
        step[0] = -timedelta(hours=1)
        app.run_worker(once=True)
        assert abs(app.clock() - datetime.now(UTC)) < timedelta(seconds=30)  # not the hour stepped
    finally:
        app.dispose()


def test_a_reading_on_a_pooled_connection_that_died_is_made_again(
    fresh_postgres_url: str, monkeypatch: pytest.MonkeyPatch, user: User
) -> None:
    """Every backend is terminated (a server restart) before each call, and each call
    reads the server's clock first (``READ_EVERY`` 0): the reading is made again on a new
    connection, as the call's own transaction is, instead of failing the call."""
    monkeypatch.setattr(server_clock, "READ_EVERY", 0.0)
    admin = sa.create_engine(fresh_postgres_url, poolclass=sa.pool.NullPool)

    def terminate_all() -> None:
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )

    app = App([skewed], database_url=fresh_postgres_url)
    try:
        app.create_all()
        assert app.dispatch(hook, Hook("http://127.0.0.1:9/"), user=user) == ok(None)
        terminate_all()
        assert app.dispatch(hook, Hook("http://127.0.0.1:9/"), user=user) == ok(None)
        terminate_all()
        run_id = app.start_workflow(flow, Go(1), user=user)
        terminate_all()
        app.run_worker(once=True)
        assert run_info(app, run_id).status == "suspended"
    finally:
        app.dispose()
        admin.dispose()
