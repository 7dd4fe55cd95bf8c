"""Handler cost: a kumiko-typed ``get_one -> compute -> update`` handler against the same
write by hand with SQLAlchemy Core and with the raw driver.

Run:  python bench/handler.py [--quick] [--rounds N] [--calls N] [--only sqlite|postgres]
                              [--sqlite-sync full|off] [--profile]

Sides (bench/_counter.py has all of them; each bumps its own counter row):

* kumiko  -- ``App.dispatch(bump, Bump(id, delta), user=...)``: role check, transaction,
             step runtime, tenant filter, ``get_one`` of the counter, ``compute`` of the new
             count, ``update`` with the version read (event + row), ``return_``.
* core    -- SQLAlchemy Core on the App's engine, statements built once, one transaction:
             ``SELECT count, version ... WHERE id AND tenant_id``, ``INSERT`` of the event,
             ``UPDATE ... SET count, version, updated_at WHERE id AND version`` with a
             rowcount check (0 rows: rollback, ``version_conflict``).  No other lock.
* raw     -- the same three statements through sqlite3 / psycopg 3 on one connection.
* orm     -- context only (the old baseline): the same write through an ORM ``Session``
             (select the entity, insert the event, change the attributes, flush, commit).

Each side persists per call: one ``counter.updated`` event row and the counter's new
count, version and updated_at.  A check before timing runs each side and compares results
and stored rows.  Each round times N calls of every side, the order rotating every round,
with the garbage collector off inside a timed batch.  Reported per database: median
wall-clock and CPU (this process) time per call of each side and the median of the
per-round ratios kumiko / core, kumiko / raw (and kumiko / orm, context).
Goals: kumiko / core <= 1.30 (wall and CPU), kumiko / raw <= 2.5.  Nothing here passes or
fails on time.

Databases: SQLite on a temporary file (WAL, synchronous=FULL, BEGIN IMMEDIATE: the App's
set-up, which the raw side copies); PostgreSQL from ``KUMIKO_BENCH_POSTGRES_URL`` or else a
throw-away server (``kumiko_typed.testing.postgres``: fsync, full-page writes and
synchronous_commit OFF, loopback TCP).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import platform
import pstats
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from _counter import (  # noqa: E402
    AGGREGATE,
    EVENT_TYPE,
    Bump,
    Counter,
    Side,
    feature,
    make_core,
    make_kumiko,
    make_raw_psycopg,
    make_raw_sqlite,
    new_counter,
    stored,
)
from _report import add_json_option, load_average, load_note, write_json  # noqa: E402

import kumiko_typed  # noqa: E402
from kumiko_typed import App, Failure, Ok, User, fail, ok  # noqa: E402
from kumiko_typed._tables import events  # noqa: E402

GOAL_CORE = 1.30
GOAL_RAW = 2.5
SQL = (
    "SELECT count, version WHERE id AND tenant_id; INSERT event; "
    "UPDATE SET count, version, updated_at WHERE id AND version (rowcount checked); COMMIT"
)


def make_orm(engine: sa.Engine) -> Side:
    """Context only: the write as ORM code (the unit of work flushes the changed row)."""
    sessions = sessionmaker(engine, expire_on_commit=False)

    def orm(payload: Bump, user: User) -> Ok[int] | Failure:
        now = datetime.now(UTC)
        with sessions() as session, session.begin():
            row = session.scalars(
                sa.select(Counter).where(Counter.id == payload.id, Counter.tenant_id == user.tenant_id)
            ).first()
            if row is None:
                return fail("not_found", f"Counter {payload.id} not found")
            expected, count = row.version, row.count + payload.delta
            session.execute(
                sa.insert(events).values(
                    event_id=uuid.uuid4(),
                    stream_id=row.id,
                    aggregate_type=AGGREGATE,
                    stream_version=expected + 1,
                    type=EVENT_TYPE,
                    payload={"changes": {"count": count}},
                    headers={},
                    tenant_id=user.tenant_id,
                    user_id=user.id,
                    correlation_id=uuid.uuid4(),
                    occurred_at=now,
                )
            )
            row.count, row.version, row.updated_at = count, expected + 1, now
            session.flush()
        return ok(count)

    return orm


def check_same(app: App, user: User, sides: dict[str, Side]) -> None:
    ids = {name: new_counter(app, user) for name in sides}
    for delta in (1, -1, 5, 2):
        got = {name: fn(Bump(ids[name], delta), user) for name, fn in sides.items()}
        if len({repr(g) for g in got.values()}) != 1:
            raise SystemExit(f"MISMATCH on delta {delta}: {got}")
    rows = {name: stored(app.engine, ids[name]) for name in sides}
    if len({repr(r) for r in rows.values()}) != 1:
        raise SystemExit(f"MISMATCH in stored rows: {rows}")
    missing = fn_missing(sides["core"], user)
    if not (isinstance(missing, Failure) and missing.code == "not_found"):
        raise SystemExit(f"core on a missing row: {missing!r}")


def fn_missing(fn: Side, user: User) -> Ok[int] | Failure:
    return fn(Bump(uuid.uuid4(), 1), user)


def batch(fn: Side, counter: uuid.UUID, user: User, n: int) -> tuple[float, float]:
    """Wall-clock and CPU seconds per call over ``n`` calls (deltas +1, -1, ...).  CPU is
    this process's alone: the steadier figure of the Python side on a busy machine, but
    it leaves out the database's work and waits."""
    up, down = Bump(counter, 1), Bump(counter, -1)
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        for i in range(n):
            fn(down if i % 2 else up, user)
        t1, c1 = time.perf_counter(), time.process_time()
    finally:
        if gc_was_on:
            gc.enable()
    return (t1 - t0) / n, (c1 - c0) / n


