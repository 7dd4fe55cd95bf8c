"""Durations of ``wait``, ``wait_for_event`` and ``retry`` at their edges: a value of
another type or a negative one is a ``BootError`` naming the step (not a crash when a run
first reaches it, days later); zero waits resume at the next pass; a wake time past the
calendar's end fails the run with a sentence, on both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest

from kumiko_typed import App, BootError, Feature, User, manual
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
AppOn = Callable[..., App]


@attrs.frozen
class Go:
    n: int


def _boom(_c: Any) -> int:
    raise RuntimeError("attempt failed")


def _workflow(name: str, build: Callable[[Any], Any]) -> tuple[Feature[Any], Any]:
    f = Feature(f"wfd_{name}")
    f.event(Go)  # what wait_for_event waits for must be a registered event
    flow = f.workflow("flow", trigger=manual(Go), pipeline=build(f.workflow_pipeline(Go)).compute("done", lambda c: 1))
    return f, flow


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (
            lambda b: b.wait(1.5),
            "step @wait (workflow.wait): wait's duration is a number, which the step does not read as seconds: "
            'write timedelta(seconds=1.5) or "PT1.5S"',
        ),
        (  # the plugin's words at the argument (errors_workflow_waits.py); before, "not bool"
            lambda b: b.wait(True),
            "step @wait (workflow.wait): wait's duration is True, a bool, not a duration: "
            'write timedelta(seconds=...) or an ISO-8601 text such as "PT30S"',
        ),
        (  # before: 'write timedelta(seconds=-5) or "PT-5S"', which the boot refuses again
            lambda b: b.wait(-5),
            "step @wait (workflow.wait): wait's duration is -5, a number, which the step does not read as "
            "seconds, and a duration is never negative: "
            'write timedelta(seconds=...) or an ISO-8601 text such as "PT30S", of zero or more',
        ),
        (lambda b: b.wait(timedelta(seconds=-5)), "wait's duration must not be negative, got -5 seconds"),
        (
            lambda b: b.wait_for_event("got", Go, key=lambda c: 1, event_key=lambda e: 1, timeout=3600),
            "wait_for_event 'got': timeout is a number, which the step does not read as seconds: "
            'write timedelta(seconds=3600) or "PT3600S"',
        ),
        (
            lambda b: b.wait_for_event("got", Go, key=lambda c: 1, event_key=lambda e: 1, timeout=timedelta(-1)),
            "wait_for_event 'got': timeout must not be negative, got -86400 seconds",
        ),
        (
            lambda b: b.retry(times=2, base_delay="PT10S", do=lambda r: r.compute("x", _boom)),
            "retry's base_delay must be a timedelta, not str",
        ),
        (
            lambda b: b.retry(times=2, base_delay=timedelta(seconds=-1), do=lambda r: r.compute("x", _boom)),
            "retry's base_delay must not be negative, got -1 seconds",
        ),
        (
            lambda b: b.retry(times="3", do=lambda r: r.compute("x", _boom)),
            "step @retry (workflow.retry): retry's times must be a whole number of attempts, not str",
        ),
        (
            lambda b: b.retry(times=None, do=lambda r: r.compute("x", _boom)),
            "retry's times must be a whole number of attempts, not NoneType",
        ),
        (
            lambda b: b.retry(times=2.5, do=lambda r: r.compute("x", _boom)),
            "retry's times must be a whole number of attempts, not float",
        ),
        (
            lambda b: b.retry(times=True, do=lambda r: r.compute("x", _boom)),
            "retry's times must be a whole number of attempts, not bool",
        ),
        (
            lambda b: b.retry(times=0, do=lambda r: r.compute("x", _boom)),
            "retry(times=0) must try at least once",
        ),
        (
            lambda b: b.retry(times=3, backoff="exponental", do=lambda r: r.compute("x", _boom)),
            "retry's backoff must be 'exponential' or 'linear', not 'exponental'",
        ),
        (  # before: a bare OverflowError out of App(...), "Python int too large to convert to C int"
            lambda b: b.wait("P99999999999D"),
            "step @wait (workflow.wait): 'P99999999999D' is longer than the longest duration, 999999999 days",
        ),
        (
            lambda b: b.wait_for_event(
                "got", Go, key=lambda c: 1, event_key=lambda e: 1, timeout="PT" + "9" * 400 + "H"
            ),
            "is longer than the longest duration, 999999999 days",
        ),
    ],
    ids=[
        "wait-float",
        "wait-bool",
        "wait-negative-number",
        "wait-negative",
        "timeout-int",
        "timeout-negative",
        "retry-str",
        "retry-negative",
        "times-str",
        "times-none",
        "times-float",
        "times-bool",
        "times-zero",
        "backoff-misspelt",
        "wait-past-timedelta",
        "timeout-past-timedelta",
    ],
)
def test_a_duration_of_another_type_or_negative_is_a_boot_error(
    make_app: AppOn, build: Callable[[Any], Any], problem: str
) -> None:
    """Before, ``wait(5)`` booted and failed each run with ``internal_error``
    (AttributeError); a negative duration or a text ``base_delay`` (``"PT10S" * 2`` is a
    string) were taken as they came; ``times="3"`` or ``None`` raised a bare TypeError out
    of ``App(...)``, and a float or bool ``times`` or a misspelt ``backoff`` booted (the
    misspelt one failed each run at its first failed attempt with ``internal_error``)."""
    name = f"boot{uuid.uuid4().hex[:8]}"
    f, _flow = _workflow(name, build)
    with pytest.raises(BootError, match=f"workflow wfd_{name}:flow") as raised:
        make_app([f])
    assert problem in str(raised.value)


def test_a_zero_wait_resumes_at_the_next_pass(app_on: AppOn, user: User) -> None:
    clock = FakeClock(T0)
    f, flow = _workflow("zero", lambda b: b.wait(timedelta(0)))
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(1), user=user)
    assert getattr(app.get_run(run_id), "status", None) == "suspended"
    assert app.run_worker(once=True)["resumed"] == 1  # due now: the clock did not move
    assert getattr(app.get_run(run_id), "status", None) == "completed"


def test_a_day_is_24_hours_across_a_daylight_saving_change(app_on: AppOn, user: User) -> None:
    """``P1D`` is elapsed time: started at noon in Berlin the day before its clocks go
    forward, the run wakes 24 hours later, at 13:00 there (docs/workflows.md)."""
    start = datetime(2026, 3, 28, 11, 0, tzinfo=UTC)  # 12:00 in Berlin, winter time
    clock = FakeClock(start)
    f, flow = _workflow("dst", lambda b: b.wait("P1D"))
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(1), user=user)
    assert getattr(app.get_run(run_id), "wake_at", None) == start + timedelta(hours=24)


def test_a_pass_resumes_a_run_once_what_it_left_due_again_is_the_next_passs(app_on: AppOn, user: User) -> None:
    """Before, a pass resumed a run again as long as its segment left it due: a loop of
    zero waits (or of wake times already past) ran to its end inside one pass, each
    segment storing all the loop's items again, while the pass's event feed and cron
    waited; a retry without backoff made all its attempts in one pass."""
    clock = FakeClock(T0)
    f, looped = _workflow(
        "again", lambda b: b.for_each("i", over=lambda c: [1, 2, 3], do=lambda d: d.wait(lambda c: c.now - HOUR))
    )
    tried = f.workflow(
        "tried",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).retry(times=3, base_delay=timedelta(0), do=lambda r: r.compute("x", _boom)),
    )
    app = app_on([f], clock=clock)
    loop_id = app.start_workflow(looped, Go(1), user=user)
    retry_id = app.start_workflow(tried, Go(1), user=user)
    seen = []
    for _ in range(3):
        resumed = app.run_worker(once=True)["resumed"]  # each run once, though the clock stands still
        loop, retry = app.get_run(loop_id), app.get_run(retry_id)
        assert loop is not None and retry is not None
        seen.append((resumed, loop.status, loop.path, retry.status, retry.path))
    assert seen == [
        (2, "suspended", "i/do/#1/@wait", "suspended", "@retry/#3"),
        (2, "suspended", "i/do/#2/@wait", "failed", "@retry/#3"),
        (1, "completed", None, "failed", "@retry/#3"),
    ]


def test_a_wait_resolver_that_gives_no_datetime_fails_the_run_saying_so(app_on: AppOn, user: User) -> None:
    """Before, the run's error said only ``raised TypeError``: why was in the log alone."""
    f, flow = _workflow("notime", lambda b: b.wait(lambda c: "2026-03-03"))
    app = app_on([f], clock=FakeClock(T0))
    info = app.get_run(app.start_workflow(flow, Go(1), user=user))
    assert info is not None and info.status == "failed" and info.error is not None
    assert info.error["code"] == "internal_error"
    assert "wait's resolver must return a datetime, not str" in info.error["message"]
    assert info.error["message"].startswith("step @wait workflow.wait raised StepRefused")


