"""``kumiko-typed worker`` stops on a real SIGTERM wherever its main thread was: inside the
connection pool (its first connection, under the pool's first-connect lock, or any
checkout of the loop), or while deliveries are held by their receiver.  The CLI's handler
only asks the worker to stop (a flag and a byte on a socket); a handler that took a pool
connection to NOTIFY the sides waited for the lock its own thread held, for ever.

Each worker is a real process on a real database (SQLite file and PostgreSQL); the
signal comes from the process itself (``tests/_signal_app.py``, in the main thread, from
a pool event) or from this test."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from _receiver import Receiver
from _signal_app import feature, hook
from _support import Hook

from kumiko_typed import App, User

TESTS = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "kumiko-typed"
#: Generous: only a worker that does not stop (a deadlock) exceeds it.
BOUND = 30.0


def _worker(url: str, tmp_path: Path, signal_at: str = "") -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUMIKO_DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH", "")) if p)
    env["TMPDIR"] = str(tmp_path)
    env["KUMIKO_TEST_SIGNAL"] = signal_at
    return subprocess.Popen(
        [str(CLI), "worker", "_signal_app:make_app", "--database-url", url, "--poll-interval", "0.05"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ended(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """The worker's output once it exited 0 within ``BOUND`` of now."""
    try:
        out, err = proc.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the worker did not stop within {BOUND} s of SIGTERM\n{out}\n{err}") from None
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    assert "SIGTERM: stopping after this pass" in err and "Traceback" not in err, err
    return out, err


def _counts(out: str) -> dict[str, int]:
    (last,) = [line for line in out.splitlines() if line.startswith("started=")]
    return {key: int(value) for key, value in (pair.split("=") for pair in last.split())}


def _queue(app: App, url: str, rows: int) -> None:
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    for _ in range(rows):
        app.dispatch(hook, Hook(url), user=user)


@pytest.fixture
def app(db_url: str) -> Iterator[App]:
    made = App([feature], database_url=db_url)
    made.create_all()
    yield made
    made.dispose()


def test_sigterm_during_the_pools_first_connect_stops_the_worker(app: App, db_url: str, tmp_path: Path) -> None:
    proc = _worker(db_url, tmp_path, signal_at="first-connect")
    out, _ = _ended(proc)
    assert "sending SIGTERM in MainThread" in out, out
    assert _counts(out) == {"started": 0, "resumed": 0, "sent": 0, "retried": 0, "dead": 0}


def test_sigterm_during_a_checkout_of_the_loop_stops_the_worker(
    app: App, db_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    _queue(app, receiver.url(), 3)
    proc = _worker(db_url, tmp_path, signal_at="checkout:40")  # a few idle passes in
    out, _ = _ended(proc)
    assert "sending SIGTERM in MainThread" in out, out
    sent = [item for item in app.outbox() if item.status == "sent"]
    assert _counts(out)["sent"] == len(sent) == len(receiver.requests)
    now = datetime.now(UTC)
    for item in app.outbox():  # not sent: due, not left under a claim's lease
        assert item.status == "sent" or (item.next_attempt_at is not None and item.next_attempt_at <= now), item


def test_sigterm_while_deliveries_are_held_lets_them_finish_and_hands_the_rest_back(
    app: App, db_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    entered: list[int] = []
    release = threading.Event()

    def hold(index: int, _path: str) -> tuple[int, dict[str, str]]:
        entered.append(index)
        release.wait(BOUND)
        return 200, {}

    receiver.respond = hold
    _queue(app, receiver.url(), 10)
    proc = _worker(db_url, tmp_path)
    try:
        deadline = time.monotonic() + BOUND
        while len(entered) < 4:  # the App's default: 4 deliveries in flight
            assert proc.poll() is None, f"the worker exited early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the deliveries did not start"
            time.sleep(0.02)
        proc.terminate()  # SIGTERM
        time.sleep(0.3)  # the handler has run; the deliveries are still held
        assert proc.poll() is None, "the worker ended before its deliveries in flight"
    finally:
        release.set()
    out, _ = _ended(proc)
    statuses = sorted(item.status for item in app.outbox())
    assert statuses == ["pending"] * 6 + ["sent"] * 4, statuses
    assert _counts(out)["sent"] == 4 and len(receiver.requests) == 4
    now = datetime.now(UTC)
    for item in app.outbox():  # handed back: due at once, for the next worker
        assert item.status == "sent" or (item.next_attempt_at is not None and item.next_attempt_at <= now), item
