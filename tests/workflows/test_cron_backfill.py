"""Cron backfill (docs/workflows.md, "Cron"): ticks missed while no worker ran are each
started once, in transactions of a bounded number of ticks; on PostgreSQL a pass passes
over a cron cursor another worker holds instead of waiting for it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from kumiko_typed import App, CronTick, Feature, cron
from kumiko_typed._workflow_cron import TICKS_PER_TRANSACTION
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)


def _every_minute() -> tuple[Feature[str], str]:
    f = Feature("crons")
    flow = f.workflow(
        "minutely",
        trigger=cron("* * * * *"),
        pipeline=f.workflow_pipeline(CronTick).compute("at", lambda c: c.payload.scheduled_at),
    )
    return f, flow.name


def test_a_backfill_longer_than_one_transaction_starts_every_tick_once(app_on: Callable[..., App]) -> None:
    clock = FakeClock(T0)
    f, name = _every_minute()
    app = app_on([f], clock=clock)
    assert app.run_worker(once=True)["started"] == 0  # the schedule starts now
    missed = 2 * TICKS_PER_TRANSACTION + 7
    clock.advance(minutes=missed)
    assert app.run_worker(once=True)["started"] == missed
    assert app.run_worker(once=True)["started"] == 0
    ticks = sorted(r.steps["at"] for r in app.runs(name))
    assert ticks == [datetime(2026, 3, 2, 9, 1, tzinfo=UTC) + timedelta(minutes=m) for m in range(missed)]
    assert {r.status for r in app.runs(name)} == {"completed"}


def test_a_pass_skips_a_cron_cursor_another_worker_holds(fresh_postgres_url: str) -> None:
    clock = FakeClock(T0)
    f, name = _every_minute()
    app = App([f], database_url=fresh_postgres_url, clock=clock)
    try:
        app.create_all()
        app.run_worker(once=True)
        clock.advance(minutes=3)
        holder = sa.create_engine(fresh_postgres_url)
        try:
            with holder.connect() as conn:
                lock = sa.text("SELECT tick FROM kumiko_consumers WHERE name = :n FOR UPDATE")
                conn.execute(lock, {"n": f"cron:{name}"})
                counts: list[dict[str, int]] = []
                passing = threading.Thread(target=lambda: counts.append(app.run_worker(once=True)))
                passing.start()
                passing.join(timeout=60)
                held = passing.is_alive()
                conn.rollback()  # release the cursor, whatever happened
                passing.join()
            assert not held, "the pass waited for the cursor another worker holds"
            assert counts[0]["started"] == 0
            assert app.run_worker(once=True)["started"] == 3  # released: this worker fires them
        finally:
            holder.dispose()
    finally:
        app.dispose()


def test_a_cron_workflow_registered_again_starts_the_ticks_of_the_time_it_was_removed(
    app_on: Callable[..., App],
) -> None:
    """Its schedule's cursor outlives a deploy without it (docs/workflows.md, "Cron"): the
    worker of the deploy that registers it again starts every tick since its last one,
    as after a time without workers; a new name would start a new schedule."""
    clock = FakeClock(T0)
    f, name = _every_minute()
    app = app_on([f], clock=clock)
    app.run_worker(once=True)
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["started"] == 2
    without = app_on([Feature("crons")], clock=clock)
    clock.advance(minutes=30)
    assert without.run_worker(once=True)["started"] == 0
    assert app_on([_every_minute()[0]], clock=clock).run_worker(once=True)["started"] == 30
    assert len(app.runs(name)) == 32


def test_a_deploy_that_changes_the_expression_goes_on_from_the_last_tick_by_the_new_one(
    app_on: Callable[..., App],
) -> None:
    """The schedule's cursor is its last tick, not its expression: a deploy that changes
    ``every minute`` to ``every ten minutes`` (with workers down meanwhile) starts the new
    expression's ticks after that last tick, none before it again, none of the old one."""
    clock = FakeClock(T0)
    f, name = _every_minute()
    app = app_on([f], clock=clock)
    app.run_worker(once=True)
    clock.advance(minutes=3)
    assert app.run_worker(once=True)["started"] == 3  # 09:01, 09:02, 09:03
    changed = Feature("crons")
    changed.workflow(
        "minutely",
        trigger=cron("*/10 * * * *"),
        pipeline=changed.workflow_pipeline(CronTick).compute("at", lambda c: c.payload.scheduled_at),
    )
    clock.advance(minutes=30)  # 09:33:30
    assert app_on([changed], clock=clock).run_worker(once=True)["started"] == 3
    ticks = sorted(r.steps["at"] for r in app.runs(name))
    assert [t.strftime("%H:%M") for t in ticks] == ["09:01", "09:02", "09:03", "09:10", "09:20", "09:30"]
