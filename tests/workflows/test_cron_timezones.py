"""``cron(expression, timezone=...)`` (docs/workflows.md, "Cron"): the expression is read in
the zone's wall time, as a cron daemon on a machine set to that zone reads it, across both
daylight-saving changes; the ticks (``CronTick.scheduled_at``) stay UTC.  Before, cron was
UTC only: "09:00 in Berlin" moved by an hour twice a year.  Both databases; the ticks are
the same whether one pass fires a day of them or a pass runs every 10 minutes (the cursor
resumes from a tick inside the repeated hour)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from kumiko_typed import App, CronTick, Feature, User, cron
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
BERLIN = ZoneInfo("Europe/Berlin")


def _fired(app_on: AppOn, expression: str, start: datetime, end: datetime, *, every: timedelta | None) -> list[str]:
    """The wall times (Berlin) of the ticks fired between ``start`` and ``end`` (UTC), by one
    pass at ``end`` or a pass each ``every``."""
    f = Feature("zoned")
    flow = f.workflow(
        "tick",
        trigger=cron(expression, timezone="Europe/Berlin"),
        pipeline=f.workflow_pipeline(CronTick).compute("at", lambda c: c.payload.scheduled_at),
    )
    clock = FakeClock(start)
    app = app_on([f], clock=clock)
    assert app.run_worker(once=True)["started"] == 0  # the schedule starts now
    while clock() < end:
        clock.advance(seconds=min((every or end - start).total_seconds(), (end - clock()).total_seconds()))
        app.run_worker(once=True)
    ticks = sorted(r.steps["at"] for r in app.runs(flow.name))
    assert all(t.utcoffset() == timedelta(0) for t in ticks)  # UTC, whatever the schedule's zone
    return [t.astimezone(BERLIN).strftime("%m-%d %H:%M %Z") for t in ticks]


@pytest.mark.parametrize("every", [None, timedelta(minutes=10)], ids=["one pass", "a pass each 10 min"])
def test_a_daily_time_stays_at_its_wall_time_across_the_spring_change(app_on: AppOn, every: timedelta | None) -> None:
    start, end = datetime(2026, 3, 27, 12, tzinfo=UTC), datetime(2026, 3, 31, 12, tzinfo=UTC)
    assert _fired(app_on, "0 9 * * *", start, end, every=every) == [
        "03-28 09:00 CET",
        "03-29 09:00 CEST",
        "03-30 09:00 CEST",
        "03-31 09:00 CEST",
    ]


@pytest.mark.parametrize("every", [None, timedelta(minutes=10)], ids=["one pass", "a pass each 10 min"])
def test_a_time_the_spring_change_skips_fires_once_just_after_it(app_on: AppOn, every: timedelta | None) -> None:
    start, end = datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 30, 12, tzinfo=UTC)
    assert _fired(app_on, "30 2 * * *", start, end, every=every) == [
        "03-29 03:00 CEST",  # 02:30 does not exist that night
        "03-30 02:30 CEST",
    ]


@pytest.mark.parametrize("every", [None, timedelta(minutes=10)], ids=["one pass", "a pass each 10 min"])
def test_a_time_the_autumn_change_repeats_fires_once(app_on: AppOn, every: timedelta | None) -> None:
    start, end = datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 26, 12, tzinfo=UTC)
    assert _fired(app_on, "30 2 * * *", start, end, every=every) == [
        "10-25 02:30 CEST",  # and not again at 02:30 CET, an hour later
        "10-26 02:30 CET",
    ]


@pytest.mark.parametrize("every", [None, timedelta(minutes=10)], ids=["one pass", "a pass each 10 min"])
def test_an_hourly_schedule_fires_each_real_hour_of_the_autumn_change(app_on: AppOn, every: timedelta | None) -> None:
    start = datetime(2026, 10, 24, 22, 30, tzinfo=UTC)  # 00:30 CEST on the 25th
    end = datetime(2026, 10, 25, 3, 30, tzinfo=UTC)  # 04:30 CET
    assert _fired(app_on, "0 * * * *", start, end, every=every) == [
        "10-25 01:00 CEST",
        "10-25 02:00 CEST",
        "10-25 02:00 CET",
        "10-25 03:00 CET",
        "10-25 04:00 CET",
    ]


@pytest.mark.parametrize("every", [None, timedelta(minutes=10)], ids=["one pass", "a pass each 10 min"])
def test_an_hourly_schedule_fires_each_real_hour_of_the_spring_change(app_on: AppOn, every: timedelta | None) -> None:
    """With the hour field ``*`` a skipped wall time does not fire just after the gap, as a
    fixed hour's does: each real hour counts, 23 that day (as a cron daemon runs them)."""
    start = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)  # 00:00 CET on the 29th
    end = datetime(2026, 3, 29, 3, 0, tzinfo=UTC)  # 05:00 CEST
    assert _fired(app_on, "30 * * * *", start, end, every=every) == [
        "03-29 00:30 CET",
        "03-29 01:30 CET",
        "03-29 03:30 CEST",  # 02:30 does not exist, and is not made up at 03:00
        "03-29 04:30 CEST",
    ]


def test_utc_is_the_default_and_unchanged(app_on: AppOn) -> None:
    f = Feature("plain")
    flow = f.workflow(
        "tick",
        trigger=cron("30 2 * * *"),
        pipeline=f.workflow_pipeline(CronTick).compute("at", lambda c: c.payload.scheduled_at),
    )
    clock = FakeClock(datetime(2026, 10, 24, 12, tzinfo=UTC))
    app = app_on([f], clock=clock)
    app.run_worker(once=True)
    clock.advance(days=2)
    app.run_worker(once=True)
    assert sorted(r.steps["at"] for r in app.runs(flow.name)) == [
        datetime(2026, 10, 25, 2, 30, tzinfo=UTC),
        datetime(2026, 10, 26, 2, 30, tzinfo=UTC),
    ]


@pytest.mark.parametrize("zone", ["Europe/Berln", "", "../etc/passwd", "CET+1"])
def test_a_zone_this_machine_does_not_know_is_refused_where_the_trigger_is_made(zone: str) -> None:
    with pytest.raises(ValueError) as raised:
        cron("0 9 * * *", timezone=zone)
    assert str(raised.value) == (
        f"cron timezone {zone!r} is not a time zone this machine knows: give an IANA name such as "
        "'Europe/Berlin' (where the system has no zone database, pip install tzdata)"
    )


def test_the_ticks_are_utc_whatever_zone_the_machine_is_set_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        ticks = cron("0 9 * * *", timezone="Europe/Berlin").ticks(datetime(2026, 3, 28, 12, tzinfo=UTC))
        shown = [next(ticks).isoformat() for _ in range(2)]
    finally:
        monkeypatch.undo()
        time.tzset()
    assert shown == ["2026-03-29T07:00:00+00:00", "2026-03-30T07:00:00+00:00"]


def test_start_workflow_of_a_zoned_cron_workflow_names_its_trigger(app_on: AppOn) -> None:
    f = Feature("zoned_start")
    flow = f.workflow(
        "tick",
        trigger=cron("0 9 * * 1", timezone="Europe/Berlin"),
        pipeline=f.workflow_pipeline(CronTick).compute("at", lambda c: c.payload.scheduled_at),
    )
    app = app_on([f])
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    with pytest.raises(TypeError, match=r"""by its trigger, cron\("0 9 \* \* 1", timezone='Europe/Berlin'\)"""):
        app.start_workflow(flow, CronTick(datetime(2026, 3, 2, 8, tzinfo=UTC)), user=user)
