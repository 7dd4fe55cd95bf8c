"""Durable workflows (DESIGN §3.5, §8) on SQLite and PostgreSQL: event waits and their
timeouts, retry exhaustion and backoff, definition fingerprints, the state codec, the
three triggers, scope restoration across a suspension, and the boot checks of tier-3
steps.  Time is a fake clock the tests move (``App(clock=...)``)."""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import run_info
from sqlalchemy.orm import Mapped

from kumiko_typed import (
    App,
    BootError,
    CronTick,
    Entity,
    Failure,
    Feature,
    Ok,
    Saved,
    User,
    cron,
    manual,
    ok,
    on_event,
)
from kumiko_typed._tables import events, workflow_runs, workflow_waits
from kumiko_typed._workflow_feed import EventFeed
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


# --- payloads, events, entities ------------------------------------------------------------


@attrs.frozen
class Start:
    ref: uuid.UUID
    n: int = 0


@attrs.frozen
class Ping:
    ref: uuid.UUID
    note: str


@attrs.frozen
class Pong:
    ref: uuid.UUID
    note: str


@attrs.frozen
class Emit:
    """Handler payload: append a ``Ping`` (or a ``Pong``) to a new thing's stream."""

    ref: uuid.UUID
    note: str
    kind: str = "ping"


@attrs.frozen
class Line:
    sku: str
    qty: Decimal


@attrs.frozen
class Order:
    id: uuid.UUID
    lines: list[Line]
    tags: tuple[str, ...]
    at: datetime


@attrs.frozen
class Extra:
    """Not a payload or an event: storable only when named in ``App(value_types=...)``."""

    label: str
    lines: list[Line]


class Opaque:
    """A class no App registers: it cannot be stored in a run's state."""


class WftThing(Entity):
    __tablename__ = "wft_thing"
    label: Mapped[str]


# --- helpers --------------------------------------------------------------------------------


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands timezone-aware columns back naive (they were stored as UTC)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _feature(name: str = "wf") -> Feature[Any]:
    f = Feature(name)
    f.entity(WftThing)
    f.event(Ping)
    f.event(Pong)
    return f


def _emit_handler(f: Feature[Any]) -> Any:
    return f.write_handler(
        "emit",
        f.pipeline(Emit)
        .create("thing", WftThing, data=lambda c: WftThing(label=f"emit:{c.payload.note}"))
        .append_event(
            WftThing,
            id=lambda c: c.steps["thing"].id,
            event=lambda c: (Ping if c.payload.kind == "ping" else Pong)(c.payload.ref, c.payload.note),
        )
        .return_(lambda c: ok(None)),
    )


def _things(app: App, label: str) -> int:
    with app.engine.connect() as conn:
        table = WftThing.__table__
        return int(conn.scalar(sa.select(sa.func.count()).select_from(table).where(table.c.label == label)) or 0)


def _thing_events(app: App) -> int:
    """Events of the ``wft-thing`` aggregate (every create appends one)."""
    with app.engine.connect() as conn:
        stmt = sa.select(sa.func.count()).select_from(events).where(events.c.aggregate_type == "wft-thing")
        return int(conn.scalar(stmt) or 0)


@pytest.fixture
def user(make_user: Callable[..., User]) -> User:
    return make_user()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


# --- wait_for_event -------------------------------------------------------------------------


def _waiting(f: Feature[Any], *, before: str | None = None) -> Any:
    pipeline = f.workflow_pipeline(Start)
    if before is not None:
        pipeline = pipeline.wait(before)
    pipeline = pipeline.wait_for_event(
        "got", Ping, key=lambda c: c.payload.ref, event_key=lambda e: e.ref, timeout="PT1H"
    ).compute("timed_out", lambda c: c.steps["got"] is None)
    return f.workflow("waiter", trigger=manual(Start), pipeline=pipeline)


