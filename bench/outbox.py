"""Outbox delivery throughput: delivered rows per second to a loopback HTTP receiver.

Run:  python bench/outbox.py [--quick] [--rows N] [--rounds N]

Configurations, each on a fresh database:

* PostgreSQL, 1 worker process
* PostgreSQL, 4 worker processes (``FOR UPDATE SKIP LOCKED`` shares the table)
* SQLite, 1 worker process (the embedded engine has a single worker by design)

Each round enqueues ``--rows`` webhook rows (a handler doing 100 ``send_webhook`` per
dispatch, committed before the clock starts), starts the worker processes
(``tests/_outbox_worker.py``: its own App, ``run_worker(once=True)`` until nothing is
pending) and waits until each has connected, then sends the start signal.  The figure
is rows / (time from the start signal until the last worker has exited), the median
over the rounds.  The receiver is a threaded ``http.server`` in this process answering
200 on 127.0.0.1; every run checks that all rows ended ``sent`` and that the receiver
saw every idempotency key.  PostgreSQL is the tests' throw-away server
(``kumiko_typed.testing.postgres``; ``KUMIKO_TEST_POSTGRES_URL`` to use a running one).

The figures depend on the machine (the workers, the receiver and PostgreSQL share its
CPUs); the 4-vs-1 ratio is measured in the same run.  Nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _outbox_worker import LoopbackReceiver, enqueue, feature  # noqa: E402
from _report import add_json_option, load_average, write_json  # noqa: E402

from kumiko_typed import App  # noqa: E402
from kumiko_typed.testing.postgres import start_test_postgres, unavailable_reason  # noqa: E402

HELPER = ROOT / "tests" / "_outbox_worker.py"


def drain(url: str, rows: int, workers: int) -> float:
    """One round on the (empty) database ``url``; returns the drain time in seconds."""
    app = App([feature], database_url=url)
    try:
        app.create_all()
        with LoopbackReceiver() as receiver:
            enqueue(app, receiver.url, rows)
            ids = {str(i.id) for i in app.outbox()}
            procs = [
                subprocess.Popen(
                    [sys.executable, str(HELPER), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
                for _ in range(workers)
            ]
            try:
                for proc in procs:
                    assert proc.stdout is not None
                    if proc.stdout.readline().strip() != "ready":
                        raise RuntimeError(f"worker {proc.pid} did not start")
                started = time.perf_counter()
                for proc in procs:
                    assert proc.stdin is not None
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                for proc in procs:
                    proc.communicate(timeout=600)
                elapsed = time.perf_counter() - started
            finally:
                for proc in procs:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            if any(proc.returncode for proc in procs):
                raise RuntimeError(f"a worker failed: {[p.returncode for p in procs]}")
            statuses = {i.status for i in app.outbox()}
            if statuses != {"sent"} or set(receiver.keys) != ids:
                raise RuntimeError(f"not every row was delivered: {statuses}, {len(set(receiver.keys))} keys")
        return elapsed
    finally:
        app.dispose()


NewDatabase = Callable[[], tuple[str, Callable[[], object]]]


def measure(name: str, new_url: NewDatabase, rows: int, workers: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        url, cleanup = new_url()
        try:
            times.append(drain(url, rows, workers))
        finally:
            cleanup()
    seconds = statistics.median(times)
    rate = rows / seconds
    print(f"  {name:<26} {rows:>6} rows  {seconds:7.2f} s  {rate:8.0f} rows/s", flush=True)
    return rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 300 rows, 1 round")
    parser.add_argument("--rows", type=int, default=None, help="rows per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per configuration (default 3)")
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    rows = args.rows or (300 if args.quick else 2000)
    rounds = args.rounds or (1 if args.quick else 3)

    print(f"outbox delivery: {rows} webhook rows per round, median of {rounds} round(s)")
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs")
    results: dict[str, float] = {}

    server = start_test_postgres()
    if server is None:
        print(f"  PostgreSQL skipped: {unavailable_reason()}")
    else:
        try:

            def new_pg() -> tuple[str, Callable[[], object]]:
                name = f"bench_{uuid.uuid4().hex}"
                return server.create_database(name), lambda: server.drop_database(name)

            results["pg1"] = measure("PostgreSQL, 1 worker", new_pg, rows, 1, rounds)
            results["pg4"] = measure("PostgreSQL, 4 workers", new_pg, rows, 4, rounds)
        finally:
            server.stop()

    with tempfile.TemporaryDirectory(prefix="kumiko-bench-") as tmp:

        def new_sqlite() -> tuple[str, Callable[[], object]]:
            path = Path(tmp) / f"{uuid.uuid4().hex}.sqlite3"
            return f"sqlite:///{path}", lambda: path.unlink(missing_ok=True)

        results["sqlite1"] = measure("SQLite, 1 worker", new_sqlite, rows, 1, rounds)

    if "pg1" in results:
        print(f"  PostgreSQL 4 workers vs 1: {results['pg4'] / results['pg1']:.2f}x")
    figures = {"rows": rows, "rounds": rounds, "rows_per_s": results}
    write_json(args.json, "outbox", figures, load_before=load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
