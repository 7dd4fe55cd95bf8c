"""Workflow-worker fixture: the feature that tests/workflows/test_workflow_workers_pg.py runs in
several worker PROCESSES at once, and the worker loop itself.

Every process must import this file under the same module name (``_wf_fixture_app``):
stored payloads name their class by module and qualified name.  So a worker is started as::

    python -c "import sys; sys.path.insert(0, 'tests'); import _wf_fixture_app as m; m.worker_main()" URL N

(that is :data:`WORKER_BOOT`, with the tests folder as its first argument).  It builds
its own App on ``URL``, prints ``ready``, waits for a line on stdin (the start signal),
and calls ``run_worker(once=True)`` until ``N`` runs are finished (completed or failed)
or its deadline passes, then prints ``done <json stats>``.  Worker passes that raise are
counted (``errors``) and retried.

The job (one workflow, ``kind`` picks the suspension):

* ``effect("start")`` and an aggregate ``create`` (unique per run and step),
* ``"timer"``: ``wait(delay seconds)`` on the real clock; ``"event"``: ``wait_for_event``
  of a :class:`Go` with the run's ``n``; ``"retry"``: no wait here,
* ``effect("after_wait")``,
* ``retry(times=3, base_delay=0)`` whose body records ``effect("retry")`` and, for a
  ``"retry"`` job, raises on its first attempt (the attempt is rolled back),
* ``effect("done")`` and a second aggregate ``create``.

``effect(step)`` inserts one row into :data:`effects` (no unique constraint) through
``c.db``: a step whose committed effect appeared twice would show up as two rows.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import uuid
from datetime import timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, User, manual, ok
from kumiko_typed._tables import workflow_runs

WORKFLOW = "wfw:job"
#: ``python -c WORKER_BOOT TESTS_DIR URL N [DEADLINE_S [STALL_MARKER]]`` runs :func:`worker_main`.
WORKER_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); import _wf_fixture_app as m; sys.exit(m.worker_main(sys.argv[2:]))"
)
STEPS = ("start", "after_wait", "retry", "done")

#: Tables the fixture writes outside the App's own (created by :func:`create_tables`).
fixture_metadata = sa.MetaData()
effects = sa.Table(
    "wfw_effects",
    fixture_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Uuid, nullable=False),
    sa.Column("step", sa.String(40), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
)


@attrs.frozen
class Job:
    n: int
    kind: str  # "timer" | "event" | "retry"
    delay: float = 0.0
    stall: bool = False  # the first process to reach "after_wait" sleeps (to be SIGKILLed)


@attrs.frozen
class Go:
    n: int


@attrs.frozen
class Signal:
    n: int


class WfwStep(Entity):
    """One row per (run, step): the aggregate ``create`` of a step that ran twice would
    fail on this unique constraint."""

    __tablename__ = "wfw_step"
    __table_args__ = (sa.UniqueConstraint("run_key", "step", name="wfw_step_once"),)
    run_key: Mapped[str]
    step: Mapped[str]


class WfwSignal(Entity):
    __tablename__ = "wfw_signal"
    n: Mapped[int]


#: Set by a worker: where the "stall" marker file lives (one process stalls, once).
_STALL_MARKER: list[str] = []
#: Failed first attempts of "retry" jobs raised in this process.
flaky_raises: list[int] = []


def _effect(step: str) -> Any:
    def write(c: Any) -> str:
        c.db.execute(sa.insert(effects).values(run_id=c.workflow.run_id, step=step, pid=os.getpid()))
        if step == "after_wait" and c.payload.stall and _STALL_MARKER:
            try:
                fd = os.open(_STALL_MARKER[0], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                print(f"stall {os.getpid()} {c.payload.n}", flush=True)
                time.sleep(120)  # inside the pass's open transaction, until SIGKILLed
        return step

    return write


def _flaky(c: Any) -> str:
    path = c.workflow.path or ""
    if c.payload.kind == "retry" and not path.endswith("/#2"):
        flaky_raises.append(c.payload.n)
        raise RuntimeError(f"job {c.payload.n}: first attempt fails")
    return path


feature = Feature("wfw")
feature.entity(WfwStep)
feature.entity(WfwSignal)
feature.event(Go)

job = feature.workflow(
    "job",
    trigger=manual(Job),
    pipeline=feature.workflow_pipeline(Job)
    .compute("start", _effect("start"))
    .create("first", WfwStep, data=lambda c: WfwStep(run_key=str(c.workflow.run_id), step="first"))
    .branch(
        when=lambda c: c.payload.kind == "event",
        on_true=lambda b: b.wait_for_event(
            "go", Go, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout=timedelta(minutes=10)
        ),
        on_false=lambda b: b.wait(lambda c: c.now + timedelta(seconds=c.payload.delay)),
    )
    .compute("after_wait", _effect("after_wait"))
    .retry(
        times=3,
        base_delay=timedelta(seconds=0),
        do=lambda b: b.compute("retry", _effect("retry")).compute("attempt_path", _flaky),
    )
    .compute("done", _effect("done"))
    .create("last", WfwStep, data=lambda c: WfwStep(run_key=str(c.workflow.run_id), step="last")),
)

go = feature.write_handler(
    "go",
    feature.pipeline(Signal)
    .create("signal", WfwSignal, data=lambda c: WfwSignal(n=c.payload.n))
    .append_event(WfwSignal, id=lambda c: c.steps["signal"].id, event=lambda c: Go(c.payload.n))
    .return_(lambda c: ok(c.payload.n)),
)

USER = User(id=uuid.UUID(int=7), tenant_id=uuid.UUID(int=8), roles=frozenset())


def make_app(url: str) -> App:
    return App([feature], database_url=url)


def create_tables(app: App) -> None:
    app.create_all()
    fixture_metadata.create_all(app.engine)


def finished(app: App) -> int:
    with app.engine.connect() as conn:
        stmt = sa.select(sa.func.count()).select_from(workflow_runs)
        stmt = stmt.where(workflow_runs.c.status.in_(["completed", "failed"]))
        return int(conn.scalar(stmt) or 0)


def worker_main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    url, expected = args[0], int(args[1])
    deadline = time.monotonic() + float(args[2] if len(args) > 2 else 60)
    if len(args) > 3:
        _STALL_MARKER.append(args[3])
    app = make_app(url)
    stats = {"passes": 0, "started": 0, "resumed": 0, "errors": 0, "flaky": 0}
    errors: list[str] = []
    try:
        finished(app)  # connect before announcing
        print("ready", flush=True)
        sys.stdin.readline()  # the caller's start signal: every worker starts at once
        while time.monotonic() < deadline:
            try:
                counts = app.run_worker(once=True)
            except Exception as exc:
                stats["errors"] += 1
                errors.append("".join(traceback.format_exception(exc)).strip()[-1500:])
                continue
            stats["passes"] += 1
            stats["started"] += counts["started"]
            stats["resumed"] += counts["resumed"]
            if finished(app) >= expected:
                break
            if not counts["started"] and not counts["resumed"]:
                time.sleep(0.02)
        stats["flaky"] = len(flaky_raises)
        print("done " + json.dumps({**stats, "error_messages": errors[:5]}), flush=True)
    finally:
        app.dispose()
    return 0
