"""Races between worker PROCESSES on one PostgreSQL database (DESIGN §8), each made
deterministic: a step of the App (tests/_wfrace_app.py) takes an advisory lock the test
holds, so a process stays inside its segment, its work uncommitted, while another process
acts; the test sees each waiter in pg_locks before it lets go, never sleeping."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from _wfrace_app import (
    AFTERS,
    BOOT,
    GATE,
    SENDS,
    STARTS,
    USERS,
    Job,
    Ping,
    Resumed,
    after,
    chain,
    keyed,
    make_app,
    side,
    twice,
)

from kumiko_typed._tables import consumers, events, outbox, workflow_runs
from kumiko_typed._workflow_feed import EVENT_CURSOR

pytestmark = pytest.mark.postgres

TESTS = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=1)  # the runs' timers are due


class _Setup:
    def __init__(self, url: str, maildir: Path) -> None:
        self.url, self.maildir = url, maildir
        self.app = make_app(url, str(maildir), T0)
        self.app.create_all()
        side.create_all(self.app.engine)

    def process(self, now: datetime, *args: object) -> subprocess.Popen[str]:
        """A process of the App at ``now`` doing ``args`` (tests/_wfrace_app.py)."""
        command = [sys.executable, "-c", BOOT, self.url, str(self.maildir), now.isoformat(), *map(str, args)]
        env = {**os.environ, "PYTHONPATH": str(TESTS)}
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def count(self, stmt: Any) -> int:
        with self.app.engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def until_waiting(self, advisory: int, other: int = 0, *, of: tuple[subprocess.Popen[str], ...] = ()) -> None:
        """Until ``advisory`` connections wait for a gate and ``other`` for another lock (a
        row a segment holds); the processes ``of`` must still be running meanwhile."""
        query = sa.text(
            "SELECT count(*) FILTER (WHERE wait_event = 'advisory'),"
            " count(*) FILTER (WHERE wait_event <> 'advisory')"
            " FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        deadline = time.monotonic() + 60
        with self.app.engine.connect() as conn:
            # A transaction sees pg_stat_activity as at its first read: one per look.
            while (seen := tuple(conn.execute(query).one())) != (advisory, other):
                conn.rollback()
                assert time.monotonic() < deadline, f"never {advisory} at a gate and {other} at a row lock: {seen}"
                for proc in of:
                    assert proc.poll() is None, answer(proc)
                time.sleep(0.02)

    def until_idle(self) -> None:
        """Until no other connection to the database is in a transaction: a killed
        process's backend has noticed and rolled back."""
        query = sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND state <> 'idle'"
        )
        deadline = time.monotonic() + 60
        with self.app.engine.connect() as conn:
            while conn.execute(query).scalar_one():
                conn.rollback()
                assert time.monotonic() < deadline, "a dead process's transaction never ended"
                time.sleep(0.02)

    @contextlib.contextmanager
    def holding(self, *gates: int) -> Iterator[Callable[[int], None]]:
        """Hold the gates ``(GATE, n)``; yields ``release(n)`` to let one go early."""
        conn = self.app.engine.connect()
        held = set(gates)

        def release(n: int) -> None:
            conn.execute(sa.text("SELECT pg_advisory_unlock(:g, :n)"), {"g": GATE, "n": n})
            held.discard(n)

        try:
            for n in gates:
                conn.execute(sa.text("SELECT pg_advisory_lock(:g, :n)"), {"g": GATE, "n": n})
            yield release
        finally:
            for n in list(held):
                release(n)
            conn.close()