def test_a_wait_for_event_timeout_may_be_a_deadline_from_the_run(app_on: AppOn, user: User) -> None:
    """A resolver gives the deadline itself, per run (a trial length from the payload),
    as ``wait``'s may; a naive one is UTC.  Before, only a constant duration booted: the
    subscription port could not wait a customer's own trial."""
    f, flow = _workflow(
        "deadline",
        lambda b: b.wait_for_event(
            "got", Go, key=lambda c: 1, event_key=lambda e: 1, timeout=lambda c: T0 + HOUR * c.payload.n
        ).wait_for_event(
            "again", Go, key=lambda c: 2, event_key=lambda e: 2, timeout=lambda c: datetime(2026, 3, 3, 9, 0)
        ),
    )
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    runs = [app.start_workflow(flow, Go(n), user=user) for n in (1, 3)]
    assert [(i.path, i.wake_at) for i in map(app.get_run, runs) if i is not None] == [
        ("got", T0 + HOUR),
        ("got", T0 + 3 * HOUR),
    ]
    clock.advance(HOUR)
    assert app.run_worker(once=True)["resumed"] == 1
    info = app.get_run(runs[0])
    assert info is not None and (info.path, info.wake_at) == ("again", datetime(2026, 3, 3, 9, 0, tzinfo=UTC))


