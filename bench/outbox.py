"""Outbox delivery throughput: webhook rows delivered per second to a loopback HTTP
receiver that answers after 5 ms, by 1, 2 and 4 worker processes, and the CPU each
delivered row costs.

Run:  python bench/outbox.py [--quick] [--rows N] [--rounds N] [--delay-ms MS] [--body-bytes N]

Configurations, each round on a fresh database:

* PostgreSQL, 1, 2 and 4 worker processes (they share the table: each batch claimed with
  ``FOR UPDATE SKIP LOCKED``), each with the App's default ``delivery_concurrency``
  (4 deliveries in flight per worker)
* the same with ``delivery_concurrency=1``: one delivery at a time per worker, so the
  ratios are the scaling by processes alone
* SQLite, 1 worker process (the embedded engine has a single worker by design)

Each run enqueues ``--rows`` webhook rows (a handler doing 100 ``send_webhook`` per
dispatch, committed before the clock starts), starts the worker processes
(``tests/_outbox_worker.py``: its own App, ``run_worker(once=True)`` until nothing is
due) and waits until each has started up (connected, and made the App's HTTP client,
which its first delivery would make), then sends the start signal.  The figure is
rows / (time from the start signal until the last worker reports done; their exits are not
counted).  A round runs every configuration once, the order rotating every round; reported
are the medians over the rounds and the median of the per-round ratios N workers / 1
worker (goal: 4 workers >= 3x one).  Also reported: CPU milliseconds per delivered row, by side -- the workers
(their own count from the start signal), the receiver (this process) and PostgreSQL
(its processes, from /proc) -- and what that allows on this machine's cores.

The receiver (``tests/_outbox_worker.LoopbackReceiver``) is infrastructure, not a
measured side: an asyncio HTTP/1.1 server with keep-alive in this process on 127.0.0.1
that answers 200 after ``--delay-ms`` (default 5 ms); every run checks that all rows
ended ``sent`` and that the receiver saw every idempotency key.

Persisted per delivered row: the outbox row's status (``sent``), attempts and sent_at,
committed by the worker (on both databases a short transaction claims a batch, and one
UPDATE marks the rows of a batch that were sent, each second and at its end).  PostgreSQL is
the tests' throw-away server (``kumiko_typed.testing.postgres``: fsync, full_page_writes
and synchronous_commit OFF); SQLite a temporary file in WAL with synchronous=FULL.
Nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _cpu import CpuMeter, worker_cpu  # noqa: E402
from _outbox_worker import LoopbackReceiver, WorkerProcesses, enqueue, feature  # noqa: E402
from _report import add_json_option, load_average, load_note, write_json  # noqa: E402

from kumiko_typed import App  # noqa: E402
from kumiko_typed.testing.postgres import start_test_postgres, unavailable_reason  # noqa: E402

GOAL = 3.0
NewDatabase = Callable[[], tuple[str, Callable[[], object]]]
#: (database, worker processes, delivery_concurrency or None for the App's default)
Config = tuple[str, int, int | None]


def key_of(config: Config) -> str:
    db, workers, pool = config
    return f"{db}{workers}" + ("" if pool is None else f"_pool{pool}")


def label_of(key: str) -> str:
    db, _, pool = key.partition("_pool")
    workers = int(db.removeprefix("pg").removeprefix("sqlite"))
    name = "PostgreSQL" if db.startswith("pg") else "SQLite"
    width = f"{pool} delivery at a time" if pool else "default pool (4)"
    return f"{name}, {workers} worker{'s' if workers > 1 else ''}, {width}"


def drain(
    url: str, rows: int, config: Config, delay: float, meter: CpuMeter, body: bytes = b""
) -> tuple[float, dict[str, float]]:
    """One run on the (empty) database ``url``: the drain time in seconds and the CPU
    milliseconds per row, by side."""
    _, workers, pool = config
    app = App([feature], database_url=url)
    try:
        app.create_all()
        with LoopbackReceiver(delay, body) as receiver:
            enqueue(app, receiver.url, rows)
            ids = {str(i.id) for i in app.outbox()}
            with WorkerProcesses() as fleet:
                procs = fleet.start(url, workers, args=() if pool is None else (str(pool),))
                outputs, elapsed = fleet.timed(procs, meter)
            statuses = {i.status for i in app.outbox()}
            if statuses != {"sent"} or set(receiver.keys) != ids:
                raise RuntimeError(f"not every row was delivered: {statuses}, {len(set(receiver.keys))} keys")
        cpu = {"workers": worker_cpu(outputs), "receiver": meter.here}
        if meter.postgres is not None and url.startswith("postgresql"):
            cpu["postgres"] = meter.postgres
        return elapsed, {side: 1000 * seconds / rows for side, seconds in cpu.items()}
    finally:
        app.dispose()


def _ratios(times: dict[str, list[float]], suffix: str) -> dict[str, Any]:
    scaling: dict[str, Any] = {}
    for n in (2, 4):
        pairs = zip(times[f"pg1{suffix}"], times[f"pg{n}{suffix}"], strict=True)
        ratios = [one / many for one, many in pairs]
        scaling[str(n)] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    return scaling


def report(
    times: dict[str, list[float]], cpu: dict[str, list[dict[str, float]]], rows: int
) -> tuple[dict[str, float], dict[str, dict[str, float]], dict[str, Any]]:
    """Print and return the rates, the CPU per row by side and the scaling ratios."""
    rates = {key: rows / statistics.median(ts) for key, ts in times.items()}
    per_row = {key: {side: statistics.median(r[side] for r in runs) for side in runs[0]} for key, runs in cpu.items()}
    cores = os.cpu_count() or 1
    print(f"  {'configuration':<50} {'rows/s':>7}   CPU ms per row: workers + receiver + PostgreSQL = total")
    for key, rate in rates.items():
        sides = per_row[key]
        total = sum(sides.values())
        parts = " + ".join(f"{sides[s]:.2f}" for s in ("workers", "receiver", "postgres") if s in sides)
        print(
            f"  {label_of(key):<50} {rate:7.0f}   {parts} = {total:.2f}"
            f"  (at most {1000 * cores / total:.0f} rows/s on {cores} cores)"
        )
    scaling: dict[str, Any] = {}
    if "pg1" in times:
        scaling = _ratios(times, "")
        scaling["pool1"] = _ratios(times, "_pool1")
        for name, figures in (("default pool", scaling), ("1 delivery at a time", scaling["pool1"])):
            for n in ("2", "4"):
                print(f"  PostgreSQL, {name}: {n} workers vs 1: {figures[n]['median']:.2f}x (per-round median)")
        for name, figures in (("default pool", scaling), ("1 delivery at a time", scaling["pool1"])):
            verdict = "met" if figures["4"]["median"] >= GOAL else "NOT MET"
            print(f"  goal 4 workers >= {GOAL}x one, {name}: {verdict}")
    return rates, per_row, scaling


def run_rounds(
    rows: int, rounds: int, delay: float, body: bytes = b""
) -> tuple[dict[str, list[float]], dict[str, list[dict[str, float]]]]:
    """Every configuration once per round, the order rotating: the drain times and the CPU
    per row by side, per configuration."""
    server = start_test_postgres()
    new_db: dict[str, NewDatabase] = {}
    configs: list[Config] = []
    if server is None:
        print(f"  PostgreSQL skipped: {unavailable_reason()}")
    else:

        def new_pg() -> tuple[str, Callable[[], object]]:
            name = f"bench_{uuid.uuid4().hex}"
            return server.create_database(name), lambda: server.drop_database(name)

        new_db["pg"] = new_pg
        configs += [("pg", n, pool) for pool in (None, 1) for n in (1, 2, 4)]
    meter = CpuMeter(server)
    try:
        with tempfile.TemporaryDirectory(prefix="kumiko-bench-") as tmp:

            def new_sqlite() -> tuple[str, Callable[[], object]]:
                path = Path(tmp) / f"{uuid.uuid4().hex}.sqlite3"
                return f"sqlite:///{path}", lambda: path.unlink(missing_ok=True)

            new_db["sqlite"] = new_sqlite
            configs.append(("sqlite", 1, None))
            times: dict[str, list[float]] = {key_of(c): [] for c in configs}
            cpu: dict[str, list[dict[str, float]]] = {key_of(c): [] for c in configs}
            for r in range(rounds):
                for config in configs[r % len(configs) :] + configs[: r % len(configs)]:
                    url, cleanup = new_db[config[0]]()
                    try:
                        elapsed, per_row = drain(url, rows, config, delay, meter, body)
                    finally:
                        cleanup()
                    times[key_of(config)].append(elapsed)
                    cpu[key_of(config)].append(per_row)
                print(f"  round {r + 1}/{rounds} done ({load_note()})", flush=True)
    finally:
        if server is not None:
            server.stop()
    return times, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 40 rows, 1 round")
    parser.add_argument("--rows", type=int, default=None, help="rows per run (default 600)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--delay-ms", type=float, default=5.0, help="the receiver's delay before answering (ms)")
    parser.add_argument("--body-bytes", type=int, default=0, help="the size of the receiver's answer body (default 0)")
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    rows = args.rows or (40 if args.quick else 600)
    rounds = args.rounds or (1 if args.quick else 3)
    delay = args.delay_ms / 1000

    print(
        f"bench/outbox.py — {rows} webhook rows per run, receiver on 127.0.0.1 answering after {args.delay_ms} ms "
        f"with a {args.body_bytes}-byte body, "
        f"{rounds} round(s), configurations rotating"
    )
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, {load_note()} before")
    print(
        "persisted per row: the outbox row marked sent (status, attempts, sent_at); PostgreSQL: throw-away server, "
        "fsync, full_page_writes and synchronous_commit OFF; SQLite: file, WAL, synchronous=FULL"
    )
    print("the receiver is infrastructure, not a measured side: asyncio HTTP/1.1 with keep-alive, in this process")
    times, cpu = run_rounds(rows, rounds, delay, b"x" * args.body_bytes)
    rates, per_row, scaling = report(times, cpu, rows)
    print(f"{load_note()} after")
    figures: dict[str, Any] = {
        "rows": rows,
        "rounds": rounds,
        "delay_ms": args.delay_ms,
        "body_bytes": args.body_bytes,
        "goal": GOAL,
        "rows_per_s": rates,
        "cpu_ms_per_row": per_row,
        "scaling": scaling,
    }
    write_json(args.json, "outbox", figures, load_before=load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
