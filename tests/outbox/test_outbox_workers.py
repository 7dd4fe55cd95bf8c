"""Many outbox workers on one database (DESIGN §7), as worker PROCESSES
(``tests/_outbox_worker.py``, each building its own App on the test's database) and a real
loopback receiver in this process.

On PostgreSQL four workers share the table (each claim taken with ``FOR UPDATE SKIP
LOCKED`` and leased) and deliver every row exactly once; a worker killed with SIGKILL
mid-drain loses nothing: its claim comes back when the lease runs out, and whatever it had
delivered but not yet recorded is delivered again with the SAME idempotency key.  On
SQLite (where one worker is the design) a second worker still never delivers a row the
first one claimed.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from _outbox_worker import LoopbackReceiver, WorkerProcesses, enqueue, feature

from kumiko_typed import App
from kumiko_typed._outbox import CLAIM_LEASE, claim_size
from kumiko_typed.testing import FakeClock

pytestmark = pytest.mark.slow

ROWS = 2000
WORKERS = 4
KILL_AFTER = 300  # requests the receiver has seen when one worker is killed


@pytest.fixture
def app(fresh_postgres_url: str) -> Iterator[App]:
    app = App([feature], database_url=fresh_postgres_url)
    app.create_all()
    yield app
    app.dispose()


@pytest.fixture
def workers() -> Iterator[WorkerProcesses]:
    with WorkerProcesses() as started:
        yield started


def _enqueue_all(app: App, receiver: LoopbackReceiver, rows: int = ROWS) -> set[str]:
    enqueue(app, receiver.url, rows)
    items = app.outbox()
    assert len(items) == rows and {i.status for i in items} == {"pending"}
    return {str(i.id) for i in items}


def _assert_all_sent_once_each(app: App, rows: int = ROWS) -> None:
    items = app.outbox()
    assert len(items) == rows
    assert Counter((i.status, i.attempts, i.last_error) for i in items) == {("sent", 1, None): rows}


@pytest.mark.postgres
def test_four_worker_processes_deliver_every_row_exactly_once(
    app: App, fresh_postgres_url: str, workers: WorkerProcesses
) -> None:
    with LoopbackReceiver() as receiver:
        ids = _enqueue_all(app, receiver)
        procs = workers.start(fresh_postgres_url, WORKERS)
        workers.go()
        delivered = workers.finish(procs)

        _assert_all_sent_once_each(app)
        keys = Counter(receiver.keys)
        assert set(keys) == ids
        assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1][:5]
        assert sorted(receiver.numbers) == list(range(ROWS))
        assert sum(delivered) == ROWS
        assert sum(1 for n in delivered if n > 0) >= 2, delivered  # the work was shared


@pytest.mark.postgres
def test_a_worker_killed_mid_drain_loses_nothing_and_repeats_only_with_the_same_key(
    app: App, fresh_postgres_url: str, workers: WorkerProcesses
) -> None:
    with LoopbackReceiver() as receiver:
        ids = _enqueue_all(app, receiver)
        procs = workers.start(fresh_postgres_url, WORKERS)
        victim, survivors = procs[0], procs[1:]
        workers.go()
        deadline = time.monotonic() + 120  # generous: a loaded CI machine is slow, not wrong
        while receiver.count < KILL_AFTER:
            assert time.monotonic() < deadline, f"only {receiver.count} requests seen"
            time.sleep(0.002)
        os.kill(victim.pid, signal.SIGKILL)
        out, _ = victim.communicate(timeout=30)
        assert victim.returncode == -signal.SIGKILL
        assert "done" not in out  # it was killed while rows were still pending
        assert receiver.count < ROWS

        workers.finish(survivors)  # they stop when nothing is due: the victim's claim is leased

        claimed = [i for i in app.outbox() if i.status == "pending"]
        assert len(claimed) <= claim_size(4)  # the App's default delivery_concurrency
        clock = FakeClock(datetime.now(UTC))
        later = App([feature], database_url=fresh_postgres_url, clock=clock)
        try:
            assert later.run_worker(once=True)["sent"] == 0  # still leased
            clock.advance(CLAIM_LEASE)
            assert later.run_worker(once=True)["sent"] == len(claimed)
        finally:
            later.dispose()

        _assert_all_sent_once_each(app)  # the killed worker's claim is redone from attempt 0
        keys = Counter(receiver.keys)
        assert set(keys) == ids  # nothing lost, and no request without one of the outbox ids
        assert set(receiver.numbers) == set(range(ROWS))
        # Only what the victim had delivered in its claim but not recorded can come twice.
        duplicates = sum(n - 1 for n in keys.values())
        assert duplicates <= claim_size(4), duplicates  # the App's default delivery_concurrency
        assert len(receiver.keys) == ROWS + duplicates


def test_two_workers_on_sqlite_never_deliver_a_row_twice(tmp_path: Path, workers: WorkerProcesses) -> None:
    """A SQLite worker delivers outside the database lock; its claim (the batch's next
    attempt moved a lease ahead) keeps the other worker off those rows meanwhile."""
    rows = 300
    url = f"sqlite:///{tmp_path / 'outbox.sqlite3'}"
    app = App([feature], database_url=url)
    app.create_all()
    try:
        with LoopbackReceiver() as receiver:
            ids = _enqueue_all(app, receiver, rows)
            procs = workers.start(url, 2)
            workers.go()
            delivered = workers.finish(procs)

            _assert_all_sent_once_each(app, rows)
            keys = Counter(receiver.keys)
            assert set(keys) == ids
            assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1][:5]
            assert sum(delivered) == rows
    finally:
        app.dispose()


def test_a_sqlite_worker_that_dies_mid_batch_leaves_it_to_the_next_after_the_lease(tmp_path: Path) -> None:
    """The claim is committed before the first delivery: rows of a worker that died are
    skipped until the lease runs out, then delivered again — the ones it had delivered but
    not recorded (its clock stood still: the rows sent wait for the end of the batch) with
    the SAME idempotency key."""
    now = [datetime(2026, 3, 2, 9, 0, tzinfo=UTC)]
    url = f"sqlite:///{tmp_path / 'outbox.sqlite3'}"
    responses = [0]

    def die_on_the_third(response: httpx.Response) -> None:
        responses[0] += 1
        if responses[0] == 3:
            raise SystemExit("the worker process dies here")  # not an Exception: nothing records it

    client = httpx.Client(event_hooks={"response": [die_on_the_third]})
    dying = App(
        [feature],
        database_url=url,
        clock=lambda: now[0],
        http=client,
        delivery_concurrency=1,  # one delivery at a time: it dies after exactly the third
    )
    survivor = App([feature], database_url=url, clock=lambda: now[0])
    dying.create_all()
    try:
        with LoopbackReceiver() as receiver:
            ids = _enqueue_all(dying, receiver, 25)
            with pytest.raises(SystemExit):
                dying.run_worker(once=True)
            assert receiver.count == 3
            assert Counter(i.status for i in survivor.outbox()) == {"pending": 25}

            assert survivor.run_worker(once=True)["sent"] == 15  # the other batches; the dead one's 10 are leased
            now[0] += CLAIM_LEASE - timedelta(seconds=1)
            assert survivor.run_worker(once=True)["sent"] == 0
            now[0] += timedelta(seconds=1)
            assert survivor.run_worker(once=True)["sent"] == 10

            _assert_all_sent_once_each(survivor, 25)
            keys = Counter(receiver.keys)
            assert set(keys) == ids
            assert sorted(keys.values()) == [1] * 22 + [2] * 3  # delivered, then the worker died
    finally:
        dying.dispose()
        survivor.dispose()
        client.close()