def test_a_wait_for_event_deadline_that_is_no_datetime_fails_the_run_saying_so(app_on: AppOn, user: User) -> None:
    f, flow = _workflow(
        "notime2", lambda b: b.wait_for_event("got", Go, key=lambda c: 1, event_key=lambda e: 1, timeout=lambda c: 5)
    )
    app = app_on([f], clock=FakeClock(T0))
    info = app.get_run(app.start_workflow(flow, Go(1), user=user))
    assert info is not None and info.status == "failed" and info.error is not None
    assert info.error["code"] == "internal_error"
    assert "wait_for_event 'got': timeout's resolver must return a datetime, not int" in info.error["message"]


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (lambda b: b.wait("P9999999D"), "wait: 9999999 days after 2026-03-02 is past the year 9999"),
        (
            lambda b: b.wait_for_event("got", Go, key=lambda c: 1, event_key=lambda e: 1, timeout=timedelta.max),
            "wait_for_event 'got': timeout: 999999999 days after 2026-03-02 is past the year 9999",
        ),
        (
            lambda b: b.retry(times=9, base_delay=timedelta(days=10**8), do=lambda r: r.compute("x", _boom)),
            "retry attempt 2: 100000000 days after 2026-03-02 is past the year 9999",
        ),
    ],
    ids=["wait", "timeout", "retry-backoff"],
)
def test_a_wake_time_past_the_calendar_fails_the_run_with_a_sentence(
    app_on: AppOn, user: User, build: Callable[[Any], Any], said: str
) -> None:
    """Before, ``OverflowError`` with nothing but the exception's class in the run's error."""
    f, flow = _workflow("far", build)
    app = app_on([f], clock=FakeClock(T0))
    info = app.get_run(app.start_workflow(flow, Go(1), user=user))
    assert info is not None and info.status == "failed" and info.error is not None
    assert info.error["code"] == "internal_error"
    assert said in info.error["message"]


