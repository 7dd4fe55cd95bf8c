"""What an idle worker pass's claim of due runs costs beside many due runs of a workflow
the App no longer registers (a removed workflow's runs, never resumed, never claimed), and
beside a backlog of its own: the index the claim reads, before and after.

Run:  python bench/due_runs.py [--quick] [--runs N] [--rounds N] [--sqlite] [--json PATH]

Set-up, per database (a fresh SQLite file; a fresh database of the tests' throw-away
PostgreSQL server, ``KUMIKO_TEST_POSTGRES_URL`` to use a running one, analyzed as
autovacuum would): two registered workflows with one run each, and ``--runs`` suspended
runs (default 100,000), 60 % of them due, either of an unregistered workflow ("stranded")
or shared by the two registered ones ("backlog").  Each set-up is made twice: with the
index of before (``status, wake_at``) and with this release's for the dialect (SQLite:
``status, workflow, wake_at``; PostgreSQL keeps ``status, wake_at``).

Measured, the two alternating within each round, which goes first rotating (median over
the rounds, milliseconds, and the median of the per-round ratios now / before): the
claim's ``SELECT`` (the ``_due`` statement a pass runs until it finds none; it reads
the due runs it would resume and persists nothing).  Nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import statistics
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs
import sqlalchemy as sa
from _databases import databases
from _report import add_json_option, alternated, load_average, load_note, write_json

from kumiko_typed import App, Feature, User, manual
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
USER = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=11))


@attrs.frozen
class Nap:
    n: int


feature = Feature("due")
first = feature.workflow("first", trigger=manual(Nap), pipeline=feature.workflow_pipeline(Nap).wait("PT1H"))
second = feature.workflow("second", trigger=manual(Nap), pipeline=feature.workflow_pipeline(Nap).wait("PT2H"))


def _set_up(url: str, runs: int, kind: str, index: str) -> tuple[App, Callable[[], int]]:
    clock = FakeClock(T0)
    app = App([feature], database_url=url, clock=clock)
    app.create_all()
    app.start_workflow(first, Nap(1), user=USER)
    app.start_workflow(second, Nap(2), user=USER)
    with app.engine.begin() as conn:
        row = dict(conn.execute(sa.select(workflow_runs).limit(1)).mappings().one())
        names = ("gone:old",) if kind == "stranded" else ("due:first", "due:second")
        copies = [
            {
                **row,
                "run_id": uuid.uuid4(),
                "trigger_key": f"manual:{i}",
                "workflow": names[i % len(names)],
                "wake_at": T0 + timedelta(seconds=i % 3000),
            }
            for i in range(runs)
        ]
        conn.execute(sa.insert(workflow_runs), copies)
        if index == "before":
            for made in workflow_runs.indexes:
                if made.name and made.name.startswith("kumiko_workflow_runs_due"):
                    made.drop(conn, checkfirst=True)
            conn.exec_driver_sql("CREATE INDEX kumiko_workflow_runs_due ON kumiko_workflow_runs (status, wake_at)")
        conn.exec_driver_sql("ANALYZE kumiko_workflow_runs" if conn.dialect.name == "postgresql" else "SELECT 1")
    clock.advance(timedelta(minutes=30))
    due = app._workflow_engine._due

    def claim() -> int:
        with app.engine.connect() as conn, conn.begin():
            return len(conn.execute(due, {"now": clock()}).all())

    return app, claim


def _measure(urls: Callable[[], str], runs: int, rounds: int, label: str) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    for kind in ("stranded", "backlog"):
        sides = {index: _set_up(urls(), runs, kind, index) for index in ("before", "now")}
        for _app, claim in sides.values():
            claim()  # untimed: the first claim reads the table and the index into the cache
        times, ratios = alternated({index: side[1] for index, side in sides.items()}, rounds, "now", "before")
        before, now = (statistics.median(times[i]) * 1000 for i in ("before", "now"))
        ratio = statistics.median(ratios)
        figures[kind] = {
            "before_ms": round(before, 3),
            "now_ms": round(now, 3),
            "ratio": round(ratio, 4),
            "ratio_min": round(min(ratios), 4),
            "ratio_max": round(max(ratios), 4),
        }
        shown = f"before {before:8.2f} ms   now {now:8.2f} ms   now / before {ratio:6.3f}"
        print(f"{label:10} {kind:8} {runs:>7} runs   {shown}")
        for app, _claim in sides.values():
            app.dispose()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sqlite", action="store_true", help="SQLite only")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2,000 runs, 3 rounds")
    add_json_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.rounds = 2_000, 3
    load_before = load_average()
    labels = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
    with databases("due", sqlite_only=args.sqlite) as urls:
        measured = {db: _measure(url, args.runs, args.rounds, labels[db]) for db, url in urls.items()}
    print(load_note())
    figures = {"runs": args.runs, "rounds": args.rounds, "databases": measured}
    write_json(args.json, "due_runs", figures, load_before=load_before)


if __name__ == "__main__":
    main()
