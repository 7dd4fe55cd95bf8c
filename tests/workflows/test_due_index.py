"""The claim of due runs reads an index that holds the workflow on SQLite: through
``(status, wake_at)`` its planner read every due run of a workflow the App no longer
registers, at every worker pass (bench/due_runs.py measures it).  PostgreSQL keeps
``(status, wake_at)``, whose planner takes the workflow's own index when that pays."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import attrs
import sqlalchemy as sa

from kumiko_typed import App, Feature, manual

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
