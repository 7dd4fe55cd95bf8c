"""Durable workflows under several worker PROCESSES on one PostgreSQL database (DESIGN §8):
300 runs mixing real-clock timers, event waits and a retry whose first attempt fails,
driven by 3 workers (tests/_wf_fixture_app.py).  Every run completes exactly once and no
step's committed effect appears twice — also when one worker is SIGKILLed while its pass
holds an open transaction (the others redo what it had not committed)."""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

from _wf_fixture_app import (  # noqa: E402
    STEPS,
    USER,
    WORKER_BOOT,
    WORKFLOW,
    Job,
    Signal,
    create_tables,
    effects,
    go,
    job,
    make_app,
)

from kumiko_typed import App, Ok  # noqa: E402
from kumiko_typed._tables import workflow_runs  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
RUNS = 300
WORKERS = 3
WORKER_DEADLINE_S = 40.0


class Worker:
    """One worker process and the lines it printed (read on a thread)."""

    def __init__(self, url: str, extra: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER_BOOT, str(TESTS), url, str(RUNS), str(WORKER_DEADLINE_S), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=TESTS.parent,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        # Drained as it comes: a worker logs each failed attempt with its traceback, and
        # one whose stderr pipe filled (64 KiB) would block in its logging, mid-pass.
        self.errors: collections.deque[str] = collections.deque(maxlen=200)
        self.error_reader = threading.Thread(target=self._read_errors, daemon=True)
        self.error_reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.errors.append(line)

    def expect(self, prefix: str, timeout: float) -> str:
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"worker {self.proc.pid} printed no {prefix!r} line: {self._stderr()}") from None
            if line.startswith(prefix):
                return line

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def _stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        self.error_reader.join(30)
        return "".join(self.errors)[-2000:]

    def stats(self) -> dict[str, Any]:
        line = self.expect("done ", WORKER_DEADLINE_S + 20)
        assert self.proc.wait(60) == 0, self._stderr()
        return dict(json.loads(line[len("done ") :]))


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
        w.proc.wait(30)


def _jobs() -> list[Job]:
    kinds = ("timer", "event", "retry")
    return [Job(n, kinds[n % 3], delay=float(n % 2)) for n in range(RUNS)]


def _start(app: App, jobs: list[Job], workers: list[Worker]) -> dict[int, Any]:
    """Start the runs (each up to its first suspension), let the workers go, then append
    the events the event waits need while the workers run."""
    for w in workers:
        w.expect("ready", 30)
    run_ids = {j.n: app.start_workflow(job, j, user=USER) for j in jobs}
    for w in workers:
        w.go()
    for j in jobs:
        if j.kind == "event":
            assert app.dispatch(go, Signal(j.n), user=USER) == Ok(j.n)
    return run_ids


def _check(app: App, run_ids: dict[int, Any], jobs: list[Job]) -> None:
    runs = {r.run_id: r for r in app.runs(WORKFLOW)}
    assert len(runs) == RUNS
    not_done = [(r.steps.get("start"), r.status, r.path, r.error) for r in runs.values() if r.status != "completed"]
    assert not_done == []
    for j in jobs:
        info = runs[run_ids[j.n]]
        assert info.steps["done"] == "done"
        assert info.steps["first"].entity.step == "first" and info.steps["last"].entity.step == "last"
        if j.kind == "event":
            assert info.steps["go"] is not None and info.steps["go"].n == j.n
        # The path the segment that ran the retry body had started from: attempt 2 for a
        # "retry" job, attempt 1 (resumed after its wait) for the others.
        expected = {"retry": "@retry/#2", "timer": "@branch/on_false/@wait", "event": "@branch/on_true/go"}[j.kind]
        assert info.steps["attempt_path"] == expected
    with app.engine.connect() as conn:
        per_step = conn.execute(
            sa.select(effects.c.run_id, effects.c.step, sa.func.count()).group_by(effects.c.run_id, effects.c.step)
        ).all()
        aggregate_rows = conn.scalar(sa.text("SELECT count(*) FROM wfw_step"))
        finished_once = conn.scalar(
            sa.select(sa.func.count()).select_from(workflow_runs).where(workflow_runs.c.status == "completed")
        )
    assert finished_once == RUNS
    counts = {(run_id, step): n for run_id, step, n in per_step}
    assert set(counts.values()) == {1}  # no committed effect twice
    assert set(counts) == {(run_ids[j.n], step) for j in jobs for step in STEPS}  # and none missing
    assert aggregate_rows == 2 * RUNS


def _prepare(url: str) -> App:
    app = make_app(url)
    create_tables(app)
    return app


def test_three_worker_processes_complete_every_run_once(fresh_postgres_url: str, workers: list[Worker]) -> None:
    app = _prepare(fresh_postgres_url)
    try:
        workers.extend(Worker(fresh_postgres_url, []) for _ in range(WORKERS))
        jobs = _jobs()
        run_ids = _start(app, jobs, workers)
        stats = [w.stats() for w in workers]
        _check(app, run_ids, jobs)
        assert sum(s["errors"] for s in stats) == 0, [s["error_messages"] for s in stats]
        # Each "retry" job failed its first attempt exactly once, in whichever process ran it.
        assert sum(s["flaky"] for s in stats) == RUNS // 3
        assert sum(s["resumed"] for s in stats) >= RUNS
    finally:
        app.dispose()


def test_a_worker_killed_mid_pass_loses_nothing_and_doubles_nothing(
    fresh_postgres_url: str, workers: list[Worker], tmp_path: Path
) -> None:
    app = _prepare(fresh_postgres_url)
    marker = str(tmp_path / "stalled")
    try:
        workers.extend(Worker(fresh_postgres_url, [marker]) for _ in range(WORKERS))
        jobs = [Job(j.n, j.kind, j.delay, stall=(j.n == 30)) for j in _jobs()]
        run_ids = _start(app, jobs, workers)
        # The first process to run job 30's "after_wait" step says so, then sleeps inside its
        # pass (its transaction open, its batch of runs locked): kill it there.
        deadline = time.monotonic() + 30
        victim = None
        while victim is None and time.monotonic() < deadline:
            for w in workers:
                try:
                    line = w.lines.get(timeout=0.05)
                except queue.Empty:
                    continue
                if line.startswith("stall "):
                    victim = w
                    break
        assert victim is not None, "no worker reached the stalling step"
        os.kill(victim.proc.pid, signal.SIGKILL)
        assert victim.proc.wait(30) == -signal.SIGKILL
        survivors = [w for w in workers if w is not victim]
        stats = [w.stats() for w in survivors]
        _check(app, run_ids, jobs)
        assert sum(s["errors"] for s in stats) == 0, [s["error_messages"] for s in stats]
        # Job 30's "after_wait" effect committed once, by a survivor: the victim's never did.
        with app.engine.connect() as conn:
            stmt = sa.select(effects.c.pid).where(effects.c.run_id == run_ids[30], effects.c.step == "after_wait")
            pids = list(conn.scalars(stmt))
        assert len(pids) == 1 and pids[0] in {w.proc.pid for w in survivors}
    finally:
        app.dispose()
