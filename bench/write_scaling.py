"""Write scaling on PostgreSQL: 1, 2 and 4 writer processes, each bumping its own
aggregate, through a loopback proxy that adds a network delay to every round trip;
kumiko-typed against SQLAlchemy Core with optimistic locking.

Run:  python bench/write_scaling.py [--quick] [--rounds N] [--calls N] [--delay-ms MS]

Each writer process (this script with ``--writer``) builds its side, creates its own
counter, warms up, says ``ready`` and, on the start signal, runs ``--calls`` writes:

* kumiko -- ``App.dispatch`` of the ``get_one -> compute -> update`` handler of
            bench/_counter.py (event row + counter row per call).
* core   -- the same write in SQLAlchemy Core (bench/_counter.py): ``SELECT``,
            ``INSERT`` of the event, ``UPDATE ... WHERE id AND version`` with a rowcount
            check, one transaction, no other lock.  Persists the same rows.

Every process connects through bench/_latency_proxy.py: 127.0.0.1 only, each chunk
delivered ``--delay-ms`` (default 1 ms) later in each direction, so every statement
costs a round trip as on a network.  The figure of a configuration is all writes of all
its processes / (time from the start signal until the last process reported done).  A
round runs every (side, writers) configuration once, the order rotating every round;
reported are the medians over the rounds and the medians of the per-round ratios:
kumiko 4 writers / kumiko 1 writer (goal >= 3) and kumiko / core at 4 writers (goal
>= 0.9).  PostgreSQL is a throw-away server (``kumiko_typed.testing.postgres``: fsync,
full_page_writes and synchronous_commit OFF; read committed) unless
``KUMIKO_BENCH_POSTGRES_URL`` names one.  Nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from _counter import Bump, Side, feature, make_core, make_kumiko, new_counter  # noqa: E402
from _latency_proxy import LatencyProxy  # noqa: E402
from _report import add_json_option, load_average, load_note, write_json  # noqa: E402

import kumiko_typed  # noqa: E402
from kumiko_typed import App, Failure, User  # noqa: E402

SIDES = ("kumiko", "core")
WRITERS = (1, 2, 4)
GOAL_SCALING = 3.0
GOAL_VS_CORE = 0.9


# --- one writer process ---------------------------------------------------------------------


def writer(side: str, url: str, calls: int) -> int:
    """Run in a child: ``ready``, wait for a line, ``calls`` writes, ``done <failures>``."""
    app = App([feature], database_url=url)
    engine = sa.create_engine(url) if side == "core" else app.engine
    try:
        user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset())
        counter = new_counter(app, user)
        fn: Side = make_kumiko(app) if side == "kumiko" else make_core(engine)
        for i in range(5):  # warm-up: connection, statement caches
            fn(Bump(counter, 1 if i % 2 else -1), user)
        print("ready", flush=True)
        sys.stdin.readline()
        failures = 0
        for i in range(calls):
            if isinstance(fn(Bump(counter, 1 if i % 2 else -1), user), Failure):
                failures += 1
        print(f"done {failures}", flush=True)
    finally:
        if engine is not app.engine:
            engine.dispose()
        app.dispose()
    return 0


# --- the parent -----------------------------------------------------------------------------


def run_once(side: str, url: str, writers: int, calls: int) -> float:
    """Writes per second of ``writers`` processes of ``side``."""
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--writer", side, url, str(calls)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(writers)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"writer {proc.pid} did not start (exit {proc.poll()})")
        started = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        done = []
        for proc in procs:
            assert proc.stdout is not None
            done.append(proc.stdout.readline().split())
        elapsed = time.perf_counter() - started
        for proc in procs:
            proc.communicate(timeout=120)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if any(line[:1] != ["done"] or line[1] != "0" for line in done) or any(p.returncode for p in procs):
        raise RuntimeError(f"a writer failed: {done}, exits {[p.returncode for p in procs]}")
    return writers * calls / elapsed


def round_trip_ms(url: str, samples: int = 200) -> float:
    """Median time of ``SELECT 1`` on an open connection to ``url``, in ms."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            times = []
            for _ in range(samples):
                t0 = time.perf_counter()
                conn.exec_driver_sql("SELECT 1").scalar()
                times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3
    finally:
        engine.dispose()


@contextmanager
def postgres_url() -> Iterator[str | None]:
    url = os.environ.get("KUMIKO_BENCH_POSTGRES_URL")
    if url:
        yield url
        return
    from kumiko_typed.testing.postgres import start_test_postgres, unavailable_reason

    server = start_test_postgres()
    if server is None:
        print(f"PostgreSQL: skipped ({unavailable_reason()})")
        yield None
        return
    try:
        yield server.create_database(f"bench_ws_{uuid.uuid4().hex[:8]}")
    finally:
        server.stop()


