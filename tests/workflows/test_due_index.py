"""The claim of due runs reads an index that holds the workflow on SQLite: through
``(status, wake_at)`` its planner read every due run of a workflow the App no longer
registers, at every worker pass (bench/due_runs.py measures it).  PostgreSQL keeps
``(status, wake_at)``, whose planner takes the workflow's own index when that pays."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import sqlalchemy as sa

from kumiko_typed import App, Feature, User, manual
from kumiko_typed._tables import workflow_runs
from kumiko_typed._workflow_engine import BATCH

AppOn = Callable[..., App]


@attrs.frozen
class Nap:
    n: int


f = Feature("di")
nap = f.workflow("nap", trigger=manual(Nap), pipeline=f.workflow_pipeline(Nap).wait("PT1H"))
doze = f.workflow("doze", trigger=manual(Nap), pipeline=f.workflow_pipeline(Nap).wait("PT2H"))


def test_the_due_claim_reads_an_index_by_workflow_on_sqlite(app_on: AppOn, db_url: str) -> None:
    app = app_on([f])
    indexes = {i["name"]: i["column_names"] for i in sa.inspect(app.engine).get_indexes("kumiko_workflow_runs")}
    if db_url.startswith("sqlite"):
        assert indexes["kumiko_workflow_runs_due_by_workflow"] == ["status", "workflow", "wake_at"]
        assert "kumiko_workflow_runs_due" not in indexes
        due = app._workflow_engine._due.params(now=datetime(2026, 1, 1, tzinfo=UTC))
        sql = str(due.compile(app.engine, compile_kwargs={"literal_binds": True}))
        with app.engine.connect() as conn:
            plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
        assert "kumiko_workflow_runs_due_by_workflow" in plan, plan
    else:
        assert indexes["kumiko_workflow_runs_due"] == ["status", "wake_at"]
        assert "kumiko_workflow_runs_due_by_workflow" not in indexes


def _steps_of(app: App, statement: sa.Select[tuple[object, ...]], parameters: dict[str, object]) -> tuple[int, int]:
    """The rows ``statement`` returns and the SQLite VM steps it takes (counted by a
    progress handler every 100 steps): the work of a plan, which its text does not show."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    with app.engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        raw.set_progress_handler(count, 100)
        try:
            found = len(conn.execute(statement, parameters).all())
        finally:
            raw.set_progress_handler(None, 100)
    return found, steps[0]


def test_a_batch_of_the_claim_reads_its_batch_not_the_backlog_on_sqlite(tmp_path: Path) -> None:
    """The claim's order breaks ties (so a pass can read on past the runs it claimed) by
    SQLite's rowid, which ends every entry of the index: by the run id, SQLite sorted
    every due run to take a batch (0.3 ms -> 200 ms beside 60,000, bench/due_runs.py).
    The work of a batch, first or later, is the same beside 200 due runs and 4,000."""
    app = App([f], database_url=f"sqlite:///{tmp_path / 'due.sqlite3'}")
    app.create_all()
    engine = app._workflow_engine
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    runs = sa.table("kumiko_workflow_runs", sa.column("run_id"))
    work = {}
    try:
        app.start_workflow(nap, Nap(0), user=user)
        with app.engine.connect() as conn:
            row = dict(conn.execute(sa.select(workflow_runs)).mappings().one())
        now = {"now": row["wake_at"] + timedelta(days=1)}
        for backlog in (200, 4_000):
            with app.engine.begin() as conn:
                conn.execute(sa.delete(runs))
                copies = [
                    {
                        **row,
                        "run_id": uuid.uuid4(),
                        "trigger_key": f"manual:{n}",
                        "workflow": (nap if n % 2 else doze).name,
                        "wake_at": row["wake_at"] + timedelta(seconds=n % 300),  # ties too
                    }
                    for n in range(backlog)
                ]
                conn.execute(sa.insert(workflow_runs), copies)
            first = _steps_of(app, engine._due, now)
            with app.engine.connect() as conn:
                last = conn.execute(engine._due, now).all()[-1]
            after = {**now, "after_wake": last.wake_at, "after_tie": last.kumiko_tie}
            later = _steps_of(app, engine._due_after, after)
            assert first[0] == later[0] == BATCH
            work[backlog] = (first[1], later[1])
    finally:
        app.dispose()
    assert work[4_000][0] <= work[200][0] * 1.5 + 5 and work[4_000][1] <= work[200][1] * 1.5 + 5, work
