"""A resumed run reads what it stored once: its stored values are decoded once (the check
that the deploy can rebuild them is that decoding, not a second one before it), and the
event that wakes a wait is loaded once (the feed's key lookup loaded it already).  Both
databases.  Counted by classes whose construction is observable: decoding and loading
build each stored value by calling its class."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
from _support import run_info
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)

#: Every value of the classes below built (by a step, by decoding, by loading an event).
BUILT: list[object] = []


@attrs.frozen
class Counted:
    n: int

    def __attrs_post_init__(self) -> None:
        BUILT.append(self)


@attrs.frozen
class Begin:
    n: int


@attrs.frozen
class Await:
    ref: uuid.UUID


@attrs.frozen
class Announce:
    ref: uuid.UUID


@attrs.frozen
class Rang:
    ref: uuid.UUID

    def __attrs_post_init__(self) -> None:
        BUILT.append(self)


@pytest.fixture(autouse=True)
def built() -> Iterator[list[object]]:
    BUILT.clear()
    yield BUILT
    BUILT.clear()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def test_a_resumed_run_decodes_its_stored_values_once(
    app_on: Callable[..., App], clock: FakeClock, user: User, built: list[object]
) -> None:
    """One ``Counted`` in the step values, one in the scope (the loop's item), two as the
    loop's items: a resume builds those four, once each."""
    f: Feature[Any] = Feature("dco")
    pipeline = (
        f.workflow_pipeline(Begin)
        .compute("kept", lambda c: Counted(c.payload.n))
        .for_each(
            "item",
            over=lambda c: [Counted(1), Counted(2)],
            do=lambda b: b.wait("PT1M", name="tick").compute("seen", lambda c: c.scope["item"].n),
        )
        .compute("read", lambda c: c.steps["kept"].n + c.steps["seen"])
    )
    flow = f.workflow("looped", trigger=manual(Begin), pipeline=pipeline)
    app = app_on([f], clock=clock, value_types=[Counted])
    run_id = app.start_workflow(flow, Begin(40), user=user)
    assert run_info(app, run_id).path == "item/do/#0/tick"

    built.clear()
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["resumed"] == 1
    assert sorted(c.n for c in built if isinstance(c, Counted)) == [1, 1, 2, 40]
    assert run_info(app, run_id).path == "item/do/#1/tick"

    built.clear()
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["resumed"] == 1
    assert sorted(c.n for c in built if isinstance(c, Counted)) == [1, 2, 2, 40]
    info = run_info(app, run_id)
    assert (info.status, info.steps["read"]) == ("completed", 42)


class DcoBell(Entity):
    __tablename__ = "dco_bell"
    ref: Mapped[uuid.UUID]


def _waiters(seen: list[object]) -> tuple[Feature[Any], Any, Any]:
    """A handler appending a ``Rang`` and a workflow waiting for it (its step ``same``
    keeps the value the wait was given, in ``seen``)."""
    f: Feature[Any] = Feature("dcw")
    f.entity(DcoBell)
    f.event(Rang)
    announce = f.write_handler(
        "announce",
        f.pipeline(Announce)
        .create("bell", DcoBell, data=lambda c: DcoBell(ref=c.payload.ref))
        .append_event(DcoBell, id=lambda c: c.steps["bell"].id, event=lambda c: Rang(c.payload.ref))
        .return_(lambda c: ok(None)),
    )
    waiter = f.workflow(
        "waiter",
        trigger=manual(Await),
        pipeline=f.workflow_pipeline(Await)
        .wait_for_event("got", Rang, key=lambda c: c.payload.ref, event_key=lambda e: e.ref, timeout="PT1H")
        .compute("same", lambda c: seen.append(c.steps["got"]) is None and c.steps["got"].ref == c.payload.ref),
    )
    return f, announce, waiter


def test_the_event_that_wakes_a_wait_is_loaded_once(
    app_on: Callable[..., App], clock: FakeClock, user: User, built: list[object]
) -> None:
    seen: list[object] = []
    f, announce, waiter = _waiters(seen)
    app = app_on([f], clock=clock)
    ref = uuid.uuid4()
    run_id = app.start_workflow(waiter, Await(ref), user=user)
    assert app.dispatch(announce, Announce(ref), user=user) == Ok(None)

    built.clear()
    assert app.run_worker(once=True)["resumed"] == 1
    loaded = list(built)  # before the comparisons below build a Rang each
    assert loaded == [Rang(ref)]  # once, for its key and for the run alike
    assert len(seen) == 1 and seen[0] is loaded[0]
    info = run_info(app, run_id)
    assert (info.status, info.steps["same"]) == ("completed", True)


def test_runs_woken_by_one_event_each_get_a_value_of_their_own(
    app_on: Callable[..., App], clock: FakeClock, user: User, built: list[object]
) -> None:
    """Two runs waiting for the same key: the key is looked up once, and each run is given
    its own load of the event (a step may change what it is given; another run must not
    see that)."""
    seen: list[object] = []
    f, announce, waiter = _waiters(seen)
    app = app_on([f], clock=clock)
    ref = uuid.uuid4()
    runs = [app.start_workflow(waiter, Await(ref), user=user) for _ in range(2)]
    app.run_worker(once=True)  # arms both waits
    assert app.dispatch(announce, Announce(ref), user=user) == Ok(None)

    built.clear()
    assert app.run_worker(once=True)["resumed"] == 2
    loaded = list(built)  # before the comparisons below build a Rang each
    assert loaded == [Rang(ref), Rang(ref)]
    assert len(seen) == 2 and seen[0] is not seen[1] and all(any(s is one for one in loaded) for s in seen)
    assert [run_info(app, r).status for r in runs] == ["completed", "completed"]
