"""Many outbox workers on one PostgreSQL (DESIGN §7): four worker PROCESSES share the
table through ``FOR UPDATE SKIP LOCKED`` and deliver every row exactly once to a real
loopback receiver; a worker killed with SIGKILL mid-drain loses nothing, and whatever it
had delivered but not yet recorded is delivered again with the SAME idempotency key.

The workers are ``tests/_outbox_worker.py`` processes, each building its own App on the
test's database; the receiver is a threaded HTTP server in this process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _outbox_worker import LoopbackReceiver, enqueue, feature

from kumiko_typed import App
from kumiko_typed._outbox import BATCH

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

HELPER = Path(__file__).with_name("_outbox_worker.py")
ROWS = 2000
WORKERS = 4
KILL_AFTER = 300  # requests the receiver has seen when one worker is killed


@pytest.fixture
def app(fresh_postgres_url: str) -> Iterator[App]:
    app = App([feature], database_url=fresh_postgres_url)
    app.create_all()
    yield app
    app.dispose()


Start = Callable[[str, int], list[subprocess.Popen[str]]]


@pytest.fixture
def start_workers() -> Iterator[Start]:
    """``start_workers(url, count)``: worker processes, each connected and waiting for ``go``.
    Any still running at the end of the test is killed."""
    started: list[subprocess.Popen[str]] = []

    def start(url: str, count: int) -> list[subprocess.Popen[str]]:
        procs = [
            subprocess.Popen(
                [sys.executable, str(HELPER), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            for _ in range(count)
        ]
        started.extend(procs)
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", f"worker {proc.pid} did not start (exit {proc.poll()})"
        return procs

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _go(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def _finish(procs: list[subprocess.Popen[str]], timeout: float = 180) -> list[int]:
    """Wait for the workers to drain; the rows each one delivered."""
    delivered: list[int] = []
    for proc in procs:
        out, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"worker {proc.pid} exited {proc.returncode}"
        (last,) = [line for line in out.splitlines() if line.startswith("done ")]
        delivered.append(int(last.split()[1]))
    return delivered


def _enqueue_all(app: App, receiver: LoopbackReceiver) -> set[str]:
    enqueue(app, receiver.url, ROWS)
    items = app.outbox()
    assert len(items) == ROWS and {i.status for i in items} == {"pending"}
    return {str(i.id) for i in items}


def _assert_all_sent_once_each(app: App) -> None:
    items = app.outbox()
    assert len(items) == ROWS
    assert Counter((i.status, i.attempts, i.last_error) for i in items) == {("sent", 1, None): ROWS}


def test_four_worker_processes_deliver_every_row_exactly_once(
    app: App, fresh_postgres_url: str, start_workers: Start
) -> None:
    with LoopbackReceiver() as receiver:
        ids = _enqueue_all(app, receiver)
        procs = start_workers(fresh_postgres_url, WORKERS)
        _go(procs)
        delivered = _finish(procs)

        _assert_all_sent_once_each(app)
        keys = Counter(receiver.keys)
        assert set(keys) == ids
        assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1][:5]
        assert sorted(receiver.numbers) == list(range(ROWS))
        assert sum(delivered) == ROWS
        assert sum(1 for n in delivered if n > 0) >= 2, delivered  # the work was shared


def test_a_worker_killed_mid_drain_loses_nothing_and_repeats_only_with_the_same_key(
    app: App, fresh_postgres_url: str, start_workers: Start
) -> None:
    with LoopbackReceiver() as receiver:
        ids = _enqueue_all(app, receiver)
        procs = start_workers(fresh_postgres_url, WORKERS)
        victim, survivors = procs[0], procs[1:]
        _go(procs)
        deadline = time.monotonic() + 120  # generous: a loaded CI machine is slow, not wrong
        while receiver.count < KILL_AFTER:
            assert time.monotonic() < deadline, f"only {receiver.count} requests seen"
            time.sleep(0.002)
        os.kill(victim.pid, signal.SIGKILL)
        out, _ = victim.communicate(timeout=30)
        assert victim.returncode == -signal.SIGKILL
        assert "done" not in out  # it was killed while rows were still pending
        assert receiver.count < ROWS

        _finish(survivors)

        _assert_all_sent_once_each(app)  # the killed worker's claim rolled back: redone from attempt 0
        keys = Counter(receiver.keys)
        assert set(keys) == ids  # nothing lost, and no request without one of the outbox ids
        assert set(receiver.numbers) == set(range(ROWS))
        # Only what the victim had delivered in its open (uncommitted) batch can come twice.
        duplicates = sum(n - 1 for n in keys.values())
        assert duplicates <= BATCH, duplicates
        assert len(receiver.keys) == ROWS + duplicates