def _median_ratio(a: list[float], b: list[float]) -> tuple[float, float, float]:
    ratios = [x / y for x, y in zip(a, b, strict=True) if y > 0]
    if not ratios:
        return float("nan"), float("nan"), float("nan")
    return statistics.median(ratios), min(ratios), max(ratios)


def measure(label: str, app: App, raw: Side, rounds: int, calls: int, profile: bool) -> dict[str, Any]:
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset())
    sides: dict[str, Side] = {
        "kumiko": make_kumiko(app),
        "core": make_core(app.engine),
        "raw": raw,
        "orm": make_orm(app.engine),
    }
    check_same(app, user, sides)
    counters = {name: new_counter(app, user) for name in sides}
    for name, fn in sides.items():  # warm-up: pools, statement caches, prepared statements
        batch(fn, counters[name], user, max(calls // 2, 6))

    wall: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # each side leads in turn
            w, c = batch(sides[name], counters[name], user, calls)
            wall[name].append(w)
            cpu[name].append(c)

    us = 1e6
    print(f"\n{label}")
    print(f"{'':8} {'wall-clock us/call':>38}   {'CPU us/call (this process)':>28}")
    for name in names:
        ts = wall[name]
        print(
            f"{name:8} median {statistics.median(ts) * us:9.1f}  (min {min(ts) * us:8.1f}, max {max(ts) * us:8.1f})"
            f"   median {statistics.median(cpu[name]) * us:9.1f}"
        )
    figures: dict[str, Any] = {f"{name}_us": statistics.median(wall[name]) * us for name in names}
    figures |= {f"{name}_cpu_us": statistics.median(cpu[name]) * us for name in names}
    for other, goal in (("core", GOAL_CORE), ("raw", GOAL_RAW), ("orm", None)):
        w, w_min, w_max = _median_ratio(wall["kumiko"], wall[other])
        c, _, _ = _median_ratio(cpu["kumiko"], cpu[other])
        figures |= {f"{other}_ratio": w, f"{other}_ratio_min": w_min, f"{other}_ratio_max": w_max}
        figures[f"{other}_cpu_ratio"] = c
        verdict = "context" if goal is None else f"goal <= {goal}: " + ("met" if max(w, c) <= goal else "NOT MET")
        print(f"kumiko/{other:5} wall median {w:.3f} (min {w_min:.3f}, max {w_max:.3f}), CPU median {c:.3f}; {verdict}")
    if profile:
        for name in ("kumiko", "core"):
            profiler = cProfile.Profile()
            profiler.enable()
            batch(sides[name], counters[name], user, calls)
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
            print(f"\n--- cProfile, {name}, {calls} calls, by own time ---\n{out.getvalue()}")
    return figures


@contextmanager
def postgres_url() -> Iterator[str | None]:
    url = os.environ.get("KUMIKO_BENCH_POSTGRES_URL")
    if url:
        yield url
        return
    from kumiko_typed.testing.postgres import start_test_postgres

    server = start_test_postgres()
    if server is None:
        yield None
        return
    try:
        yield server.create_database(f"bench_{uuid.uuid4().hex[:8]}")
    finally:
        server.stop()


def run_sqlite(sync: str, rounds: int, calls: int, profile: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kumiko-bench-") as folder:
        path = f"{folder}/bench.sqlite3"
        app = App([feature], database_url=f"sqlite:///{path}")
        if sync == "OFF":
            sa.event.listen(app.engine, "connect", lambda conn, _record: conn.execute("PRAGMA synchronous=OFF"))
        app.create_all()
        raw, close = make_raw_sqlite(path, synchronous=sync)
        try:
            label = (
                f"SQLite {sqlite3.sqlite_version} (temporary file, WAL, synchronous={sync}, BEGIN IMMEDIATE; "
                "raw side: sqlite3, same pragmas)"
            )
            return measure(label, app, raw, rounds, calls, profile)
        finally:
            close()
            app.dispose()


def run_postgres(rounds: int, calls: int, profile: bool) -> dict[str, Any] | None:
    with postgres_url() as url:
        if url is None:
            print("\nPostgreSQL: no server binaries found (set KUMIKO_BENCH_POSTGRES_URL); skipped")
            return None
        app = App([feature], database_url=url)
        app.create_all()
        raw, close = make_raw_psycopg(url)
        try:
            server = app.engine.dialect.server_version_info
            label = (
                f"PostgreSQL {'.'.join(map(str, server or ()))} (loopback TCP, psycopg 3; throw-away server: "
                "fsync, full_page_writes and synchronous_commit OFF; read committed)"
            )
            return measure(label, app, raw, rounds, calls, profile)
        finally:
            close()
            app.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (few rounds, few calls)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--calls", type=int, default=None, help="calls per side per round")
    parser.add_argument("--only", choices=["sqlite", "postgres"], default=None)
    parser.add_argument("--profile", action="store_true", help="cProfile one batch of kumiko and core afterwards")
    parser.add_argument(
        "--sqlite-sync",
        choices=["full", "off"],
        default="full",
        help="SQLite's synchronous pragma (full, the default, fsyncs at every commit; off shows the CPU cost)",
    )
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    rounds = args.rounds or (3 if args.quick else 41)
    calls = args.calls or (12 if args.quick else 60)

    print("bench/handler.py — get_one -> compute -> update: kumiko-typed vs SQLAlchemy Core vs the raw driver")
    print(
        f"python {platform.python_version()} ({platform.python_implementation()}), SQLAlchemy {sa.__version__}, "
        f"kumiko-typed {kumiko_typed.__version__}, {rounds} rounds x {calls} calls per side, order rotating"
    )
    print(f"baseline SQL (core and raw, one transaction, optimistic, no other lock): {SQL}")
    print("each side persists per call: one counter.updated event row + the counter row's count, version, updated_at")
    print(f"{load_note()} before")
    results: dict[str, Any] = {}

    if args.only in (None, "sqlite"):
        results["sqlite"] = run_sqlite(args.sqlite_sync.upper(), rounds, calls, args.profile)
    if args.only in (None, "postgres"):
        found = run_postgres(rounds, calls, args.profile)
        if found is not None:
            results["postgres"] = found

    print(f"\n{load_note()} after")
    figures = {"rounds": rounds, "calls": calls, "goal_core": GOAL_CORE, "goal_raw": GOAL_RAW, "sql": SQL, **results}
    write_json(args.json, "handler", figures, load_before=load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
