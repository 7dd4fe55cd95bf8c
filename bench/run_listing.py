"""What an operator's listing of runs costs: ``app.runs(limit=50)`` and
``app.runs(status="failed")`` against reading every run, on SQLite and PostgreSQL.

Run:  python bench/run_listing.py [--quick] [--runs N] [--rounds N] [--sqlite] [--no-indexes]

Set-up, on a fresh database of the tests' throw-away server (``KUMIKO_TEST_POSTGRES_URL``
to use a running one), or a fresh SQLite file: one completed, one failed and one suspended
run, then copies of them inserted until the table holds ``--runs`` runs (default 20,000):
90 % completed, 5 % failed, 5 % suspended, each started one second after the last.
``--no-indexes`` drops the two indexes the listing reads (``kumiko_workflow_runs_listed``
and ``kumiko_workflow_runs_status_listed``) first: what they buy.

Measured, alternating within each round (median over the rounds, milliseconds):

* ``old runs()``: what ``runs()`` did before it took arguments — every column of
  every row, each decoded into a ``RunInfo``;
* ``runs()``: every run now (the columns a ``RunInfo`` shows);
* ``limit=50``, ``limit=50 deep``: the newest 50; the 50 after the middle run (``before=``);
* ``failed``, ``failed rows``: every failed run, and the same ``SELECT`` without decoding
  (what decoding costs);
* ``failed limit=50``.

PostgreSQL shares the machine's CPUs.  Nothing here passes or fails on time.
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
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from _report import load_note

from kumiko_typed import App, Feature, User, fail, manual
from kumiko_typed._run_listing import RunFilter
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock
from kumiko_typed.testing.postgres import start_test_postgres, unavailable_reason

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
USER = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=11))
#: Of each 20 copies: 18 of the completed run, 1 of the failed, 1 of the suspended.
SHARES = {"completed": 18, "failed": 1, "suspended": 1}
LISTING_INDEXES = ("kumiko_workflow_runs_listed", "kumiko_workflow_runs_status_listed")


@attrs.frozen
class Order:
    n: int
    note: str = "a payload of some size " * 8


def _app(url: str) -> App:
    f = Feature("bench")
    pipeline = f.workflow_pipeline(Order)
    f.workflow("done", trigger=manual(Order), pipeline=pipeline.compute("a", lambda c: c.payload.n).compute("b", str))
    refused = pipeline.guard(lambda c: c.payload.n > 0, otherwise=lambda c: fail("unprocessable", "n must be > 0"))
    f.workflow("boom", trigger=manual(Order), pipeline=refused)
    f.workflow("wait", trigger=manual(Order), pipeline=pipeline.compute("a", lambda c: c.payload.n).wait("P1D"))
    return App([f], database_url=url, clock=FakeClock(T0))


def fill(app: App, runs: int) -> None:
    """Three real runs, then SQL copies of them with ascending ``created_at``."""
    app.create_all()
    for name, n in (("done", 1), ("boom", 0), ("wait", 1)):
        app.start_workflow(app.workflows[f"bench:{name}"], Order(n), user=USER)
    with app.engine.begin() as conn:
        templates = {r.status: dict(r._mapping) for r in conn.execute(sa.select(workflow_runs))}
        conn.execute(sa.delete(workflow_runs))
        plan = [status for status, share in SHARES.items() for _ in range(share)]
        rows = []
        for n in range(runs):
            row = templates[plan[n % len(plan)]]
            at = T0 - timedelta(seconds=runs - n)
            rows.append({**row, "run_id": uuid.uuid4(), "trigger_key": f"bench:{n}", "created_at": at})
        for start in range(0, runs, 5000):
            conn.execute(workflow_runs.insert(), rows[start : start + 5000])


def sides(app: App) -> dict[str, Callable[[], int]]:
    engine = app._workflow_engine
    everything = app.runs()
    middle = everything[len(everything) // 2].run_id

    def old() -> int:
        stmt = sa.select(workflow_runs).order_by(workflow_runs.c.created_at.desc(), workflow_runs.c.run_id)
        with engine.sessions() as session:
            return len([engine.info(r) for r in session.execute(stmt).all()])

    def failed_rows() -> int:
        with engine.sessions() as session:
            return len(session.execute(RunFilter(statuses=("failed",)).select(None)).all())

    return {
        "old runs()": old,
        "runs()": lambda: len(app.runs()),
        "limit=50": lambda: len(app.runs(limit=50)),
        "limit=50 deep": lambda: len(app.runs(limit=50, before=middle)),
        "failed": lambda: len(app.runs(status="failed")),
        "failed rows": failed_rows,
        "failed limit=50": lambda: len(app.runs(status="failed", limit=50)),
    }


def measure(url: str, runs: int, rounds: int, indexes: bool) -> dict[str, tuple[float, int]]:
    """Each side's median milliseconds and the runs it listed."""
    app = _app(url)
    try:
        fill(app, runs)
        with app.engine.begin() as conn:
            for index in () if indexes else LISTING_INDEXES:
                conn.execute(sa.text(f"DROP INDEX {index}"))
            conn.execute(sa.text(f"ANALYZE {workflow_runs.name}"))
        calls = sides(app)
        times: dict[str, list[float]] = {name: [] for name in calls}
        listed: dict[str, int] = {}
        for _ in range(rounds):
            for name, call in calls.items():
                start = time.perf_counter()
                listed[name] = call()
                times[name].append((time.perf_counter() - start) * 1000)
    finally:
        app.dispose()
    return {name: (statistics.median(times[name]), listed[name]) for name in calls}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2,000 runs, 1 round")
    parser.add_argument("--runs", type=int, default=None, help="runs (default 20000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5)")
    parser.add_argument("--sqlite", action="store_true", help="on a SQLite file instead of PostgreSQL")
    parser.add_argument("--no-indexes", action="store_true", help="drop the listing's two indexes first")
    args = parser.parse_args()
    runs = args.runs or (2000 if args.quick else 20_000)
    rounds = args.rounds or (1 if args.quick else 5)
    database = "SQLite" if args.sqlite else "PostgreSQL"
    without = " without its indexes" if args.no_indexes else ""
    print(f"run listing: {runs} runs on {database}{without}, median of {rounds}")
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, {load_note()}")
    figures: dict[str, Any]
    if args.sqlite:
        with tempfile.TemporaryDirectory() as folder:
            figures = measure(f"sqlite:///{folder}/runs.sqlite3", runs, rounds, not args.no_indexes)
    else:
        server = start_test_postgres()
        if server is None:
            print(f"  PostgreSQL unavailable: {unavailable_reason()}")
            return 1
        name = f"bench_{uuid.uuid4().hex}"
        try:
            figures = measure(server.create_database(name), runs, rounds, not args.no_indexes)
            server.drop_database(name)
        finally:
            server.stop()
    for side, (ms, listed) in figures.items():
        print(f"  {side:18} {ms:9.1f} ms  ({listed} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
