"""What the App's ``clock=`` returns must be a time-zone-aware datetime, on both databases.

``datetime.now()`` (no zone: this machine's local wall time) was taken: the App stored it
as UTC, so on a machine in Berlin every wait and retry came due an hour late, and the
worker's second pass over a cron workflow raised ``TypeError: can't compare offset-naive
and offset-aware datetimes``, on every pass after.  Now every reading is checked: a
dispatch fails (``internal_error``, nothing written), a start and a worker pass raise a
``TypeError`` that says what to pass."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import attrs
import pytest
import sqlalchemy as sa

from kumiko_typed import App, CronTick, Feature, User, cron, manual, ok
from kumiko_typed._tables import outbox, workflow_runs
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


@attrs.frozen
class Go:
    n: int


f = Feature("clock_values", requires=["mail.send"])
mail = f.write_handler(
    "mail",
    f.pipeline(Go).send_mail(to=["a@example.com"], subject="s", body=lambda c: "b").return_(lambda c: ok(c.now)),
)
flow = f.workflow("flow", trigger=manual(Go), pipeline=f.workflow_pipeline(Go).wait(timedelta(minutes=1)))
f.workflow("tick", trigger=cron("* * * * *"), pipeline=f.workflow_pipeline(CronTick))
two_hours = f.workflow("two_hours", trigger=manual(Go), pipeline=f.workflow_pipeline(Go).wait(timedelta(hours=2)))
BERLIN = ZoneInfo("Europe/Berlin")

NOT_AWARE: list[Callable[[], Any]] = [
    lambda: datetime(2026, 3, 2, 10, 0),  # datetime.now() in Berlin, say
    time.time,
    lambda: date(2026, 3, 2),
]


def _rows(app: App) -> int:
    with app.engine.connect() as conn:
        return sum(conn.scalar(sa.select(sa.func.count()).select_from(t)) or 0 for t in (outbox, workflow_runs))


@pytest.mark.parametrize("clock", NOT_AWARE, ids=["naive", "float", "date"])
def test_a_clock_without_a_time_zone_is_refused_where_it_is_read(app_on: AppOn, clock: Callable[[], Any]) -> None:
    app = app_on([f], clock=clock)
    result = app.dispatch(mail, Go(1), user=USER)
    assert result.code == "internal_error", result  # type: ignore[union-attr]
    with pytest.raises(TypeError, match=r"App\(clock=\.\.\.\) must return a time-zone-aware datetime"):
        app.start_workflow(flow, Go(1), user=USER)
    for _ in range(2):  # the first pass starts the cron schedule, the second compared with it
        with pytest.raises(TypeError, match=r"must return a time-zone-aware datetime, not .*datetime\.now\(UTC\)"):
            app.run_worker(once=True)
    assert _rows(app) == 0


def test_a_clock_in_another_zone_is_read_in_utc(app_on: AppOn) -> None:
    """An aware clock outside UTC is taken as the instant it names, in UTC: ``c.now``, what
    is stored and what is scheduled.  ``app.clock`` is the clock given, unwrapped."""
    tokyo = datetime(2026, 3, 2, 18, 0, tzinfo=timezone(timedelta(hours=9)))
    clock = lambda: tokyo  # noqa: E731
    app = app_on([f], clock=clock)
    assert app.clock is clock  # as given: a test moves app.clock
    now = app.dispatch(mail, Go(1), user=USER)
    assert now == ok(tokyo) and now.data.tzinfo is UTC  # type: ignore[union-attr]
    run_id = app.start_workflow(flow, Go(1), user=USER)
    info = app.get_run(run_id)
    assert info is not None
    assert info.wake_at == datetime(2026, 3, 2, 9, 1, tzinfo=UTC)
    assert [item.next_attempt_at for item in app.outbox()] == [datetime(2026, 3, 2, 9, 0, tzinfo=UTC)]


@pytest.mark.parametrize(
    ("start", "wake"),
    [
        (datetime(2026, 10, 25, 1, 30, tzinfo=BERLIN), datetime(2026, 10, 25, 1, 30, tzinfo=UTC)),
        (datetime(2026, 3, 29, 1, 30, tzinfo=BERLIN), datetime(2026, 3, 29, 2, 30, tzinfo=UTC)),
    ],
    ids=["clocks-go-back", "clocks-go-forward"],
)
def test_a_wait_across_a_daylight_saving_change_lasts_its_duration(
    app_on: AppOn, start: datetime, wake: datetime
) -> None:
    """A clock in Berlin's zone (``datetime.now(ZoneInfo("Europe/Berlin"))``), a two-hour
    wait begun at 01:30 local time on a night of a change.  Before, the wait was added on
    Berlin's wall clock: three hours when the clocks go back, one when they go forward."""
    app = app_on([f], clock=FakeClock(start))
    run_id = app.start_workflow(two_hours, Go(1), user=USER)
    info = app.get_run(run_id)
    assert info is not None
    assert info.wake_at == wake
    assert wake - start == timedelta(hours=2)  # aware minus aware: the real time between
