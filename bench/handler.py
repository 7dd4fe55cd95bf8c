"""Handler overhead: the inventory ``product:adjust-stock`` handler through the framework vs.
hand-written SQLAlchemy code doing the same work in one transaction.

Run:  python bench/handler.py [--quick] [--rounds N] [--calls N] [--only sqlite|postgres]
                              [--sqlite-sync full|off] [--profile]

* framework      -- ``App.dispatch(adjust_stock, AdjustStock(id, delta, "bench"), user=...)``:
                    the example's pipeline (get_one, append_event with the projector,
                    compute, upsert or delete of the low-stock alert, return_), i.e. the
                    role check, one session and transaction, the step runtime, the tenant
                    filter on ORM reads, the event store append.
* hand-written   -- the same statements written by hand in one ORM ``Session``: on
                    PostgreSQL the append advisory lock first (with the NOTIFY that wakes
                    workers, in one statement as the framework does); ``SELECT`` of the
                    product (tenant and ``archived`` in the WHERE) — no row lock needed,
                    every writer takes the append lock before reading; INSERT of the event
                    row into ``kumiko_events`` (same columns and payload); the projector's
                    change plus version and ``updated_at`` on the product (flushed as one
                    UPDATE); the alert upserted (``ON CONFLICT DO UPDATE``) or deleted;
                    COMMIT (ROLLBACK when the stock would go below zero).  The baseline.

All sides use the App's engine (same pool, same SQLite set-up), each works on its own
product, and the deltas alternate +1/-1 around the low-stock threshold, so every second
call upserts the alert and every other one deletes it.  A check before timing runs a few
calls of each side and compares results and stored rows (events, product, alert).

Each round times N calls of each side (the order rotates every round), with the garbage
collector off inside a timed batch.  Reported per database: the median wall-clock and CPU
(this process) time per call of each side and the median of the per-round ratios
framework / hand-written.  Nothing here passes or fails on time.

Databases: SQLite on a temporary file (the App's default pragmas: write-ahead log,
synchronous=FULL), and PostgreSQL from ``KUMIKO_BENCH_POSTGRES_URL`` or else a throw-away
server started with ``kumiko_typed.testing.postgres`` (fsync and synchronous_commit off, loopback TCP).
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import sessionmaker

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from _report import add_json_option, load_average, load_note, write_json  # noqa: E402

import kumiko_typed  # noqa: E402
from examples.inventory.handlers import adjust_stock, create_product, inventory  # noqa: E402
from examples.inventory.model import LOW_STOCK, AdjustStock, CreateProduct, LowStockAlert, Product  # noqa: E402
from kumiko_typed import App, Failure, Ok, User, fail, ok  # noqa: E402
from kumiko_typed._eventstore import APPEND_LOCK  # noqa: E402
from kumiko_typed._notify import CHANNEL  # noqa: E402
from kumiko_typed._tables import events  # noqa: E402

TARGET = 1.15
ALERTS = LowStockAlert.__table__
LOCK = sa.text("SELECT pg_advisory_xact_lock(:key), pg_notify(:channel, '')")


# --- hand-written ------------------------------------------------------------------------------


def make_hand_written(engine: sa.Engine) -> Callable[[AdjustStock, User], Ok[int] | Failure]:
    """The adjustment by hand, statement for statement what the framework sends."""
    sessions = sessionmaker(engine, expire_on_commit=False)
    postgres = engine.dialect.name == "postgresql"
    upsert_insert = postgresql.insert(ALERTS) if postgres else sqlite.insert(ALERTS)
    upsert = upsert_insert.on_conflict_do_update(
        index_elements=[ALERTS.c.product_id],
        set_={c: upsert_insert.excluded[c] for c in ("tenant_id", "sku", "stock")},
    )

    def adjust(payload: AdjustStock, user: User) -> Ok[int] | Failure:
        now = datetime.now(UTC)
        with sessions() as session, session.begin():
            if postgres:
                session.execute(LOCK, {"key": APPEND_LOCK, "channel": CHANNEL})
            live = (Product.id == payload.id, Product.tenant_id == user.tenant_id, Product.archived.is_(False))
            product = session.execute(sa.select(Product).where(*live)).scalars().first()
            if product is None:
                return fail("not_found", f"Product {payload.id} not found")
            new_stock = product.stock + payload.delta
            version = product.version + 1
            session.execute(
                sa.insert(events).values(
                    event_id=uuid.uuid4(),
                    stream_id=product.id,
                    aggregate_type="product",
                    stream_version=version,
                    type="product-stock-adjusted",
                    payload={"delta": payload.delta, "reason": payload.reason},
                    headers={},
                    tenant_id=user.tenant_id,
                    user_id=user.id,
                    correlation_id=uuid.uuid4(),
                    occurred_at=now,
                )
            )
            product.stock = new_stock
            product.version = version
            product.updated_at = now
            session.flush()
            if new_stock < LOW_STOCK:
                session.execute(
                    upsert.values(product_id=product.id, tenant_id=user.tenant_id, sku=product.sku, stock=new_stock)
                )
            else:
                session.execute(sa.delete(ALERTS).where(ALERTS.c.product_id == product.id))
            if new_stock < 0:
                session.rollback()
                return fail("unprocessable", "stock cannot go below zero", {"stock": new_stock})
            return ok(new_stock)

    return adjust


# --- the framework -----------------------------------------------------------------------------


def make_framework(app: App) -> Callable[[AdjustStock, User], Ok[int] | Failure]:
    dispatch = app.dispatch

    def adjust(payload: AdjustStock, user: User) -> Ok[int] | Failure:
        return dispatch(adjust_stock, payload, user=user)

    return adjust


# --- harness -------------------------------------------------------------------------------------


Side = Callable[[AdjustStock, User], "Ok[int] | Failure"]


def new_product(app: App, user: User, sku: str) -> uuid.UUID:
    made = app.dispatch(create_product, CreateProduct(sku, sku, LOW_STOCK - 1), user=user)
    assert isinstance(made, Ok), made
    return made.data.id


def stored(app: App, pid: uuid.UUID) -> tuple[Any, ...]:
    """What a run of adjustments left behind for one product, minus ids and times."""
    with app.engine.connect() as conn:
        evs = conn.execute(
            sa.select(
                events.c.aggregate_type, events.c.stream_version, events.c.type, events.c.payload, events.c.headers
            )
            .where(events.c.stream_id == pid)
            .order_by(events.c.position)
        ).all()
        row = conn.execute(sa.select(Product.stock, Product.version, Product.archived).where(Product.id == pid)).one()
        alert = conn.execute(sa.select(ALERTS.c.stock).where(ALERTS.c.product_id == pid)).all()
    return [tuple(e) for e in evs][1:], tuple(row), [tuple(a) for a in alert]


def check_same(app: App, user: User, framework: Side, hand: Side) -> None:
    tag = uuid.uuid4().hex[:6]
    a, b = new_product(app, user, f"check-fw-{tag}"), new_product(app, user, f"check-hand-{tag}")
    for delta in (1, -1, -2, 3, -5):  # the last one would go below zero: rolled back
        got = framework(AdjustStock(a, delta, "check"), user), hand(AdjustStock(b, delta, "check"), user)
        if type(got[0]) is not type(got[1]) or (isinstance(got[0], Ok) and got[0] != got[1]):
            raise SystemExit(f"MISMATCH on delta {delta}: framework {got[0]!r} vs hand-written {got[1]!r}")
        if isinstance(got[0], Failure) and (got[0].code, got[0].details) != (got[1].code, got[1].details):
            raise SystemExit(f"MISMATCH on delta {delta}: framework {got[0]!r} vs hand-written {got[1]!r}")
    if stored(app, a) != stored(app, b):
        raise SystemExit(f"MISMATCH in stored rows:\n framework    {stored(app, a)}\n hand-written {stored(app, b)}")


def batch(fn: Side, pid: uuid.UUID, user: User, n: int) -> tuple[float, float]:
    """Wall-clock and CPU seconds per call over ``n`` calls (+1, -1, +1, ...: the alert is
    deleted, upserted, ...).  CPU is this process's alone: on a busy machine it is the
    steadier figure of the Python side, but it leaves out the database's work and waits."""
    up, down = AdjustStock(pid, 1, "bench"), AdjustStock(pid, -1, "bench")
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
    if n % 2:  # leave the stock where it started
        fn(down, user)
    return (t1 - t0) / n, (c1 - c0) / n


