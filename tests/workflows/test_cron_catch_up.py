"""A cron trigger's ``catch_up`` (docs/workflows.md, "Cron"): the ticks missed while no
worker ran that are older than it when a worker finds them are skipped for good, by every
worker; the newest due tick always starts.  Before, a ``* * * * *`` schedule whose
workers were down for 30 days started 43,200 runs, and there was no bound to give."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from _support import together

from kumiko_typed import App, CronTick, Feature, Trigger, cron
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _flow(trigger: Trigger[CronTick]) -> tuple[Feature[str], str]:
    f = Feature("crons")
    flow = f.workflow(
        "bounded",
        trigger=trigger,
        pipeline=f.workflow_pipeline(CronTick).compute("at", lambda c: c.payload.scheduled_at),
    )
    return f, flow.name


def _ticks(app: App, name: str) -> list[datetime]:
    return sorted(r.steps["at"] for r in app.runs(name))


def _drain(app: App) -> int:
    """Worker passes until one starts nothing: how many runs they started."""
    started = 0
    for _ in range(100):
        n = app.run_worker(once=True)["started"]
        if not n:
            return started
        started += n
    raise AssertionError("the worker never ran out of ticks")


def test_a_month_without_workers_starts_only_the_ticks_inside_the_window(
    app_on: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(T0)
    f, name = _flow(cron("* * * * *", catch_up=timedelta(hours=1)))
    app = app_on([f], clock=clock)
    assert app.run_worker(once=True)["started"] == 0  # the schedule starts now
    clock.advance(days=30)  # 43,200 ticks missed
    with caplog.at_level(logging.WARNING, logger="kumiko_typed"):
        assert _drain(app) == 60  # 08:00:30 <= 08:01 ... 09:00 <= 09:00:30
    newest = T0 + timedelta(days=30) - timedelta(seconds=30)
    assert _ticks(app, name) == [newest - m * MINUTE for m in range(59, -1, -1)]
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert skipped == [
        f"cron workflow {name} skipped its ticks from 2026-03-02T09:01:00+00:00 to "
        "2026-04-01T08:00:00+00:00: older than its catch_up=1:00:00 when found"
    ]
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["started"] == 2  # on from the newest: none skipped, none twice
    assert len(app.runs(name)) == 62


def test_a_tick_exactly_catch_up_old_still_starts(app_on: Callable[..., App]) -> None:
    clock = FakeClock(T0)
    f, name = _flow(cron("*/10 * * * *", catch_up=timedelta(minutes=20)))
    app = app_on([f], clock=clock)
    app.run_worker(once=True)
    clock.advance(minutes=59, seconds=30)  # 10:00, due: 09:10 ... 10:00
    assert app.run_worker(once=True)["started"] == 3
    assert [t.strftime("%H:%M") for t in _ticks(app, name)] == ["09:40", "09:50", "10:00"]


def test_a_zero_catch_up_starts_only_the_newest_missed_tick(app_on: Callable[..., App]) -> None:
    """As Celery beat runs a missed schedule once.  A tick found a few seconds late (the
    poll interval) is the newest, so a schedule with workers up misses nothing."""
    clock = FakeClock(T0)
    f, name = _flow(cron("*/5 * * * *", catch_up=timedelta(0)))
    app = app_on([f], clock=clock)
    app.run_worker(once=True)
    clock.advance(minutes=4, seconds=40)  # 09:05:10: 09:05 found late
    assert app.run_worker(once=True)["started"] == 1
    clock.advance(days=3)
    assert app.run_worker(once=True)["started"] == 1
    assert app.run_worker(once=True)["started"] == 0
    assert [t.isoformat() for t in _ticks(app, name)] == ["2026-03-02T09:05:00+00:00", "2026-03-05T09:05:00+00:00"]


def test_the_newest_due_tick_starts_when_none_falls_inside_the_window(app_on: Callable[..., App]) -> None:
    """A daily schedule found six hours late with a one-hour window: today's tick starts
    (the schedule's current run, found late), the days before it are skipped."""
    clock = FakeClock(T0)
    f, name = _flow(cron("0 9 * * *", catch_up=timedelta(hours=1)))
    app = app_on([f], clock=clock)
    app.run_worker(once=True)
    clock.advance(days=5, hours=6)  # 2026-03-07 15:00:30
    assert _drain(app) == 1
    assert [t.isoformat() for t in _ticks(app, name)] == ["2026-03-07T09:00:00+00:00"]
    clock.advance(days=1)
    assert _drain(app) == 1
    assert len(app.runs(name)) == 2


@pytest.mark.parametrize("catch_up", [None, timedelta.max], ids=["none", "max"])
def test_no_catch_up_still_starts_every_missed_tick(app_on: Callable[..., App], catch_up: timedelta | None) -> None:
    """``None``, and a window reaching before year 1 (it bounds nothing, and must not
    overflow each pass), keep every missed tick."""
    clock = FakeClock(T0)
    f, _ = _flow(cron("0 * * * *", catch_up=catch_up))
    app = app_on([f], clock=clock)
    app.run_worker(once=True)
    clock.advance(days=2)
    assert _drain(app) == 48


def test_a_window_in_a_zone_skips_by_real_time_across_the_spring_change(app_on: Callable[..., App]) -> None:
    """Berlin's 2026-03-29 02:00 -> 03:00: ``30 2 * * *`` fires at 03:00 that night (as
    ``Trigger.ticks`` says); the window is measured in real time from the ticks' UTC times."""
    clock = FakeClock(datetime(2026, 3, 20, 12, tzinfo=UTC))
    f, name = _flow(cron("30 2 * * *", timezone="Europe/Berlin", catch_up=timedelta(days=2)))
    app = app_on([f], clock=clock)
    app.run_worker(once=True)
    clock.advance(days=10)  # 2026-03-30 12:00 UTC: the 28th's (01:30 UTC) is older than 2 days
    assert _drain(app) == 2
    assert [t.isoformat() for t in _ticks(app, name)] == ["2026-03-29T01:00:00+00:00", "2026-03-30T00:30:00+00:00"]


def test_racing_workers_skip_the_old_ticks_and_start_each_kept_one_once(app_on: Callable[..., App]) -> None:
    """Three workers find the same outage at once: the ticks older than the window start
    on none of them, each tick inside it on exactly one, and later passes start none of the
    skipped ones."""
    clock = FakeClock(T0)
    f, name = _flow(cron("* * * * *", catch_up=timedelta(minutes=150)))
    workers = [app_on([f], clock=clock) for _ in range(3)]
    together(*[lambda w=w: w.run_worker(once=True) for w in workers])
    clock.advance(days=2)
    answers = together(*[lambda w=w: w.run_worker(once=True) for w in workers])
    started = sum(a["started"] for a in answers if isinstance(a, dict))
    started += sum(_drain(w) for w in workers)
    newest = T0 + timedelta(days=2) - timedelta(seconds=30)
    assert started == 150  # more than one transaction's worth
    assert _ticks(workers[0], name) == [newest - m * MINUTE for m in range(149, -1, -1)]


@pytest.mark.parametrize("given", [timedelta(seconds=-1), 3600, 0, True, "PT1H", 1.5])
def test_a_catch_up_must_be_a_timedelta_of_zero_or_more(given: object) -> None:
    with pytest.raises(ValueError, match=r"cron catch_up must be a timedelta of zero or more, such as") as raised:
        cron("* * * * *", catch_up=given)  # type: ignore[arg-type]
    assert str(raised.value).endswith(f"not {given!r}")
    assert "timedelta(0): only the newest missed tick; None: every missed tick" in str(raised.value)