def answer(proc: subprocess.Popen[str]) -> Any:
    """The JSON line a process printed (the test fails showing its stderr otherwise)."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def setup(fresh_postgres_url: str, tmp_path: Path) -> Iterator[_Setup]:
    s = _Setup(fresh_postgres_url, tmp_path / "mail")
    yield s
    s.app.dispose()


def _events(setup: _Setup, cls: type[Any]) -> int:
    return setup.count(sa.select(sa.func.count()).select_from(events).where(events.c.type == cls.__name__.lower()))


def test_a_due_run_a_worker_process_holds_is_left_to_it_and_its_append_and_mail_happen_once(setup: _Setup) -> None:
    run_id = setup.app.start_workflow(chain, Job(1), user=USERS["a"])
    with setup.holding(1):
        first = setup.process(T1, "worker")
        setup.until_waiting(1, of=(first,))  # inside the segment: appended, mail enqueued, at the wait
        second = answer(setup.process(T1, "worker"))  # goes on past the locked run
        assert second["resumed"] == 0
    assert answer(first)["resumed"] == 1
    assert answer(setup.process(T1 + timedelta(hours=2), "worker"))["resumed"] == 1  # its timeout
    run = setup.app.get_run(run_id)
    assert run is not None and run.status == "completed" and run.steps["got"] is None
    assert _events(setup, Resumed) == 1
    assert setup.count(sa.select(sa.func.count()).select_from(outbox)) == 1
    assert [i.status for i in setup.app.outbox(status=None)] == ["sent"]
    assert len(list(setup.maildir.glob("*.eml"))) == 1  # delivered once
    assert setup.count(sa.select(sa.func.count()).select_from(after)) == 1


def test_a_cancel_from_another_process_behind_a_resumed_segment_cancels_the_run_it_left_waiting(
    setup: _Setup,
) -> None:
    run_id = setup.app.start_workflow(chain, Job(2), user=USERS["a"])
    with setup.holding(2) as release:
        worker = setup.process(T1, "worker")
        setup.until_waiting(1)
        cancel = setup.process(T1, "cancel", run_id)
        setup.until_waiting(1, 1)  # the cancel waits for the run the segment holds
        release(2)
        assert answer(worker)["resumed"] == 1
        assert answer(cancel) == {"ok": "cancelled"}
    assert answer(setup.process(T1, "send", 2, "late", "a")) == {"ok": None}
    assert answer(setup.process(T1 + timedelta(hours=2), "worker"))["resumed"] == 0
    run = setup.app.get_run(run_id)
    assert run is not None and run.status == "cancelled" and run.path == "got"
    assert setup.count(sa.select(sa.func.count()).select_from(after)) == 0  # no step after the cancel
    assert _events(setup, Resumed) == 1  # the segment before it committed whole


@pytest.mark.parametrize("began", ["before", "after"])
def test_an_event_committed_while_another_process_writes_the_wait_wakes_it_once_and_no_other_tenants_or_keys(
    setup: _Setup, began: str
) -> None:
    """The events commit while the run's segment is held after noting its view.  Their
    transactions began ``before`` the segment's: a third process's feed passes them before
    the wait row exists, and arming the wait must look back for them; or ``after`` it:
    no feed reads them before the segment ends."""
    run_id = setup.app.start_workflow(chain, Job(3), user=USERS["a"])
    with setup.holding(3, SENDS) as release:
        worker = None
        if began == "after":
            worker = setup.process(T1, "worker")
            setup.until_waiting(1, of=(worker,))  # the segment noted its view
        senders = [
            setup.process(T1, "send", 3, "theirs", "b"),
            setup.process(T1, "send", 33, "other key", "a"),
            setup.process(T1, "send", 3, "mine", "a"),
        ]
        if worker is None:
            setup.until_waiting(3, of=tuple(senders))  # each has written, none has appended
            worker = setup.process(T1, "worker")
        setup.until_waiting(4, of=(worker, *senders))  # the three events are after the view
        release(SENDS)
        assert [answer(s) for s in senders] == [{"ok": None}] * 3
        passing = answer(setup.process(T1, "worker"))  # its feed reads what it may
        assert passing["resumed"] == 0
        pings = sa.select(events.c.position).where(events.c.type == "ping")
        cursor = sa.select(consumers.c.position).where(consumers.c.name == EVENT_CURSOR)
        with setup.app.engine.connect() as conn:
            read = {p: p <= conn.execute(cursor).scalar_one() for p in conn.scalars(pings)}
        assert list(read.values()) == [began == "before"] * 3  # passed by before the wait exists
    assert answer(worker)["resumed"] == 1
    woke = answer(setup.process(T1, "worker"))
    assert woke["resumed"] == 1
    run = setup.app.get_run(run_id)
    assert run is not None and run.status == "completed" and run.steps["got"] == Ping(3, "mine")
    assert answer(setup.process(T1 + timedelta(hours=2), "worker"))["resumed"] == 0
    assert setup.count(sa.select(sa.func.count()).select_from(after)) == 1


def test_a_keyed_start_behind_one_whose_process_died_mid_segment_is_the_one_run_of_its_key(setup: _Setup) -> None:
    with setup.holding(5 + STARTS) as release:
        doomed = setup.process(T0, "start", 5, "order-5")
        setup.until_waiting(1)  # its claim of the key is written, not committed
        second = setup.process(T0, "start", 5, "order-5")
        setup.until_waiting(1, 1)  # waits for the first claim
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(30)
        release(5 + STARTS)  # the dead process's backend finds its client gone, rolls back
        run_id = uuid.UUID(answer(second))
    runs = setup.app.runs(keyed)
    assert [(r.run_id, r.status, r.steps["first"]) for r in runs] == [(run_id, "suspended", "first")]
    rows = sa.select(sa.func.count()).select_from(workflow_runs).where(workflow_runs.c.workflow == "wfrace:keyed")
    assert setup.count(rows) == 1


@pytest.mark.parametrize("timer", ["commits", "dies"])
def test_an_event_read_while_another_process_takes_the_timeout_waits_for_it_and_one_of_them_wins(
    setup: _Setup, timer: str
) -> None:
    """The event occurred before the deadline but commits only after a worker took the
    timeout: another worker's feed reads it while that segment holds the run, and waits.
    If the timeout commits, it won (the event is no answer); if its process dies, the
    event wakes the run.  Either way the step after the wait runs once."""
    run_id = setup.app.start_workflow(chain, Job(6), user=USERS["a"])
    assert answer(setup.process(T1, "worker"))["resumed"] == 1  # at the event wait
    deadline = T1 + timedelta(hours=1)
    with setup.holding(SENDS, 6 + AFTERS) as release:
        sender = setup.process(deadline - timedelta(minutes=1), "send", 6, "answer", "a")
        setup.until_waiting(1, of=(sender,))  # written, not appended: its feed reads nothing
        timeout = setup.process(deadline, "worker")
        setup.until_waiting(2, of=(sender, timeout))  # the timeout taken, not committed
        release(SENDS)
        assert answer(sender) == {"ok": None}
        feed = setup.process(deadline, "worker")
        setup.until_waiting(1, 1, of=(timeout, feed))  # the feed waits for the run
        if timer == "dies":
            timeout.send_signal(signal.SIGKILL)
            timeout.wait(30)
        release(6 + AFTERS)
        ends = [feed] if timer == "dies" else [timeout, feed]
        resumed = [answer(p)["resumed"] for p in ends]
    assert resumed == ([1] if timer == "dies" else [1, 0])
    assert answer(setup.process(deadline + timedelta(hours=1), "worker"))["resumed"] == 0
    run = setup.app.get_run(run_id)
    assert run is not None and run.status == "completed"
    assert run.steps["got"] == (Ping(6, "answer") if timer == "dies" else None)
    assert setup.app.result(chain, run_id, user=USERS["a"]).data == ("answer" if timer == "dies" else None)  # type: ignore[union-attr]
    assert setup.count(sa.select(sa.func.count()).select_from(after)) == 1


def test_a_feed_whose_process_dies_inside_a_woken_segment_leaves_the_event_to_the_next_feed(setup: _Setup) -> None:
    """A worker's feed wakes the run and is held in the segment the event resumed, the
    feed's cursor locked; another worker's pass goes on past both.  The first process
    dies: its transaction rolls back, cursor and all, and the next feed wakes the run once."""
    run_id = setup.app.start_workflow(chain, Job(7), user=USERS["a"])
    assert answer(setup.process(T1, "worker"))["resumed"] == 1  # at the event wait
    assert answer(setup.process(T1, "send", 7, "answer", "a")) == {"ok": None}
    with setup.holding(7 + AFTERS) as release:
        doomed = setup.process(T1, "worker")
        setup.until_waiting(1, of=(doomed,))  # woken, in the segment after the wait
        assert answer(setup.process(T1, "worker"))["resumed"] == 0  # neither waits for it
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(30)
        release(7 + AFTERS)
    setup.until_idle()
    assert answer(setup.process(T1, "worker"))["resumed"] == 1
    assert answer(setup.process(T1 + timedelta(hours=2), "worker"))["resumed"] == 0
    run = setup.app.get_run(run_id)
    assert run is not None and run.status == "completed" and run.steps["got"] == Ping(7, "answer")
    assert setup.count(sa.select(sa.func.count()).select_from(after)) == 1


def test_an_event_the_feed_read_while_a_timeout_moved_the_run_to_a_second_wait_wakes_that_wait(
    setup: _Setup,
) -> None:
    """The first wait's timeout is taken by one process and held after the second wait (same
    event, same key) noted its view; the event, begun before that segment, commits, and a
    second process's feed reads it and waits for the run.  The timeout commits: the event
    is no answer for the first wait (the run moved on), but the second wait's view did not
    include it, so it answers the second."""
    run_id = setup.app.start_workflow(twice, Job(8), user=USERS["a"])
    assert answer(setup.process(T1, "worker"))["resumed"] == 1  # at the first event wait
    deadline = T1 + timedelta(hours=1)
    with setup.holding(SENDS, 8) as release:
        sender = setup.process(deadline - timedelta(minutes=1), "send", 8, "answer", "a")
        setup.until_waiting(1, of=(sender,))
        timeout = setup.process(deadline, "worker")
        setup.until_waiting(2, of=(sender, timeout))  # at the second wait, its view noted
        release(SENDS)
        assert answer(sender) == {"ok": None}
        feed = setup.process(deadline, "worker")
        setup.until_waiting(1, 1, of=(timeout, feed))  # the feed waits for the run
        release(8)
        assert answer(timeout)["resumed"] == 1
        woke = answer(feed)["resumed"]  # past the wait it matched; its next read may arm the second
    woke += answer(setup.process(deadline, "worker"))["resumed"]
    assert woke == 1
    run = setup.app.get_run(run_id)
    assert run is not None and run.status == "completed", run
    assert run.steps["first"] is None and run.steps["second"] == Ping(8, "answer")
    assert setup.count(sa.select(sa.func.count()).select_from(after)) == 1


def test_an_answer_committed_before_the_deadline_wins_though_an_older_transaction_keeps_the_feed_from_it(
    setup: _Setup,
) -> None:
    """The answer occurred and committed a minute before the deadline, its handler told its
    caller ``Ok``; an unrelated transaction that began before it (a long report, another
    worker's batch) is still open when a worker comes after the deadline, so that worker's
    feed may not read the answer yet (commit-safe order).  Its due pass must not take the
    timeout over the answer: the answer occurred before the deadline, and wins."""
    run_id = setup.app.start_workflow(chain, Job(9), user=USERS["a"])
    assert answer(setup.process(T1, "worker"))["resumed"] == 1  # at the event wait
    deadline = T1 + timedelta(hours=1)
    with setup.app.engine.connect() as older:
        older.execute(sa.text("SELECT pg_current_xact_id()"))  # a transaction with an id, open
        assert answer(setup.process(deadline - timedelta(minutes=1), "send", 9, "answer", "a")) == {"ok": None}
        assert answer(setup.process(deadline + timedelta(minutes=1), "worker"))["resumed"] == 1
    assert answer(setup.process(deadline + timedelta(minutes=1), "worker"))["resumed"] == 0
    run = setup.app.get_run(run_id)
    assert run is not None and run.status == "completed"
    assert run.steps["got"] == Ping(9, "answer")
    assert setup.count(sa.select(sa.func.count()).select_from(after)) == 1
