"""``app.start_workflow`` starts the workflows whose trigger is ``manual``.  A cron
workflow runs once per tick as no tenant, an ``on_event`` one once per appended event as
the event's user: a start by hand would add a second run for a tick (or an event that was
never appended), as the caller's tenant.  Both databases."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from kumiko_typed import App, BootError, CronTick, Feature, Trigger, User, cron, manual, on_event
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 8, 30, tzinfo=UTC)


@attrs.frozen
class Rung:
    ref: int


def test_start_workflow_refuses_a_cron_or_event_workflow_and_stores_nothing(app_on: AppOn, user: User) -> None:
    f: Feature[Any] = Feature("stt")
    f.event(Rung)
    hourly = f.workflow(
        "hourly", trigger=cron("0 * * * *"), pipeline=f.workflow_pipeline(CronTick).compute("at", lambda c: 1)
    )
    rung = f.workflow("rung", trigger=on_event(Rung), pipeline=f.workflow_pipeline(Rung).compute("at", lambda c: 1))
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    app.run_worker(once=True)  # starts the schedule
    tick = CronTick(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    with pytest.raises(TypeError) as cron_refused:
        app.start_workflow(hourly, tick, user=user)
    assert str(cron_refused.value) == (
        'workflow stt:hourly is started by its trigger, cron("0 * * * *"), not by start_workflow '
        "(a worker starts one run per tick); a workflow you start yourself has trigger=manual(...)"
    )
    with pytest.raises(TypeError) as event_refused:
        app.start_workflow(rung, Rung(1), user=user)
    assert str(event_refused.value) == (
        "workflow stt:rung is started by its trigger, on_event(Rung), not by start_workflow "
        "(a worker starts one run per event); a workflow you start yourself has trigger=manual(...)"
    )
    assert app.runs() == []

    clock.advance(minutes=30)  # the 09:00 tick: its one run, of no tenant
    assert app.run_worker(once=True)["started"] == 1
    (run,) = app.runs()
    assert (run.workflow, run.status) == ("stt:hourly", "completed")


@attrs.frozen
class Rang:
    ref: int


#: What a caller without mypy may pass where a class belongs: one run for either event.
EITHER: Any = Rung | Rang


@pytest.mark.parametrize(
    ("trigger", "payload", "problem"),
    [
        (on_event(EITHER), EITHER, "its trigger on_event(...) gives"),
        (manual(EITHER), EITHER, "its trigger manual(...) gives"),
        (on_event(EITHER), Rung, "its trigger on_event(...) gives"),
        (manual(Rung), EITHER, "its pipeline workflow_pipeline(...) takes"),
    ],
    ids=["on_event", "manual", "trigger-only", "pipeline-only"],
)
def test_a_union_for_a_runs_payload_is_a_boot_error_naming_the_workflow(
    trigger: Trigger[Any], payload: Any, problem: str
) -> None:
    """Before, ``feature.workflow`` or ``App(...)`` raised ``AttributeError: 'types.UnionType'
    object has no attribute '__name__'`` (or ``'__qualname__'``) from inside the library."""
    f: Feature[Any] = Feature("stu")
    f.event(Rung)
    f.event(Rang)
    f.workflow("either", trigger=trigger, pipeline=f.workflow_pipeline(payload).compute("at", lambda c: 1))
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    assert raised.value.problems == [
        f"workflow stu:either: {problem} {EITHER!r}, which is no class: a run's payload is one class "
        "(to start on either of two events, register one event class that says which, and append it for both)"
    ]