def test_wait_for_event_times_out_with_none_and_continues(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    waiter = _waiting(f)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(waiter, Start(uuid.uuid4()), user=user)
    info = run_info(app, run_id)
    assert (info.status, info.path, _utc(info.wake_at)) == ("suspended", "got", T0 + timedelta(hours=1))

    clock.advance(minutes=59, seconds=59)
    app.run_worker(once=True)
    assert run_info(app, run_id).status == "suspended"

    clock.advance(seconds=1)
    assert app.run_worker(once=True)["resumed"] == 1
    info = run_info(app, run_id)
    assert info.status == "completed"
    assert info.steps["got"] is None
    assert info.steps["timed_out"] is True
    with app.engine.connect() as conn:  # the wait row went with the resume
        assert conn.scalar(sa.select(sa.func.count()).select_from(workflow_waits)) == 0


def test_only_an_event_of_the_type_whose_event_key_equals_the_key_wakes_the_run(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    waiter = _waiting(f)
    emit = _emit_handler(f)
    app = app_on([f], clock=clock)
    ref = uuid.uuid4()
    run_id = app.start_workflow(waiter, Start(ref), user=user)

    assert app.dispatch(emit, Emit(uuid.uuid4(), "other key"), user=user) == Ok(None)
    assert app.dispatch(emit, Emit(ref, "same key, other type", kind="pong"), user=user) == Ok(None)
    app.run_worker(once=True)
    assert (run_info(app, run_id).status, run_info(app, run_id).path) == ("suspended", "got")

    clock.advance(minutes=10)
    assert app.dispatch(emit, Emit(ref, "match"), user=user) == Ok(None)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    assert info.status == "completed"
    assert info.steps["got"] == Ping(ref, "match")
    assert info.steps["timed_out"] is False

    # A second matching event finds nothing waiting any more.
    assert app.dispatch(emit, Emit(ref, "late"), user=user) == Ok(None)
    app.run_worker(once=True)
    assert run_info(app, run_id).steps["got"] == Ping(ref, "match")


def test_event_appended_while_suspended_before_the_next_pass_matches(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    waiter = _waiting(f)
    emit = _emit_handler(f)
    app = app_on([f], clock=clock)
    # Worker cursor past everything so far; the run suspends; the event commits; only then a pass.
    assert app.dispatch(emit, Emit(uuid.uuid4(), "noise"), user=user) == Ok(None)
    app.run_worker(once=True)
    ref = uuid.uuid4()
    run_id = app.start_workflow(waiter, Start(ref), user=user)
    assert app.dispatch(emit, Emit(ref, "while suspended"), user=user) == Ok(None)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    assert (info.status, info.steps["got"]) == ("completed", Ping(ref, "while suspended"))


def test_event_appended_while_suspended_matches_even_when_the_feed_lags(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    waiter = _waiting(f)
    emit = _emit_handler(f)
    app = app_on([f], clock=clock)
    ref = uuid.uuid4()
    run_id = app.start_workflow(waiter, Start(ref), user=user)  # no worker pass ever ran
    for note in ("x", "y"):
        assert app.dispatch(emit, Emit(uuid.uuid4(), note), user=user) == Ok(None)
    assert app.dispatch(emit, Emit(ref, "first"), user=user) == Ok(None)
    assert app.dispatch(emit, Emit(ref, "second"), user=user) == Ok(None)
    app.run_worker(once=True)
    assert run_info(app, run_id).steps["got"] == Ping(ref, "first")


def test_event_appended_before_the_run_reached_the_wait_does_not_match(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    waiter = _waiting(f)
    emit = _emit_handler(f)
    app = app_on([f], clock=clock)
    ref = uuid.uuid4()
    # The event commits first, no worker has read it yet; then the run reaches its wait.
    assert app.dispatch(emit, Emit(ref, "too early"), user=user) == Ok(None)
    run_id = app.start_workflow(waiter, Start(ref), user=user)
    app.run_worker(once=True)
    app.run_worker(once=True)
    assert (run_info(app, run_id).status, run_info(app, run_id).path) == ("suspended", "got")

    assert app.dispatch(emit, Emit(ref, "in time"), user=user) == Ok(None)
    app.run_worker(once=True)
    assert run_info(app, run_id).steps["got"] == Ping(ref, "in time")


def test_event_appended_during_an_earlier_wait_does_not_match_the_later_event_wait(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    waiter = _waiting(f, before="PT1M")
    emit = _emit_handler(f)
    app = app_on([f], clock=clock)
    ref = uuid.uuid4()
    run_id = app.start_workflow(waiter, Start(ref), user=user)
    assert run_info(app, run_id).path == "@wait"
    assert app.dispatch(emit, Emit(ref, "during the timer"), user=user) == Ok(None)
    clock.advance(minutes=1)
    app.run_worker(once=True)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    assert (info.status, info.path) == ("suspended", "got")
    clock.advance(hours=1)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    assert (info.status, info.steps["got"], info.steps["timed_out"]) == ("completed", None, True)


@pytest.mark.postgres
def test_an_event_racing_a_due_timeout_resumes_the_run_once(
    fresh_postgres_url: str, clock: FakeClock, user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The due timeout resumes the run (another worker) while the event feed is matching
    the same wait: the feed must not resume it a second time, at its NEXT step.  The other
    worker looks for an answer before it takes the timeout, and the event, which occurred
    in time and has committed, is one: it resumes the run with it."""
    f = _feature()
    pipeline = (
        f.workflow_pipeline(Start)
        .wait_for_event("got", Ping, key=lambda c: c.payload.ref, event_key=lambda e: e.ref, timeout="PT1M")
        .compute("after_event_wait", lambda c: True)
        .wait("PT1H")
        .compute("after_timer", lambda c: True)
    )
    waiter = f.workflow("racer", trigger=manual(Start), pipeline=pipeline)
    emit = _emit_handler(f)
    app = App([f], database_url=fresh_postgres_url, clock=clock)
    other = App([f], database_url=fresh_postgres_url, clock=clock)
    try:
        app.create_all()
        ref = uuid.uuid4()
        run_id = app.start_workflow(waiter, Start(ref), user=user)
        app.run_worker(once=True)  # the feed has seen the wait (armed it) in an earlier pass
        assert app.dispatch(emit, Emit(ref, "racing"), user=user) == Ok(None)
        clock.advance(minutes=2)  # the timeout is due too

        original = EventFeed._event_key
        raced: list[int] = []

        def event_key_then_timeout(self: EventFeed, workflow: str, path: str, event: Any) -> Any:
            # The other worker's timeout pass commits in between (its own look-back for an
            # answer comes here too, in its thread).
            if not raced and threading.current_thread() is threading.main_thread():
                outcome: list[int] = []
                thread = threading.Thread(target=lambda: outcome.append(other._workflow_engine.resume_due()))
                thread.start()
                thread.join(30)
                assert not thread.is_alive(), "the timeout pass blocked behind the event feed"
                raced.append(outcome[0])
            return original(self, workflow, path, event)

        monkeypatch.setattr(EventFeed, "_event_key", event_key_then_timeout)
        app.run_worker(once=True)
        assert raced == [1]
        info = run_info(app, run_id)
        assert (info.status, info.path) == ("suspended", "@wait")  # still in the one-hour timer
        assert info.steps["got"] is not None  # the answer in time won, given by the other worker
        assert info.steps["after_event_wait"] is True
        assert "after_timer" not in info.steps
    finally:
        app.dispose()
        other.dispose()


# --- retry ----------------------------------------------------------------------------------


def test_retry_exhausted_by_a_raising_step_fails_with_its_error_after_times_attempts(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    attempts: list[datetime] = []

    def boom(c: Any) -> None:
        raise RuntimeError(f"boom {len(attempts)}")

    pipeline = (
        f.workflow_pipeline(Start)
        .compute("before", lambda c: "kept")
        .retry(
            times=4,
            base_delay=timedelta(seconds=10),
            do=lambda b: (
                b.compute("attempt", lambda c: attempts.append(c.now) or len(attempts))
                .create("thing", WftThing, data=lambda c: WftThing(label="in-retry"))
                .compute("boom", boom)
            ),
        )
        .compute("after", lambda c: "never")
    )
    flow = f.workflow("crashy", trigger=manual(Start), pipeline=pipeline)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Start(uuid.uuid4()), user=user)

    info = run_info(app, run_id)
    assert (info.status, info.path, _utc(info.wake_at)) == ("suspended", "@retry/#2", T0 + timedelta(seconds=10))
    assert info.steps["before"] == "kept"
    assert info.steps["attempt"] is None  # the failed attempt's values went with it
    assert (_things(app, "in-retry"), _thing_events(app)) == (0, 0)

    clock.advance(seconds=9)
    app.run_worker(once=True)
    assert (len(attempts), run_info(app, run_id).path) == (1, "@retry/#2")

    # exponential: 10 s, then 20 s, then 40 s after the failed attempts 1, 2, 3
    for path, wake in (("@retry/#3", 30), ("@retry/#4", 70)):
        clock.now = _utc(run_info(app, run_id).wake_at)  # type: ignore[assignment]
        app.run_worker(once=True)
        info = run_info(app, run_id)
        assert (info.status, info.path, _utc(info.wake_at)) == ("suspended", path, T0 + timedelta(seconds=wake))

    clock.advance(seconds=39)
    app.run_worker(once=True)
    assert (len(attempts), run_info(app, run_id).path) == (3, "@retry/#4")
    clock.advance(seconds=1)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    assert info.status == "failed"
    assert info.error is not None and info.error["code"] == "internal_error"
    shown = r'step @retry/do/#4/boom compute "boom" raised RuntimeError \(error id [0-9a-f]{32}\)'
    assert re.fullmatch(shown, info.error["message"])
    assert info.wake_at is None
    assert attempts == [T0 + timedelta(seconds=s) for s in (0, 10, 30, 70)]
    assert (_things(app, "in-retry"), _thing_events(app)) == (0, 0)

    clock.advance(days=1)
    app.run_worker(once=True)
    assert len(attempts) == 4
    assert run_info(app, run_id).status == "failed"


def test_retry_exhausted_by_a_failure_keeps_its_code_linear_backoff(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    attempts: list[datetime] = []
    pipeline = f.workflow_pipeline(Start).retry(
        times=4,
        backoff="linear",
        base_delay=timedelta(seconds=10),
        do=lambda b: (
            b.compute("attempt", lambda c: attempts.append(c.now) or len(attempts))
            .create("thing", WftThing, data=lambda c: WftThing(label="in-retry"))
            .get_one("missing", lambda c: sa.select(WftThing).where(WftThing.label == "nowhere"))
        ),
    )
    flow = f.workflow("lookup", trigger=manual(Start), pipeline=pipeline)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Start(uuid.uuid4()), user=user)

    # linear: 10 s, 20 s, 30 s after the failed attempts 1, 2, 3
    for path, wake in (("@retry/#2", 10), ("@retry/#3", 30), ("@retry/#4", 60)):
        info = run_info(app, run_id)
        assert (info.status, info.path, _utc(info.wake_at)) == ("suspended", path, T0 + timedelta(seconds=wake))
        assert _things(app, "in-retry") == 0
        clock.now = T0 + timedelta(seconds=wake)
        app.run_worker(once=True)

    info = run_info(app, run_id)
    assert info.status == "failed"
    assert info.error == {"code": "not_found", "message": 'step "missing": no row matched'}
    assert attempts == [T0 + timedelta(seconds=s) for s in (0, 10, 30, 60)]
    assert (_things(app, "in-retry"), _thing_events(app)) == (0, 0)


def test_retry_of_a_failure_succeeds_once_the_row_exists(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    emit = _emit_handler(f)
    pipeline = f.workflow_pipeline(Start).retry(
        times=2,
        do=lambda b: b.create("thing", WftThing, data=lambda c: WftThing(label="in-retry")).get_one(
            "found", lambda c: sa.select(WftThing).where(WftThing.label == "emit:now")
        ),
    )
    flow = f.workflow("lookup", trigger=manual(Start), pipeline=pipeline)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Start(uuid.uuid4()), user=user)
    assert run_info(app, run_id).path == "@retry/#2"
    assert app.dispatch(emit, Emit(uuid.uuid4(), "now"), user=user) == Ok(None)
    clock.advance(seconds=10)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    assert info.status == "completed"
    assert info.steps["found"].label == "emit:now"
    assert info.steps["thing"].entity.label == "in-retry"
    assert _things(app, "in-retry") == 1  # only the successful attempt's create


# --- definition fingerprints ----------------------------------------------------------------


def _fp_feature(variant: str) -> tuple[Feature[Any], Any]:
    f = _feature("fp")
    if variant == "code":
        pipeline = f.workflow_pipeline(Start).compute("x", lambda c: c.payload.n + 2)
    else:
        pipeline = f.workflow_pipeline(Start).compute("x", lambda c: c.payload.n + 1)
    pipeline = pipeline.wait("PT1M")
    if variant == "step":
        pipeline = pipeline.compute("extra", lambda c: 0)
    if variant == "name":
        pipeline = pipeline.compute("renamed", lambda c: c.steps["x"] * 10)
    else:
        pipeline = pipeline.compute("y", lambda c: c.steps["x"] * 10)
    return f, f.workflow("flow", trigger=manual(Start), pipeline=pipeline)


@pytest.mark.parametrize("variant", ["step", "code", "name"])
def test_resuming_under_a_definition_changed_around_the_wait_completes(
    db_url: str, clock: FakeClock, user: User, variant: str
) -> None:
    """A step appended, a resolver before the wait edited, a step after it renamed: the
    run's wait is still there and every key before it was stored, so it goes on."""
    old, flow = _fp_feature("same")
    app = App([old], database_url=db_url, clock=clock)
    app.create_all()
    run_id = app.start_workflow(flow, Start(uuid.uuid4(), n=4), user=user)
    app.dispose()

    new, _ = _fp_feature(variant)
    app = App([new], database_url=db_url, clock=clock)
    try:
        clock.advance(minutes=1)
        app.run_worker(once=True)
        info = run_info(app, run_id)
        assert (info.status, info.error, info.steps["x"]) == ("completed", None, 5)  # x was stored: not recomputed
        assert info.steps["renamed" if variant == "name" else "y"] == 50
    finally:
        app.dispose()


def test_resuming_under_an_unchanged_definition_in_a_new_app_completes(
    db_url: str, clock: FakeClock, user: User
) -> None:
    old, flow = _fp_feature("same")
    app = App([old], database_url=db_url, clock=clock)
    app.create_all()
    run_id = app.start_workflow(flow, Start(uuid.uuid4(), n=4), user=user)
    app.dispose()

    new, _ = _fp_feature("same")
    app = App([new], database_url=db_url, clock=clock)
    try:
        clock.advance(minutes=1)
        app.run_worker(once=True)
        info = run_info(app, run_id)
        assert (info.status, info.steps["x"], info.steps["y"]) == ("completed", 5, 50)
    finally:
        app.dispose()


def _event_fp_feature(variant: str) -> tuple[Feature[Any], Any, Any]:
    f = _feature("fpe")
    pipeline = f.workflow_pipeline(Start).compute("x", lambda c: 1).compute("z", lambda c: 2)
    if variant != "gone":
        pipeline = pipeline.wait_for_event(
            "got", Ping, key=lambda c: c.payload.ref, event_key=lambda e: e.ref, timeout="PT1H"
        )
    if variant == "step":
        pipeline = pipeline.compute("extra", lambda c: 0)
    return f, f.workflow("flow", trigger=manual(Start), pipeline=pipeline), _emit_handler(f)


@pytest.mark.parametrize("variant", ["step", "gone"])
def test_an_event_wait_under_a_changed_definition_resumes_or_stays_stranded(
    db_url: str, clock: FakeClock, user: User, variant: str
) -> None:
    old, flow, _ = _event_fp_feature("same")
    app = App([old], database_url=db_url, clock=clock)
    app.create_all()
    ref = uuid.uuid4()
    run_id = app.start_workflow(flow, Start(ref), user=user)
    assert run_info(app, run_id).path == "got"
    app.dispose()

    new, _, emit = _event_fp_feature(variant)
    app = App([new], database_url=db_url, clock=clock)
    try:
        assert app.dispatch(emit, Emit(ref, "wake"), user=user) == Ok(None)
        app.run_worker(once=True)  # must not raise
        clock.advance(hours=1)
        app.run_worker(once=True)
        info = run_info(app, run_id)
        if variant == "step":  # a step added after the wait: the event resumed it
            assert (info.status, info.steps["got"], info.steps["extra"]) == ("completed", Ping(ref, "wake"), 0)
        else:
            assert (info.status, info.path, info.steps["z"]) == ("suspended", "got", 2)
            assert info.error == {"code": "stranded", "message": 'step "got" at got no longer exists'}
    finally:
        app.dispose()


_FINGERPRINT_SCRIPT = """
import attrs, functools, sys
from kumiko_typed import Feature, manual
from kumiko_typed._workflow_engine import Definition

@attrs.frozen
class P:
    kind: str

class Rules:
    def allowed(self, c):
        return c.payload.kind in {"alpha", "beta", "gamma", "delta", "epsilon"}

def scaled(factor, c):
    return factor * 2

f = Feature("fp")
pipeline = (
    f.workflow_pipeline(P)
    .compute("known", lambda c: c.payload.kind in {"alpha", "beta", "gamma", "delta", "epsilon"})
    .compute("allowed", Rules().allowed)
    .compute("scaled", functools.partial(scaled, 3))
)
print(Definition(f.workflow("x", trigger=manual(P), pipeline=pipeline), lambda e: e.__name__).fingerprint)
"""


def test_the_fingerprint_is_the_same_in_every_process() -> None:
    """Workers are separate processes: string hashing (set constants) and object
    addresses (bound methods, partials) must not enter the fingerprint."""
    prints = set()
    for seed in ("1", "2", "3", "4"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _FINGERPRINT_SCRIPT], env=env, capture_output=True, text=True, check=True, cwd=ROOT
        )
        prints.add(out.stdout.strip())
    assert len(prints) == 1


def _named(event: type[Any]) -> str:
    """An event's type name, as a registry gives it (these definitions wait for none)."""
    return event.__name__


def test_the_fingerprint_is_of_the_structure_not_the_code() -> None:
    """Resolver code (and so the Python version compiling it) is not in the fingerprint;
    the steps' kinds, names and nesting are."""
    from kumiko_typed._workflow_engine import Definition

    f = Feature("fp")

    def flow(members: Callable[[Any], object], name: str = "k") -> Any:
        return f.workflow("x", trigger=manual(Start), pipeline=f.workflow_pipeline(Start).compute(name, members))

    one = Definition(flow(lambda c: c.payload.n in {1, 2, 3}), _named).fingerprint
    other_code = Definition(flow(lambda c: c.payload.n in {1, 2, 4}), _named).fingerprint
    other_name = Definition(flow(lambda c: c.payload.n in {1, 2, 3}, "j"), _named).fingerprint
    assert one == other_code != other_name


# --- stored state -----------------------------------------------------------------------------


def test_an_unstorable_value_fails_the_run_at_suspension(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    pipeline = (
        f.workflow_pipeline(Start)
        .create("thing", WftThing, data=lambda c: WftThing(label="before-unstorable"))
        .branch(
            when=lambda c: True,
            on_true=lambda b: b.compute("opaque", lambda c: Opaque()).wait("PT1M"),
        )
    )
    flow = f.workflow("opaque", trigger=manual(Start), pipeline=pipeline)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Start(uuid.uuid4()), user=user)
    info = run_info(app, run_id)
    assert info.status == "failed"
    assert info.error is not None
    assert info.error["code"] == "unstorable_state"
    assert info.error["message"].startswith("at step @branch/on_true/@wait: ")
    assert f"{Opaque.__module__}.Opaque cannot be stored" in info.error["message"]
    assert (_things(app, "before-unstorable"), _thing_events(app)) == (0, 0)
    clock.advance(minutes=5)
    app.run_worker(once=True)
    assert run_info(app, run_id).status == "failed"


def test_registered_classes_and_plain_values_round_trip_through_a_suspension(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    f.event(Order)  # an attrs class with nested attrs lists, registered as an event
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    moment = datetime(2026, 3, 2, 10, 30, 15, 123456, tzinfo=UTC)
    seen: list[dict[str, Any]] = []

    def check(c: Any) -> bool:
        saved, misc = c.steps["thing"], c.steps["misc"]
        seen.append(
            {
                "saved": type(saved) is Saved,
                "entity": type(saved.entity) is WftThing,
                "entity_id": saved.entity.id == saved.id,
                "tuple": type(misc["t"]) is tuple,
                "uuid": type(misc["u"]) is uuid.UUID,
                "decimal": type(misc["d"]) is Decimal,
            }
        )
        return True

    pipeline = (
        f.workflow_pipeline(Start)
        .create("thing", WftThing, data=lambda c: WftThing(label="saved"))
        .compute(
            "order",
            lambda c: Order(ident, [Line("a", Decimal("1.50")), Line("b", Decimal("2"))], ("x", "y"), moment),
        )
        .compute("extra", lambda c: Extra("e", [Line("c", Decimal("0.001"))]))
        .compute(
            "misc",
            lambda c: {"u": ident, "at": moment, "d": Decimal("3.14"), "t": (1, "a", None, (2.5, True)), "l": [1, [2]]},
        )
        .compute("empty", lambda c: ())
        .wait("PT1M")
        .compute("checked", check)
    )
    flow = f.workflow("codec", trigger=manual(Start), pipeline=pipeline)
    app = app_on([f], clock=clock, value_types=[Extra])
    run_id = app.start_workflow(flow, Start(uuid.uuid4(), n=7), user=user)
    suspended = run_info(app, run_id)
    assert suspended.status == "suspended"

    clock.advance(minutes=1)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    assert info.status == "completed", info.error
    saved = info.steps["thing"]
    assert isinstance(saved, Saved) and isinstance(saved.entity, WftThing)
    assert (saved.entity.label, saved.version, saved.is_new, saved.event) == ("saved", 1, True, "wft-thing.created")
    assert saved.changes == {"label": "saved"}
    assert saved.entity.id == saved.id and saved.entity.tenant_id == user.tenant_id
    assert saved.entity.created_at == T0
    assert info.steps["order"] == Order(
        ident, [Line("a", Decimal("1.50")), Line("b", Decimal("2"))], ("x", "y"), moment
    )
    assert info.steps["extra"] == Extra("e", [Line("c", Decimal("0.001"))])
    misc = info.steps["misc"]
    assert misc == {"u": ident, "at": moment, "d": Decimal("3.14"), "t": (1, "a", None, (2.5, True)), "l": [1, [2]]}
    assert str(misc["d"]) == "3.14" and misc["at"].tzinfo is not None
    assert info.steps["empty"] == ()
    assert seen == [{"saved": True, "entity": True, "entity_id": True, "tuple": True, "uuid": True, "decimal": True}]


def test_an_attrs_payload_with_nested_lists_round_trips(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    seen: list[object] = []
    pipeline = (
        f.workflow_pipeline(Order)
        .wait("PT1M")
        .compute("lines", lambda c: seen.append(c.payload) or [(type(x).__name__, x.qty) for x in c.payload.lines])
    )
    flow = f.workflow("order", trigger=manual(Order), pipeline=pipeline)
    app = app_on([f], clock=clock)
    order = Order(uuid.uuid4(), [Line("a", Decimal("1.10")), Line("b", Decimal("20"))], ("t",), T0)
    run_id = app.start_workflow(flow, order, user=user)
    clock.advance(minutes=1)
    app.run_worker(once=True)
    assert seen == [order]
    assert run_info(app, run_id).steps["lines"] == [("Line", Decimal("1.10")), ("Line", Decimal("20"))]


def test_a_feature_names_its_own_value_types(app_on: Callable[..., App], clock: FakeClock, user: User) -> None:
    """``Feature(value_types=...)`` stores its classes as ``App(value_types=...)`` does: a
    step value across a wait, and a dispatch's result for its ``idempotency_key``; an App
    with neither refuses both, naming both ways to fix it."""
    carrying = Feature("wfvt", value_types=[Extra])
    plain = Feature("wfvtplain")
    flows, handlers = {}, {}
    for f in (carrying, plain):
        flows[f.name] = f.workflow(
            "keep",
            trigger=manual(Start),
            pipeline=f.workflow_pipeline(Start).compute("extra", lambda c: Extra("e", [])).wait("PT1M"),
        )
        handlers[f.name] = f.write_handler(
            "make", f.pipeline(Start).return_(lambda c: ok(Extra(str(c.payload.n), [Line("l", Decimal("1"))])))
        )
    app = app_on([carrying, plain], clock=clock)
    run_id = app.start_workflow(flows["wfvt"], Start(uuid.uuid4(), n=1), user=user)
    clock.advance(minutes=1)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    assert (info.status, info.steps["extra"]) == ("completed", Extra("e", [])), info
    order = Start(uuid.uuid4(), n=2)
    first = app.dispatch(handlers["wfvt"], order, user=user, idempotency_key="k")
    assert first == Ok(Extra("2", [Line("l", Decimal("1"))])), first
    assert app.dispatch(handlers["wfvt"], order, user=user, idempotency_key="k") == first
    app = app_on([plain], clock=clock)  # the classes an App stores are those of its features
    failed = run_info(app, app.start_workflow(flows["wfvtplain"], Start(uuid.uuid4(), n=1), user=user))
    assert failed.status == "failed" and failed.error is not None, failed
    assert failed.error["code"] == "unstorable_state", failed.error
    assert "in its Feature(value_types=[...]) or App(value_types=[...])" in failed.error["message"]
    refused = app.dispatch(handlers["wfvtplain"], Start(uuid.uuid4(), n=3), user=user, idempotency_key="k")
    assert isinstance(refused, Failure) and refused.code == "unstorable_state", refused


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class NotAttrs:
    """A class the codec cannot store, whoever names it."""

    n: int


def test_value_types_the_codec_cannot_store_are_boot_errors() -> None:
    """A dataclass (or anything but an attrs class or an enum) in a feature's or the
    App's ``value_types`` is refused at boot.  It was dropped unsaid: the feature's
    values failed as ``unstorable_state`` at run time, telling to name the class in
    ``Feature(value_types=[...])``, where it was.  Two features naming one class and an
    enum are fine."""
    f = Feature("wfvtbad", value_types=[NotAttrs, Extra])
    with pytest.raises(BootError) as info:
        App([f, Feature("wfvtsame", value_types=[Extra, Colour])], database_url="sqlite://", value_types=["Extra"])
    assert info.value.problems == [
        f"feature 'wfvtbad': value_types lists {NotAttrs!r}, which cannot be stored; name attrs classes and enums only",
        "App: value_types lists 'Extra', which cannot be stored; name attrs classes and enums only",
    ]
    App(
        [Feature("wfvtok", value_types=[Extra]), Feature("wfvtok2", value_types=[Extra, Colour])],
        database_url="sqlite://",
    ).dispose()


def test_a_stored_class_the_new_app_does_not_register_strands_only_that_run(
    db_url: str, clock: FakeClock, user: User
) -> None:
    """Stranded, not failed (DESIGN §8): a deploy that registers the class again resumes
    it (tests/workflows/test_workflow_classes_across_deploys.py)."""
    f, flow = _extra_feature()
    app = App([f], database_url=db_url, clock=clock, value_types=[Extra])
    app.create_all()
    broken = app.start_workflow(flow, Start(uuid.uuid4(), n=1), user=user)
    app.dispose()

    f2, _ = _extra_feature()
    plain = f2.workflow(
        "plain", trigger=manual(Start), pipeline=f2.workflow_pipeline(Start).wait("PT1M").compute("ok", lambda c: 1)
    )
    app = App([f2], database_url=db_url, clock=clock)  # Extra no longer registered
    try:
        fine = app.start_workflow(plain, Start(uuid.uuid4()), user=user)
        clock.advance(minutes=1)
        app.run_worker(once=True)  # must not raise
        info = run_info(app, broken)
        assert info.status == "suspended"
        assert info.error is not None and info.error["code"] == "stranded"
        assert f"{Extra.__module__}.Extra" in info.error["message"]
        assert run_info(app, fine).status == "completed"
    finally:
        app.dispose()


def test_a_fresh_worker_process_resumes_a_run_holding_an_entity(tmp_path: Path) -> None:
    """Decoding a stored entity in a process that has not queried through the ORM yet
    (its mappers are not configured): tests/_wf_fixture_app.py's job keeps two
    ``Saved[WfwStep]`` values across its waits."""
    import _wf_fixture_app as fixture

    url = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    app = fixture.make_app(url)
    try:
        fixture.create_tables(app)
        run_id = app.start_workflow(fixture.job, fixture.Job(1, "timer"), user=fixture.USER)
        assert run_info(app, run_id).status == "suspended"
        out = subprocess.run(
            [sys.executable, "-c", fixture.WORKER_BOOT, str(ROOT / "tests"), url, "1", "30"],
            check=False,
            input="go\n",
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stderr
        assert '"errors": 0' in out.stdout, out.stdout
        info = run_info(app, run_id)
        assert info.status == "completed", info.error
        assert info.steps["last"].entity.step == "last"
    finally:
        app.dispose()


def _extra_feature() -> tuple[Feature[Any], Any]:
    f = _feature("extra")
    pipeline = f.workflow_pipeline(Start).compute("e", lambda c: Extra("e", [])).wait("PT1M").compute("n", lambda c: 1)
    return f, f.workflow("flow", trigger=manual(Start), pipeline=pipeline)


# --- triggers ---------------------------------------------------------------------------------


def _on_ping(f: Feature[Any]) -> Any:
    pipeline = (
        f.workflow_pipeline(Ping)
        .compute("note", lambda c: c.payload.note)
        .compute("tenant", lambda c: c.user.tenant_id)
    )
    return f.workflow("on-ping", trigger=on_event(Ping), pipeline=pipeline)


def test_on_event_starts_one_run_per_event_across_passes_and_apps(db_url: str, clock: FakeClock, user: User) -> None:
    f = _feature()
    flow = _on_ping(f)
    emit = _emit_handler(f)
    worker_a = App([f], database_url=db_url, clock=clock)
    worker_b = App([f], database_url=db_url, clock=clock)
    try:
        worker_a.create_all()
        for n in range(3):
            assert worker_a.dispatch(emit, Emit(uuid.uuid4(), f"a{n}"), user=user) == Ok(None)
        assert worker_a.dispatch(emit, Emit(uuid.uuid4(), "not a ping", kind="pong"), user=user) == Ok(None)
        started = worker_a.run_worker(once=True)["started"]
        started += worker_b.run_worker(once=True)["started"]
        started += worker_a.run_worker(once=True)["started"]
        assert started == 3
        for n in range(3, 5):
            assert worker_b.dispatch(emit, Emit(uuid.uuid4(), f"a{n}"), user=user) == Ok(None)

        errors: list[BaseException] = []

        def passes(app: App) -> None:
            try:
                for _ in range(3):
                    app.run_worker(once=True)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=passes, args=(w,)) for w in (worker_a, worker_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        runs = worker_a.runs(flow)
        assert sorted(r.steps["note"] for r in runs) == [f"a{n}" for n in range(5)]
        assert {r.status for r in runs} == {"completed"}
        assert {r.steps["tenant"] for r in runs} == {user.tenant_id}
        with worker_a.engine.connect() as conn:
            keys = conn.scalars(sa.select(workflow_runs.c.trigger_key)).all()
        assert len(keys) == len(set(keys)) == 5 and all(k.startswith("event:") for k in keys)
    finally:
        worker_a.dispose()
        worker_b.dispose()


def test_cron_starts_one_run_per_tick_without_backfill(app_on: Callable[..., App], user: User) -> None:
    clock = FakeClock(datetime(2026, 3, 2, 9, 1, 30, tzinfo=UTC))
    f = _feature()
    flow = f.workflow(
        "every-five",
        trigger=cron("*/5 * * * *"),
        pipeline=f.workflow_pipeline(CronTick).compute("at", lambda c: c.payload.scheduled_at),
    )
    app = app_on([f], clock=clock)
    assert app.run_worker(once=True)["started"] == 0  # the first pass only notes the time
    clock.advance(minutes=17)  # 09:18:30: ticks 09:05, 09:10, 09:15 are due
    assert app.run_worker(once=True)["started"] == 3
    assert app.run_worker(once=True)["started"] == 0
    assert app.run_worker(once=True)["started"] == 0
    runs = app.runs(flow)
    ticks = sorted(r.steps["at"] for r in runs)
    assert ticks == [datetime(2026, 3, 2, 9, m, tzinfo=UTC) for m in (5, 10, 15)]
    assert {r.status for r in runs} == {"completed"}
    clock.advance(minutes=1, seconds=30)  # 09:20:00 exactly
    assert app.run_worker(once=True)["started"] == 1
    assert max(r.steps["at"] for r in app.runs(flow)) == datetime(2026, 3, 2, 9, 20, tzinfo=UTC)
    second = App([f], database_url=app.database_url, clock=clock)  # another worker: nothing new
    try:
        assert second.run_worker(once=True)["started"] == 0
    finally:
        second.dispose()
    assert len(app.runs(flow)) == 4


def test_manual_starts_runs_listing_and_lookup(app_on: Callable[..., App], clock: FakeClock, user: User) -> None:
    f = _feature()
    one = f.workflow(
        "one", trigger=manual(Start), pipeline=f.workflow_pipeline(Start).compute("n", lambda c: c.payload.n)
    )
    two = f.workflow("two", trigger=manual(Start), pipeline=f.workflow_pipeline(Start).wait("PT1H"))
    stranger = Feature("elsewhere")
    unregistered = stranger.workflow("x", trigger=manual(Start), pipeline=stranger.workflow_pipeline(Start))
    app = app_on([f], clock=clock)
    ids = []
    for n in range(3):
        ids.append(app.start_workflow(one, Start(uuid.uuid4(), n=n), user=user))
        clock.advance(seconds=1)
    waiting = app.start_workflow(two, Start(uuid.uuid4()), user=user)

    runs = app.runs(one)
    assert [r.run_id for r in runs] == ids[::-1]
    assert [r.steps["n"] for r in runs] == [2, 1, 0]
    assert {(r.workflow, r.status) for r in runs} == {("wf:one", "completed")}
    assert [r.run_id for r in app.runs("wf:one")] == ids[::-1]
    assert [r.run_id for r in app.runs()] == [waiting, *ids[::-1]]
    assert run_info(app, waiting).status == "suspended"
    assert app.get_run(uuid.uuid4()) is None
    assert app.runs("wf:nothing") == []
    with pytest.raises(LookupError, match="not registered"):
        app.start_workflow(unregistered, Start(uuid.uuid4()), user=user)
    with pytest.raises(TypeError, match="takes a Start"):
        app.start_workflow(one, Ping(uuid.uuid4(), "x"), user=user)  # type: ignore[arg-type]


# --- scope across a suspension ----------------------------------------------------------------


def test_a_wait_in_a_loop_in_a_branch_arm_resumes_with_its_scope(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    decisions: list[object] = []

    def decide(c: Any) -> bool:
        decisions.append(c.scope["item"])
        return c.now == T0  # only true at the first evaluation: a resume must not re-decide

    pipeline = (
        f.workflow_pipeline(Start)
        .for_each(
            "item",
            over=lambda c: ["o1", "o2"],
            do=lambda b: b.branch(
                when=decide,
                on_true=lambda t: t.for_each(
                    "item",
                    over=lambda c: [(c.scope["item"], 1), (c.scope["item"], 2)],
                    do=lambda d: d.wait("PT1M").compute(
                        "inner", lambda c: (c.steps["inner"] or ()) + (c.scope["item"],)
                    ),
                ).compute("outer_after", lambda c: (c.steps["outer_after"] or ()) + (c.scope["item"],)),
                on_false=lambda e: e.compute("outer_after", lambda c: (c.steps["outer_after"] or ()) + ("false",)),
            ),
        )
        .compute("scope_after", lambda c: dict(c.scope))
    )
    flow = f.workflow("nested", trigger=manual(Start), pipeline=pipeline)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Start(uuid.uuid4()), user=user)
    paths = []
    while run_info(app, run_id).status == "suspended":
        paths.append(run_info(app, run_id).path)
        clock.advance(minutes=1)
        app.run_worker(once=True)
    assert paths == ["item/do/#0/@branch/on_true/item/do/#0/@wait", "item/do/#0/@branch/on_true/item/do/#1/@wait"]
    info = run_info(app, run_id)
    assert info.status == "completed"
    # o1 took on_true (decided once, at T0, though resumed later); o2 was decided after the clock moved.
    assert decisions == ["o1", "o2"]
    assert info.steps["inner"] == (("o1", 1), ("o1", 2))
    assert info.steps["outer_after"] == ("o1", "false")
    assert info.steps["scope_after"] == {}


def test_a_shadowed_outer_item_is_restored_after_a_suspended_inner_loop(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    pipeline = (
        f.workflow_pipeline(Start)
        .for_each(
            "item",
            over=lambda c: ["o1", "o2"],
            do=lambda b: b.branch(
                when=lambda c: True,
                on_true=lambda t: t.for_each(
                    "item",
                    over=lambda c: [f"{c.scope['item']}.{k}" for k in (1, 2)],
                    do=lambda d: d.wait("PT1M").compute(
                        "inner", lambda c: (c.steps["inner"] or ()) + (c.scope["item"],)
                    ),
                ).compute("outer_after", lambda c: (c.steps["outer_after"] or ()) + (c.scope["item"],)),
            ),
        )
        .compute("scope_after", lambda c: sorted(c.scope))
    )
    flow = f.workflow("shadow", trigger=manual(Start), pipeline=pipeline)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Start(uuid.uuid4()), user=user)
    paths = []
    while run_info(app, run_id).status == "suspended":
        paths.append(run_info(app, run_id).path)
        clock.advance(minutes=1)
        app.run_worker(once=True)
    assert paths == [f"item/do/#{o}/@branch/on_true/item/do/#{i}/@wait" for o in (0, 1) for i in (0, 1)]
    info = run_info(app, run_id)
    assert info.status == "completed"
    assert info.steps["inner"] == ("o1.1", "o1.2", "o2.1", "o2.2")
    assert info.steps["outer_after"] == ("o1", "o2")  # the outer item, restored after each inner loop
    assert info.steps["scope_after"] == []  # and gone after the outer loop


# --- boot ------------------------------------------------------------------------------------


def _problems(feature: Feature[Any]) -> list[str]:
    with pytest.raises(BootError) as info:
        App([feature], database_url="sqlite://")
    return info.value.problems


def test_bad_durations_zero_retries_and_bad_cron_are_boot_errors() -> None:
    f = Feature("bad")
    f.event(Ping)
    f.workflow(
        "waits",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start)
        .wait("P1X")
        .branch(when=lambda c: True, on_true=lambda b: b.wait("PT"))
        .wait_for_event("got", Ping, key=lambda c: 1, event_key=lambda e: 1, timeout="soon")
        .retry(times=0, do=lambda b: b.compute("x", lambda c: 1)),
    )
    f.workflow("ticks", trigger=cron("61 * * * *"), pipeline=f.workflow_pipeline(CronTick))
    duration = "is not an ISO-8601 duration such as 'PT30M', 'P1D' or 'P1DT12H' (years and months are refused)"
    assert _problems(f) == [
        f"workflow bad:waits, step @wait (workflow.wait): 'P1X' {duration}",
        f"workflow bad:waits, step @branch/on_true/@wait (workflow.wait): 'PT' {duration}",
        f"workflow bad:waits, step got (workflow.wait_for_event \"got\"): 'soon' {duration}",
        "workflow bad:waits, step @retry (workflow.retry): retry(times=0) must try at least once",
        "workflow bad:ticks: '61 * * * *' is not a valid cron expression (minute hour day month weekday)",
    ]


def test_a_cron_expression_without_five_fields_is_refused_at_once() -> None:
    with pytest.raises(ValueError) as raised:
        cron("*/5 * * *")
    assert str(raised.value) == "cron expression '*/5 * * *' must have five fields (minute hour day month weekday)"


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 12 31 4,6,9,11 *"])
def test_a_cron_expression_of_a_date_that_never_comes_is_a_boot_error(expression: str) -> None:
    """Before, it booted and every worker pass raised CroniterBadDateError at the cron
    step, so no pass reached the due runs and the outbox after it."""
    f = Feature("never")
    f.workflow("ticks", trigger=cron(expression), pipeline=f.workflow_pipeline(CronTick))
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    assert raised.value.problems == [
        f"workflow never:ticks: {expression!r} names no date that ever comes (February 30th, April 31st)"
    ]
    leap = Feature("leap")  # February 29th comes every four years
    leap.workflow("ticks", trigger=cron("0 0 29 2 *"), pipeline=leap.workflow_pipeline(CronTick))
    App([leap], database_url="sqlite://").dispose()


def test_good_durations_boot() -> None:
    f = Feature("good")
    f.event(Ping)
    f.workflow(
        "waits",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start)
        .wait("P1DT12H")
        .wait(timedelta(seconds=0))
        .wait(lambda c: c.now)
        .wait_for_event("got", Ping, key=lambda c: 1, event_key=lambda e: 1, timeout="P2W")
        .retry(times=1, do=lambda b: b.compute("x", lambda c: 1)),
    )
    f.workflow("ticks", trigger=cron("30 9 * * 1-5"), pipeline=f.workflow_pipeline(CronTick))
    App([f], database_url="sqlite://").dispose()


@pytest.fixture(autouse=True)
def _no_stray_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    stray = [t for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon]
    assert stray == []