def measure(label: str, app: App, rounds: int, calls: int, profile: bool) -> dict[str, float]:
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles={"Admin"})
    sides: dict[str, Side] = {"framework": make_framework(app), "hand-written": make_hand_written(app.engine)}
    check_same(app, user, sides["framework"], sides["hand-written"])
    products = {name: new_product(app, user, f"bench-{n}") for n, name in enumerate(sides)}
    for name, fn in sides.items():  # warm-up: pool, statement caches
        batch(fn, products[name], user, max(calls // 4, 2))

    times: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(rounds):
        for name in names[r % 2 :] + names[: r % 2]:  # the sides lead in turn
            wall, used = batch(sides[name], products[name], user, calls)
            times[name].append(wall)
            cpu[name].append(used)

    us = 1e6
    print(f"\n{label}")
    print(f"{'':15} {'wall-clock us/call':>38}   {'CPU us/call (this process)':>28}")
    for name, ts in times.items():
        med, low, high, used = statistics.median(ts) * us, min(ts) * us, max(ts) * us, statistics.median(cpu[name]) * us
        print(f"{name:15} median {med:9.1f}  (min {low:8.1f}, max {high:8.1f})   median {used:9.1f}")
    ratios = [f / h for f, h in zip(times["framework"], times["hand-written"], strict=True)]
    cpu_ratios = [f / h for f, h in zip(cpu["framework"], cpu["hand-written"], strict=True) if h > 0]
    figures = {
        "framework_us": statistics.median(times["framework"]) * us,
        "hand_us": statistics.median(times["hand-written"]) * us,
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "cpu_ratio": statistics.median(cpu_ratios) if cpu_ratios else float("nan"),
    }
    print(
        f"ratio framework/hand-written: wall median {figures['ratio']:.3f} (min {min(ratios):.3f}, "
        f"max {max(ratios):.3f}), CPU median {figures['cpu_ratio']:.3f}; target <= {TARGET}"
    )
    if profile:
        for name, fn in sides.items():
            profiler = cProfile.Profile()
            profiler.enable()
            batch(fn, products[name], user, calls)
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
            print(f"\n--- cProfile, {name}, {calls} calls, by own time ---")
            print(out.getvalue())
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (few rounds, few calls)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--calls", type=int, default=None, help="calls per side per round")
    parser.add_argument("--only", choices=["sqlite", "postgres"], default=None)
    parser.add_argument("--profile", action="store_true", help="cProfile one batch of each side afterwards")
    parser.add_argument(
        "--sqlite-sync",
        choices=["full", "off"],
        default="full",
        help="SQLite's synchronous pragma (full, the default, fsyncs at every commit; off shows the CPU cost)",
    )
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    rounds = args.rounds or (3 if args.quick else 61)
    calls = args.calls or (20 if args.quick else 60)

    print("bench/handler.py — product:adjust-stock, framework vs hand-written SQLAlchemy")
    print(
        f"python {platform.python_version()} ({platform.python_implementation()}), SQLAlchemy {sa.__version__}, "
        f"kumiko-typed {kumiko_typed.__version__}, {rounds} rounds x {calls} calls per side, alternating"
    )
    print(f"{load_note()} before")
    results: dict[str, dict[str, float]] = {}

    if args.only in (None, "sqlite"):
        with tempfile.TemporaryDirectory(prefix="kumiko-bench-") as folder:
            app = App([inventory], database_url=f"sqlite:///{folder}/bench.sqlite3")
            if args.sqlite_sync == "off":
                sa.event.listen(app.engine, "connect", lambda conn, _record: conn.execute("PRAGMA synchronous=OFF"))
            app.create_all()
            try:
                label = f"SQLite {sqlite3.sqlite_version} (temporary file, WAL, synchronous={args.sqlite_sync.upper()})"
                results["sqlite"] = measure(label, app, rounds, calls, args.profile)
            finally:
                app.dispose()

    if args.only in (None, "postgres"):
        with postgres_url() as url:
            if url is None:
                print("\nPostgreSQL: no server binaries found (set KUMIKO_BENCH_POSTGRES_URL); skipped")
            else:
                app = App([inventory], database_url=url)
                app.create_all()
                try:
                    server = app.engine.dialect.server_version_info
                    label = f"PostgreSQL {'.'.join(map(str, server or ()))} (loopback TCP, psycopg 3)"
                    results["postgres"] = measure(label, app, rounds, calls, args.profile)
                finally:
                    app.dispose()

    print(f"\n{load_note()} after")
    write_json(
        args.json, "handler", {"rounds": rounds, "calls": calls, "target": TARGET, **results}, load_before=load_before
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