def measure(url: str, rounds: int, calls: int, delay: float) -> dict[str, Any]:
    app = App([feature], database_url=url)
    app.create_all()
    app.dispose()
    target = sa.make_url(url)
    with LatencyProxy(target.host or "127.0.0.1", target.port or 5432, delay) as proxy:
        proxied = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        direct_ms, proxied_ms = round_trip_ms(url), round_trip_ms(proxied)
        print(f"round trip of SELECT 1: {direct_ms:.2f} ms direct, {proxied_ms:.2f} ms through the proxy")
        configs = [(side, n) for n in WRITERS for side in SIDES]
        rates: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
        for r in range(rounds):
            for side, n in configs[r % len(configs) :] + configs[: r % len(configs)]:
                rates[side, n].append(run_once(side, proxied, n, calls))
            print(f"  round {r + 1}/{rounds} done ({load_note()})", flush=True)
    figures: dict[str, Any] = {"round_trip_ms": {"direct": direct_ms, "proxied": proxied_ms}, "writes_per_s": {}}
    print(f"\nwrites/s, median over {rounds} rounds [min-max]")
    for side, n in configs:
        values = rates[side, n]
        figures["writes_per_s"][f"{side}{n}"] = statistics.median(values)
        print(f"  {side:7} {n} writer(s) {statistics.median(values):8.1f}  [{min(values):.1f}-{max(values):.1f}]")

    def ratio(a: list[float], b: list[float]) -> dict[str, float]:
        values = [x / y for x, y in zip(a, b, strict=True)]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    scaling = {side: {n: ratio(rates[side, n], rates[side, 1]) for n in WRITERS[1:]} for side in SIDES}
    vs_core = {n: ratio(rates["kumiko", n], rates["core", n]) for n in WRITERS}
    figures["scaling"] = {side: {str(n): v for n, v in per.items()} for side, per in scaling.items()}
    figures["vs_core"] = {str(n): v for n, v in vs_core.items()}
    for side in SIDES:
        print(f"  {side} scaling: " + ", ".join(f"{n} vs 1: {v['median']:.2f}x" for n, v in scaling[side].items()))
    print("  kumiko / core: " + ", ".join(f"{n} writer(s) {v['median']:.2f}" for n, v in vs_core.items()))
    met = scaling["kumiko"][4]["median"] >= GOAL_SCALING
    print(f"goal kumiko 4 writers >= {GOAL_SCALING}x one writer: {'met' if met else 'NOT MET'}")
    met = vs_core[4]["median"] >= GOAL_VS_CORE
    print(f"goal kumiko >= {GOAL_VS_CORE}x core at 4 writers: {'met' if met else 'NOT MET'}")
    return figures


def main() -> int:
    if sys.argv[1:2] == ["--writer"]:
        return writer(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (1 round, few writes)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--calls", type=int, default=None, help="writes per process per configuration")
    parser.add_argument("--delay-ms", type=float, default=1.0, help="delay the proxy adds each way (ms)")
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    rounds = args.rounds or (1 if args.quick else 3)
    calls = args.calls or (5 if args.quick else 150)
    print("bench/write_scaling.py — writers on distinct aggregates, PostgreSQL through a delaying proxy")
    print(
        f"python {platform.python_version()}, SQLAlchemy {sa.__version__}, kumiko-typed {kumiko_typed.__version__}; "
        f"{rounds} round(s), {calls} writes per process, writers {WRITERS}, proxy delay {args.delay_ms} ms each way"
    )
    print(
        "each write persists one counter.updated event row and the counter row; core's SQL: SELECT count, version; "
        "INSERT event; UPDATE ... WHERE id AND version (rowcount checked); one transaction, no other lock"
    )
    print("PostgreSQL: throw-away server, fsync, full_page_writes and synchronous_commit OFF, read committed")
    print(f"{load_note()} before")
    figures: dict[str, Any] = {
        "rounds": rounds,
        "calls": calls,
        "delay_ms": args.delay_ms,
        "goal_scaling": GOAL_SCALING,
        "goal_vs_core": GOAL_VS_CORE,
    }
    with postgres_url() as url:
        if url is not None:
            figures["postgres"] = measure(url, rounds, calls, args.delay_ms / 1000)
    print(f"{load_note()} after")
    write_json(args.json, "write_scaling", figures, load_before=load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