#: 23:00 on the calendar's last day in New York is 04:00 of the year 10000 in UTC.
_LAST_EVENING = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5)))


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (lambda b: b.wait(lambda c: _LAST_EVENING), "wait: 9999-12-31T23:00:00-05:00 is past the year 9999 in UTC"),
        (
            lambda b: b.wait_for_event(
                "got", Go, key=lambda c: 1, event_key=lambda e: 1, timeout=lambda c: _LAST_EVENING
            ),
            "wait_for_event 'got': timeout: 9999-12-31T23:00:00-05:00 is past the year 9999 in UTC",
        ),
    ],
    ids=["wait", "timeout"],
)
def test_a_resolved_time_past_the_calendar_in_utc_fails_the_run_with_a_sentence(
    app_on: AppOn, user: User, build: Callable[[Any], Any], said: str
) -> None:
    """A resolver's aware time within the calendar whose UTC reading is not.  Before, its
    conversion overflowed where the run was stored: ``unstorable_state``, "in the segment
    from step 0: the database refused the run's state: date value out of range" (no
    database had refused anything)."""
    f, flow = _workflow("utc_end", build)
    app = app_on([f], clock=FakeClock(T0))
    info = app.get_run(app.start_workflow(flow, Go(1), user=user))
    assert info is not None and info.status == "failed" and info.error is not None
    assert info.error["code"] == "internal_error"
    assert said in info.error["message"]


def test_a_resolved_time_before_the_calendar_in_utc_is_past_and_resumes_at_the_next_pass(
    app_on: AppOn, user: User
) -> None:
    """Its UTC reading, before the year 1, is long past: due at once (it failed the run)."""
    first_morning = datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=5)))
    f, flow = _workflow("utc_start", lambda b: b.wait(lambda c: first_morning))
    app = app_on([f], clock=FakeClock(T0))
    run_id = app.start_workflow(flow, Go(1), user=user)
    info = app.get_run(run_id)
    assert info is not None and (info.status, info.error) == ("suspended", None)
    assert app.run_worker(once=True)["resumed"] == 1
    info = app.get_run(run_id)
    assert info is not None and (info.status, info.steps["done"]) == ("completed", 1)


def test_a_pass_resumes_every_due_run_though_ten_it_resumed_are_due_again_ahead_of_them(
    app_on: AppOn, user: User
) -> None:
    """A pass reads due runs ten at a time, by wake time.  Before, a batch of only runs
    this pass had resumed (their zero waits left them due again, at the clock's instant)
    ended the pass: with the clock standing still the same ten came first every time, so
    an eleventh run did not move until the ten had finished (the group check-outs of
    examples/ports/hotel.py, twelve at once, stalled so)."""
    clock = FakeClock(T0)
    f, looped = _workflow(
        "many", lambda b: b.for_each("i", over=lambda c: [1, 2, 3], do=lambda d: d.wait(timedelta(0)))
    )
    app = app_on([f], clock=clock)
    runs = [app.start_workflow(looped, Go(n), user=user) for n in range(12)]
    assert app.run_worker(once=True)["resumed"] == 12  # each once, the clock standing still
    paths = [getattr(app.get_run(r), "path", None) for r in runs]
    assert paths == ["i/do/#1/@wait"] * 12
    assert app.run_worker(once=True)["resumed"] == 12
    assert app.run_worker(once=True)["resumed"] == 12
    assert {getattr(app.get_run(r), "status", None) for r in runs} == {"completed"}
