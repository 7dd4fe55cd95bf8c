"""Outbox delivery throughput: webhook rows delivered per second to a loopback HTTP
receiver that answers after 5 ms, by 1, 2 and 4 worker processes.

Run:  python bench/outbox.py [--quick] [--rows N] [--rounds N] [--delay-ms MS]

Configurations, each round on a fresh database:

* PostgreSQL, 1, 2 and 4 worker processes (they share the table: each row claimed with
  ``FOR UPDATE SKIP LOCKED``)
* SQLite, 1 worker process (the embedded engine has a single worker by design)

Each run enqueues ``--rows`` webhook rows (a handler doing 100 ``send_webhook`` per
dispatch, committed before the clock starts), starts the worker processes
(``tests/_outbox_worker.py``: its own App, ``run_worker(once=True)`` until nothing is
pending) and waits until each has connected, then sends the start signal.  The figure is
rows / (time from the start signal until the last worker has exited).  A round runs
every configuration once, the order rotating every round; reported are the medians over
the rounds and the median of the per-round ratios N workers / 1 worker (goal: 4 workers
>= 3x one; the work is waiting on the receiver, so it holds on 2 cores).  The receiver is
a threaded ``http.server`` in this process on 127.0.0.1 that answers 200 after
``--delay-ms`` (default 5 ms); every run checks that all rows ended ``sent`` and that the
receiver saw every idempotency key.

Persisted per delivered row: the outbox row's status (``sent``), attempts and sent_at,
committed by the worker.  PostgreSQL is the tests' throw-away server
(``kumiko_typed.testing.postgres``: fsync, full_page_writes and synchronous_commit OFF);
SQLite a temporary file in WAL with synchronous=FULL.  Nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _outbox_worker import LoopbackReceiver, WorkerProcesses, enqueue, feature  # noqa: E402
from _report import add_json_option, load_average, load_note, write_json  # noqa: E402

from kumiko_typed import App  # noqa: E402
from kumiko_typed.testing.postgres import start_test_postgres, unavailable_reason  # noqa: E402

GOAL = 3.0
NewDatabase = Callable[[], tuple[str, Callable[[], object]]]


def drain(url: str, rows: int, workers: int, delay: float) -> float:
    """One run on the (empty) database ``url``; returns the drain time in seconds."""
    app = App([feature], database_url=url)
    try:
        app.create_all()
        with LoopbackReceiver(delay) as receiver:
            enqueue(app, receiver.url, rows)
            ids = {str(i.id) for i in app.outbox()}
            with WorkerProcesses() as fleet:
                procs = fleet.start(url, workers)
                started = time.perf_counter()
                fleet.go()
                fleet.wait(procs, timeout=600)
                elapsed = time.perf_counter() - started
            statuses = {i.status for i in app.outbox()}
            if statuses != {"sent"} or set(receiver.keys) != ids:
                raise RuntimeError(f"not every row was delivered: {statuses}, {len(set(receiver.keys))} keys")
        return elapsed
    finally:
        app.dispose()


def report(times: dict[str, list[float]], rows: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Print and return the rates and the per-round scaling ratios."""
    labels = {"pg1": "PostgreSQL, 1 worker", "pg2": "PostgreSQL, 2 workers", "pg4": "PostgreSQL, 4 workers"}
    labels["sqlite1"] = "SQLite, 1 worker"
    rates = {key: rows / statistics.median(ts) for key, ts in times.items()}
    for key, rate in rates.items():
        print(f"  {labels[key]:<24} {rate:8.0f} rows/s  (median {statistics.median(times[key]):.2f} s per run)")
    scaling: dict[str, Any] = {}
    if "pg1" in times:
        for n in (2, 4):
            ratios = [one / many for one, many in zip(times["pg1"], times[f"pg{n}"], strict=True)]
            scaling[str(n)] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
            print(f"  PostgreSQL {n} workers vs 1: {scaling[str(n)]['median']:.2f}x (per-round median)")
        verdict = "met" if scaling["4"]["median"] >= GOAL else "NOT MET"
        print(f"  goal 4 workers >= {GOAL}x one: {verdict}")
    return rates, scaling


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 40 rows, 1 round")
    parser.add_argument("--rows", type=int, default=None, help="rows per run (default 600)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--delay-ms", type=float, default=5.0, help="the receiver's delay before answering (ms)")
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    rows = args.rows or (40 if args.quick else 600)
    rounds = args.rounds or (1 if args.quick else 3)
    delay = args.delay_ms / 1000

    print(
        f"bench/outbox.py — {rows} webhook rows per run, receiver on 127.0.0.1 answering after {args.delay_ms} ms, "
        f"{rounds} round(s), configurations rotating"
    )
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, {load_note()} before")
    print(
        "persisted per row: the outbox row marked sent (status, attempts, sent_at); PostgreSQL: throw-away server, "
        "fsync, full_page_writes and synchronous_commit OFF; SQLite: file, WAL, synchronous=FULL"
    )
    server = start_test_postgres()
    new_db: dict[str, NewDatabase] = {}
    configs: list[tuple[str, int]] = []
    if server is None:
        print(f"  PostgreSQL skipped: {unavailable_reason()}")
    else:

        def new_pg() -> tuple[str, Callable[[], object]]:
            name = f"bench_{uuid.uuid4().hex}"
            return server.create_database(name), lambda: server.drop_database(name)

        new_db["pg"] = new_pg
        configs += [("pg", 1), ("pg", 2), ("pg", 4)]
    times: dict[str, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="kumiko-bench-") as tmp:

            def new_sqlite() -> tuple[str, Callable[[], object]]:
                path = Path(tmp) / f"{uuid.uuid4().hex}.sqlite3"
                return f"sqlite:///{path}", lambda: path.unlink(missing_ok=True)

            new_db["sqlite"] = new_sqlite
            configs.append(("sqlite", 1))
            times = {f"{db}{n}": [] for db, n in configs}
            for r in range(rounds):
                for db, n in configs[r % len(configs) :] + configs[: r % len(configs)]:
                    url, cleanup = new_db[db]()
                    try:
                        times[f"{db}{n}"].append(drain(url, rows, n, delay))
                    finally:
                        cleanup()
                print(f"  round {r + 1}/{rounds} done ({load_note()})", flush=True)
    finally:
        if server is not None:
            server.stop()

    rates, scaling = report(times, rows)
    print(f"{load_note()} after")
    figures = {
        "rows": rows,
        "rounds": rounds,
        "delay_ms": args.delay_ms,
        "goal": GOAL,
        "rows_per_s": rates,
        "scaling": scaling,
    }
    write_json(args.json, "outbox", figures, load_before=load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
