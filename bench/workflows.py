"""Workflow throughput: start -> complete, runs per second, kumiko-typed vs DBOS Transact.

Run:  python bench/workflows.py [--quick] [--rounds N] [--runs N] [--db sqlite|postgres|both] [--no-dbos]

Two workloads, each on SQLite and on PostgreSQL, one process, one thread:

* ``ten``   -- 10 compute steps (each adds its index to the previous value).
* ``wait0`` -- one 0-second wait, then one compute step.

Sides (all do the same arithmetic and return the same value):

* kumiko        -- a ``WorkflowPipeline`` started with ``app.start_workflow``.  ``ten``
                   completes inside the start (one transaction: the run row inserted,
                   the steps run, the row marked completed).  ``wait0`` suspends at the
                   wait (the start's transaction commits the suspension), then
                   ``app.run_worker(once=True)`` passes resume the due runs (10 per
                   transaction) until every run of the batch completed.
* dbos          -- ``@DBOS.workflow`` calling 10 ``@DBOS.step`` functions (DBOS records
                   each step's output: its unit of durability is the step), called
                   synchronously.  ``wait0``: ``DBOS.sleep(0)`` (a durable sleep) then
                   one step.
* dbos-plain    -- (``ten`` only) the same workflow calling 10 plain functions: no
                   per-step record, which is what a kumiko segment does (its steps are
                   redone from the last suspension after a crash).

A round times ``--runs`` runs of each side back to back, the side order alternating
every round; the figure is runs / elapsed, the median over the rounds, and the median
of the per-round ratios kumiko / dbos.  One untimed warm-up round first.  Each side
has its own fresh database (SQLite files in a temporary folder; on PostgreSQL two
databases on the tests' throw-away server -- ``kumiko_typed.testing.postgres`` -- or on the server
of ``KUMIKO_BENCH_POSTGRES_URL``, in which case both use that database: DBOS keeps its
tables in its own ``dbos`` schema).  Each run's result is checked.

DBOS runs background threads (its queue and notification pollers) while it is
launched, i.e. also while kumiko's side is timed; the load average is printed.
``pip install dbos`` is needed for the DBOS sides (it is not a project dependency);
without it, or with ``--no-dbos``, kumiko-typed is measured alone.  Nothing here
passes or fails on time.
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
from importlib import metadata
from pathlib import Path
from typing import Any

import attrs
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _report import add_json_option, load_average, write_json  # noqa: E402

from kumiko_typed import App, Feature, User, manual  # noqa: E402
from kumiko_typed._tables import workflow_runs  # noqa: E402
from kumiko_typed.testing.postgres import PostgresServer, start_test_postgres, unavailable_reason  # noqa: E402

try:
    from dbos import DBOS

    DBOS_ERROR: str | None = None
except Exception as exc:  # not installed, or does not import here
    DBOS = None
    DBOS_ERROR = f"{type(exc).__name__}: {exc}"

USER = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=2), roles=frozenset())
TEN_RESULT = 45  # 0 + 1 + ... + 9 added to the start value


# --- kumiko-typed -------------------------------------------------------------------------


@attrs.frozen
class Start:
    x: int


feature = Feature("wfbench")
_ten = feature.workflow_pipeline(Start).compute("s0", lambda c: c.payload.x + 0)
for _k in range(1, 10):
    _ten = _ten.compute(f"s{_k}", lambda c, k=_k: c.steps[f"s{k - 1}"] + k)
ten_flow = feature.workflow("ten", trigger=manual(Start), pipeline=_ten)
wait_flow = feature.workflow(
    "wait0",
    trigger=manual(Start),
    pipeline=feature.workflow_pipeline(Start).wait("PT0S").compute("s9", lambda c: c.payload.x + TEN_RESULT),
)


class Kumiko:
    name = "kumiko"

    def __init__(self, url: str) -> None:
        self.app = App([feature], database_url=url)
        self.app.create_all()

    def ten(self, runs: int, base: int) -> None:
        for i in range(runs):
            self.app.start_workflow(ten_flow, Start(base + i), user=USER)

    def wait0(self, runs: int, base: int) -> None:
        for i in range(runs):
            self.app.start_workflow(wait_flow, Start(base + i), user=USER)
        resumed = 0
        while resumed < runs:
            resumed += self.app.run_worker(once=True)["resumed"]

    def check(self, done: int) -> None:
        """Every run so far completed with the right last value (read once, untimed)."""
        with self.app.engine.connect() as conn:
            rows = conn.execute(sa.select(workflow_runs.c.status, workflow_runs.c.state, workflow_runs.c.payload)).all()
        assert len(rows) == done, (len(rows), done)
        for status, state, payload in rows:
            x = self.app.codec.decode(payload).x
            assert status == "completed" and self.app.codec.decode(state["values"])["s9"] == x + TEN_RESULT, status

    def close(self) -> None:
        self.app.dispose()


# --- DBOS Transact ------------------------------------------------------------------------

if DBOS is not None:

    @DBOS.step()
    def add_step(x: int, k: int) -> int:
        return x + k

    def add_plain(x: int, k: int) -> int:
        return x + k

    @DBOS.workflow()
    def dbos_ten(x: int) -> int:
        for k in range(10):
            x = add_step(x, k)
        return x

    @DBOS.workflow()
    def dbos_ten_plain(x: int) -> int:
        for k in range(10):
            x = add_plain(x, k)
        return x

    @DBOS.workflow()
    def dbos_wait0(x: int) -> int:
        DBOS.sleep(0)
        return add_step(x, TEN_RESULT)


class Dbos:
    name = "dbos"

    def __init__(self, url: str) -> None:
        assert DBOS is not None
        DBOS(config={"name": "kumiko-bench", "system_database_url": url, "log_level": "WARNING"})
        DBOS.launch()

    def ten(self, runs: int, base: int) -> None:
        for i in range(runs):
            if dbos_ten(base + i) != base + i + TEN_RESULT:
                raise AssertionError("dbos ten: wrong result")

    def ten_plain(self, runs: int, base: int) -> None:
        for i in range(runs):
            if dbos_ten_plain(base + i) != base + i + TEN_RESULT:
                raise AssertionError("dbos ten (plain): wrong result")

    def wait0(self, runs: int, base: int) -> None:
        for i in range(runs):
            if dbos_wait0(base + i) != base + i + TEN_RESULT:
                raise AssertionError("dbos wait0: wrong result")

    def close(self) -> None:
        assert DBOS is not None
        DBOS.destroy(destroy_registry=False)


# --- measuring ----------------------------------------------------------------------------


def timed(fn: Callable[[int, int], None], runs: int, base: int) -> float:
    started = time.perf_counter()
    fn(runs, base)
    return runs / (time.perf_counter() - started)


def measure(label: str, kumiko_url: str, dbos_url: str | None, rounds: int, runs: int) -> dict[str, Any]:
    kumiko = Kumiko(kumiko_url)
    dbos = Dbos(dbos_url) if dbos_url is not None else None
    sides: dict[str, Callable[[int, int], None]] = {"kumiko ten": kumiko.ten, "kumiko wait0": kumiko.wait0}
    if dbos is not None:
        sides |= {"dbos ten": dbos.ten, "dbos-plain ten": dbos.ten_plain, "dbos wait0": dbos.wait0}
    figures: dict[str, list[float]] = {name: [] for name in sides}
    base = 0
    kumiko_runs = 0
    try:
        for r in range(rounds + 1):  # round 0 warms up
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for name in order:
                rate = timed(sides[name], runs, base)
                base += runs
                if name.startswith("kumiko"):
                    kumiko_runs += runs
                if r:
                    figures[name].append(rate)
            kumiko.check(kumiko_runs)
    finally:
        kumiko.close()
        if dbos is not None:
            dbos.close()
    print(f"\n{label}: {rounds} rounds x {runs} runs per side (runs/s, median [min-max])")
    for name, rates in figures.items():
        print(f"  {name:<16} {statistics.median(rates):8.1f}  [{min(rates):.1f}-{max(rates):.1f}]")
    result: dict[str, Any] = {
        "rounds": rounds,
        "runs": runs,
        "runs_per_s": {name: statistics.median(rates) for name, rates in figures.items()},
        "ratios": {},
    }
    if dbos is not None:
        for work, other in (("ten", "dbos ten"), ("ten", "dbos-plain ten"), ("wait0", "dbos wait0")):
            ratios = [k / d for k, d in zip(figures[f"kumiko {work}"], figures[other], strict=True)]
            print(f"  kumiko {work} / {other}: median ratio {statistics.median(ratios):.2f}")
            result["ratios"][f"kumiko {work} / {other}"] = {
                "median": statistics.median(ratios),
                "min": min(ratios),
                "max": max(ratios),
            }
    return result


def postgres_urls() -> tuple[PostgresServer | None, str, str] | None:
    url = os.environ.get("KUMIKO_BENCH_POSTGRES_URL")
    if url:
        return None, url, url
    server = start_test_postgres()
    if server is None:
        print(f"PostgreSQL: skipped ({unavailable_reason()})")
        return None
    suffix = uuid.uuid4().hex[:8]
    return server, server.create_database(f"bench_k_{suffix}"), server.create_database(f"bench_d_{suffix}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds x 10 runs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=40, help="runs per side per round")
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--no-dbos", action="store_true", help="measure kumiko-typed alone")
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    results: dict[str, Any] = {"target": 3.0}
    rounds, runs = (2, 10) if args.quick else (args.rounds, args.runs)
    use_dbos = DBOS is not None and not args.no_dbos
    dbos_version = "" if DBOS is None else f" {metadata.version('dbos')}"
    print(
        f"kumiko-typed {metadata.version('kumiko-typed')} vs DBOS Transact{dbos_version}; "
        f"CPython {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    if DBOS is None:
        print(f"DBOS Transact not measured: {DBOS_ERROR}")
    if args.db in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="kumiko-wfbench-") as folder:
            results["sqlite"] = measure(
                "SQLite",
                f"sqlite:///{folder}/kumiko.sqlite3",
                f"sqlite:///{folder}/dbos.sqlite3" if use_dbos else None,
                rounds,
                runs,
            )
    if args.db in ("postgres", "both"):
        found = postgres_urls()
        if found is not None:
            server, kumiko_url, dbos_url = found
            try:
                results["postgres"] = measure("PostgreSQL", kumiko_url, dbos_url if use_dbos else None, rounds, runs)
            finally:
                if server is not None:
                    server.stop()
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    write_json(args.json, "workflows", results, load_before=load_before)


if __name__ == "__main__":
    main()
