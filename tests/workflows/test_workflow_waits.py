"""``wait_for_event`` under other tenants and races (DESIGN §6, §8), on SQLite and
PostgreSQL: a wait is matched only within its run's tenant, and an event that commits
while the run is suspending is not lost."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)


@attrs.frozen
class Await:
    ref: uuid.UUID


@attrs.frozen
class Arrived:
    ref: uuid.UUID
    note: str


@attrs.frozen
class Announce:
    ref: uuid.UUID
    note: str


class WfwParcel(Entity):
    __tablename__ = "wfw_parcel"
    note: Mapped[str]


def _feature(
    key: Callable[[Any], object] = lambda c: c.payload.ref, *, timer_first: bool = False
) -> tuple[Feature[Any], Any, Any]:
    f = Feature("wfw")
    f.entity(WfwParcel)
    f.event(Arrived)
    announce = f.write_handler(
        "announce",
        f.pipeline(Announce)
        .create("parcel", WfwParcel, data=lambda c: WfwParcel(note=c.payload.note))
        .append_event(
            WfwParcel, id=lambda c: c.steps["parcel"].id, event=lambda c: Arrived(c.payload.ref, c.payload.note)
        )
        .return_(lambda c: ok(None)),
    )
    waiter = f.workflow(
        "waiter",
        trigger=manual(Await),
        pipeline=(
            f.workflow_pipeline(Await).wait("PT1M") if timer_first else f.workflow_pipeline(Await)
        ).wait_for_event("got", Arrived, key=key, event_key=lambda e: e.ref, timeout="PT1H"),
    )
    return f, announce, waiter


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


# --- item 1: tenant scoping -------------------------------------------------------------------


def test_an_event_of_another_tenant_with_the_same_key_does_not_wake_the_run(
    app_on: Callable[..., App], clock: FakeClock, make_user: Callable[..., User]
) -> None:
    f, announce, waiter = _feature()
    app = app_on([f], clock=clock)
    alice, mallory = make_user(), make_user()
    ref = uuid.uuid4()
    run_id = app.start_workflow(waiter, Await(ref), user=alice)
    assert app.dispatch(announce, Announce(ref, "from another tenant"), user=mallory) == Ok(None)
    app.run_worker(once=True)
    app.run_worker(once=True)
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.path) == ("suspended", "got")

    # The same key from the run's own tenant (another user of it) wakes it.
    colleague = User(id=uuid.uuid4(), tenant_id=alice.tenant_id)
    assert app.dispatch(announce, Announce(ref, "own tenant"), user=colleague) == Ok(None)
    app.run_worker(once=True)
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.steps["got"]) == ("completed", Arrived(ref, "own tenant"))


def test_an_event_of_another_tenant_committed_before_the_wait_was_armed_does_not_match(
    app_on: Callable[..., App], clock: FakeClock, make_user: Callable[..., User]
) -> None:
    """The look-back of a newly stored wait (events the feed passed before it) also
    compares the tenant."""
    f, announce, waiter = _feature()
    app = app_on([f], clock=clock)
    alice, mallory = make_user(), make_user()
    ref = uuid.uuid4()
    run_id = app.start_workflow(waiter, Await(ref), user=alice)
    assert app.dispatch(announce, Announce(ref, "other"), user=mallory) == Ok(None)
    assert app.dispatch(announce, Announce(ref, "own"), user=alice) == Ok(None)
    app.run_worker(once=True)  # arms the wait, looking back over both events at once
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.steps["got"]) == ("completed", Arrived(ref, "own"))


# --- item 2: no lost wake-up ------------------------------------------------------------------


def _racing_trials(app_on: Callable[..., App], user: User, trials: int, *, resumed: bool = False) -> int:
    """``trials`` runs whose key resolver dispatches the matching event from another thread
    and gives it 50 ms to commit; the number of runs that missed their event.  The runs
    reach the wait at their start, or (``resumed``) when a worker resumes them after a
    timer, many in one transaction."""
    threads: list[threading.Thread] = []
    results: list[object] = []

    def key(c: Any) -> uuid.UUID:
        ref: uuid.UUID = c.payload.ref
        thread = threading.Thread(
            target=lambda: results.append(app.dispatch(announce, Announce(ref, "racing"), user=user))
        )
        threads.append(thread)
        thread.start()
        time.sleep(0.05)
        return ref

    f, announce, waiter = _feature(key, timer_first=resumed)
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    runs = [app.start_workflow(waiter, Await(uuid.uuid4()), user=user) for _ in range(trials)]
    if resumed:
        clock.advance(minutes=1)
        assert app.run_worker(once=True)["resumed"] == trials
    for thread in threads:
        thread.join(30)
    assert results == [Ok(None)] * trials
    app.run_worker(once=True)
    app.run_worker(once=True)
    lost = 0
    for run_id in runs:
        info = app.get_run(run_id)
        assert info is not None
        lost += info.status != "completed"
    return lost


@pytest.mark.parametrize("reached", ["at-start", "on-resume"])
def test_an_event_committed_while_the_run_suspends_wakes_it(
    app_on: Callable[..., App], user: User, reached: str
) -> None:
    assert _racing_trials(app_on, user, 5, resumed=reached == "on-resume") == 0


def test_a_manual_start_on_sqlite_holds_the_write_lock_from_its_first_step(
    make_app: Callable[..., App], user: User
) -> None:
    """Even a segment that has not touched the database yet: a writer racing its first
    step waits for the run's commit, so nothing commits while the segment runs."""
    blocked: list[bool] = []
    racers: list[threading.Thread] = []
    f, announce, _waiter = _feature()

    def race(c: Any) -> bool:
        racers.append(threading.Thread(target=lambda: app.dispatch(announce, Announce(c.payload.ref, "x"), user=user)))
        racers[-1].start()
        racers[-1].join(0.2)
        blocked.append(racers[-1].is_alive())
        return True

    first = f.workflow("first-step", trigger=manual(Await), pipeline=f.workflow_pipeline(Await).compute("raced", race))
    app = make_app([f])
    run_id = app.start_workflow(first, Await(uuid.uuid4()), user=user)
    racers[0].join(30)
    assert blocked == [True]
    info = app.get_run(run_id)
    assert info is not None and info.status == "completed"


@pytest.fixture(autouse=True)
def _no_stray_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    stray = [t for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon]
    assert stray == []
