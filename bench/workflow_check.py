"""The pre-deploy check's speed: suspended runs per second that ``app.check_runs()``
(``kumiko-typed check --against``) decides, on PostgreSQL (or SQLite: ``--sqlite``).

Run:  python bench/workflow_check.py [--quick] [--runs N] [--rounds N] [--sqlite] [--stored-class]

Set-up, on a fresh database of the tests' throw-away server (``KUMIKO_TEST_POSTGRES_URL``
to use a running one), or a fresh SQLite file: one suspended run of each workflow of tests/_deploy_app.py (at
``cool-off``, in a loop at ``item/do/#0/tick``, in the branch ``vip``), started by the v1
code, then copied with SQL until the table holds ``--runs`` suspended runs (default
100,000) in those three shapes.  Their states hold plain values only (their payloads are
``Order`` values, as every payload is a class); with ``--stored-class`` each state's values
also hold an ``Order`` (``order``, a copy of the payload): the check decodes such a state.

Measured, alternating within each round (median over the rounds):

* ``check``: ``check_runs()`` of the ``renamed`` code, which cannot resume a third of
  them (the ``cool-off`` runs: every one of their ids is listed) — streaming every row's
  workflow, path and state, grouping, deciding once per group; then decoding the payload
  of each other run, and its state if it may name a class (with ``--stored-class``);
* ``select``: the baseline, a plain streamed ``SELECT`` of the same columns of the same
  rows, nothing decided: what reading them costs at all.

Figures are runs / wall-clock second in this process; PostgreSQL shares the machine's
CPUs.  Nothing here passes or fails on time.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import sqlalchemy as sa  # noqa: E402
from _deploy_app import T0, USER, Order, make_app  # noqa: E402
from _report import add_json_option, load_average, write_json  # noqa: E402

from kumiko_typed import App  # noqa: E402
from kumiko_typed._tables import workflow_runs  # noqa: E402
from kumiko_typed.testing import FakeClock  # noqa: E402
from kumiko_typed.testing.postgres import start_test_postgres, unavailable_reason  # noqa: E402

COLUMNS = (workflow_runs.c.run_id, workflow_runs.c.workflow, workflow_runs.c.path, workflow_runs.c.state)


def fill(url: str, runs: int, stored_class: bool) -> None:
    """``runs`` suspended runs: three started by the v1 code, the rest SQL copies of them."""
    app = make_app(url, "v1", FakeClock(T0))
    try:
        app.create_all()
        app.start_workflow(app.workflows["dep:job"], Order(4), user=USER)
        app.start_workflow(app.workflows["dep:loop"], Order(1, [1, 2]), user=USER)
        app.start_workflow(app.workflows["dep:nested"], Order(1), user=USER)
        if stored_class:
            _store_payload_in_values(app)
        copies = -(-(runs - 3) // 3)
        if app.engine.dialect.name == "sqlite":
            _copy_in_python(app, copies)
            return
        others = [c.name for c in workflow_runs.c if c.name not in ("run_id", "trigger_key")]
        names = ", ".join(f'"{n}"' for n in others)
        with app.engine.begin() as conn:
            conn.execute(
                sa.text(
                    f"INSERT INTO {workflow_runs.name} (run_id, trigger_key, {names}) "
                    f"SELECT gen_random_uuid(), 'bench:' || g || ':' || r.run_id, {names} "
                    f"FROM {workflow_runs.name} r CROSS JOIN generate_series(1, :n) g"
                ),
                {"n": copies},
            )
            conn.execute(sa.text(f"ANALYZE {workflow_runs.name}"))
    finally:
        app.dispose()


def _store_payload_in_values(app: App) -> None:
    """Each run's stored values also hold its payload, an encoded ``Order``, under ``order``."""
    postgres = app.engine.dialect.name == "postgresql"
    value = (
        "jsonb_set(state, '{values,v,order}', payload)"
        if postgres
        else "json_set(state, '$.values.v.order', json(payload))"
    )
    with app.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {workflow_runs.name} SET state = {value}"))


def _copy_in_python(app: App, copies: int) -> None:
    """SQLite has no ``gen_random_uuid()``: the copies are inserted from here."""
    with app.engine.begin() as conn:
        rows = [dict(r._mapping) for r in conn.execute(sa.select(workflow_runs))]
        batch = [
            {**row, "run_id": uuid.uuid4(), "trigger_key": f"bench:{n}:{row['run_id']}"}
            for n in range(copies)
            for row in rows
        ]
        conn.execute(workflow_runs.insert(), batch)


def timed_check(app: App) -> tuple[float, int]:
    start = time.perf_counter()
    groups = app.check_runs()
    return time.perf_counter() - start, sum(len(g.run_ids) for g in groups)


def timed_select(app: App) -> float:
    start = time.perf_counter()
    stmt = sa.select(*COLUMNS).where(workflow_runs.c.status.in_(("running", "suspended")))
    with app.engine.connect() as conn:
        for _row in conn.execution_options(yield_per=5000).execute(stmt):
            pass
    return time.perf_counter() - start


def measure(url: str, runs: int, rounds: int, stored_class: bool) -> tuple[int, int, list[float], list[float]]:
    """The runs, those reported, and each round's check and select seconds (alternating)."""
    fill(url, runs, stored_class)
    app = make_app(url, "renamed", FakeClock(T0))
    try:
        with app.engine.connect() as conn:
            total = conn.scalar(sa.select(sa.func.count()).select_from(workflow_runs)) or 0
        checks, selects, found = [], [], 0
        for _ in range(rounds):
            seconds, found = timed_check(app)
            checks.append(seconds)
            selects.append(timed_select(app))
    finally:
        app.dispose()
    return total, found, checks, selects


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3,000 runs, 1 round")
    parser.add_argument("--runs", type=int, default=None, help="suspended runs (default 100000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--sqlite", action="store_true", help="on a SQLite file instead of PostgreSQL")
    parser.add_argument("--stored-class", action="store_true", help="each run's values also hold a class value")
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    runs = args.runs or (3000 if args.quick else 100_000)
    rounds = args.rounds or (1 if args.quick else 3)
    database = "SQLite" if args.sqlite else "PostgreSQL"
    stored = "a class value" if args.stored_class else "plain values"
    print(f"workflow check: {runs} suspended runs storing {stored} on {database}, median of {rounds} round(s)")
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs")
    if args.sqlite:
        with tempfile.TemporaryDirectory() as folder:
            total, found, checks, selects = measure(
                f"sqlite:///{folder}/check.sqlite3", runs, rounds, args.stored_class
            )
    else:
        server = start_test_postgres()
        if server is None:
            print(f"  PostgreSQL unavailable: {unavailable_reason()}")
            return 1
        name = f"bench_{uuid.uuid4().hex}"
        try:
            total, found, checks, selects = measure(server.create_database(name), runs, rounds, args.stored_class)
            server.drop_database(name)
        finally:
            server.stop()
    check_rate = total / statistics.median(checks)
    select_rate = total / statistics.median(selects)
    print(f"  {total} runs, {found} reported (the cool-off runs)")
    print(f"  check:  {check_rate:12,.0f} runs/s  ({statistics.median(checks):.2f} s)")
    print(f"  select: {select_rate:12,.0f} runs/s  ({statistics.median(selects):.2f} s, the baseline)")
    figures = {
        "database": database,
        "stored_class": args.stored_class,
        "runs": total,
        "rounds": rounds,
        "runs_per_s": {"check": check_rate, "select": select_rate},
    }
    write_json(args.json, "workflow_check", figures, load_before=load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
