"""Deploys and stored runs the resume rule must survive (docs/workflows.md, "Changing a
workflow that has suspended runs"), on SQLite and PostgreSQL: a wait whose event class
changed, a stored state or path of the wrong shape, an unregistered awaited event, a
``fill=`` function that raises.  ``app.check_runs()`` and the worker decide by one rule,
so they agree on every run.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import run_info
from sqlalchemy.orm import Mapped

from kumiko_typed import App, BootError, Entity, Feature, Ok, User, manual, ok
from kumiko_typed._tables import events, workflow_runs, workflow_waits
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=11))


@attrs.frozen
class Start:
    ref: uuid.UUID
    items: list[int] = attrs.field(factory=list)


@attrs.frozen
class Paid:
    ref: uuid.UUID


@attrs.frozen
class Shipped:
    """Of the same shape as ``Paid``: a ``Paid`` row loads as a ``Shipped`` without error."""

    ref: uuid.UUID


def _paid_with_amount() -> type[Any]:
    """``Paid`` after a deploy added a field without a default: a stored ``Paid`` no
    longer loads as it."""
    cls = attrs.make_class("Paid", {"ref": attrs.field(type=uuid.UUID), "amount": attrs.field(type=int)}, frozen=True)
    cls.__module__ = __name__
    cls.__qualname__ = "Paid"
    return cls


PAID_WITH_AMOUNT = _paid_with_amount()


def _paid_v2() -> type[Any]:
    """``Paid`` at schema version 2, with an upcaster from 1: a deploy before it cannot
    load the events a deploy with it writes."""
    cls = attrs.make_class(
        "Paid", {"ref": attrs.field(type=uuid.UUID), "amount": attrs.field(type=int, default=5)}, frozen=True
    )
    cls.__module__ = __name__
    cls.__qualname__ = "Paid"
    return cls


PAID_V2 = _paid_v2()


class DpeBox(Entity):
    __tablename__ = "dpe_box"
    note: Mapped[str]


def feature(version: str, fill: Callable[[Any], object] | None = None) -> Feature[Any]:
    """The workflows as deployed in ``version`` (``v1``: what the runs start under).

    ``shipped``: ``waiter`` waits for ``Shipped`` instead of ``Paid``, same step name;
    ``paid-amount``: ``Paid`` gained a field without a default; ``paid-v2``: ``Paid``
    at schema version 2;
    ``priced``: ``napper`` computes ``price`` before its wait, filled by ``fill``."""
    f: Feature[Any] = Feature("dpe")
    f.entity(DpeBox)
    paid = {"paid-amount": PAID_WITH_AMOUNT, "paid-v2": PAID_V2}.get(version, Paid)
    if version == "paid-v2":
        f.event(paid, version=2, upcasters={1: lambda p: {**p, "amount": 0}})
    else:
        f.event(paid)
    f.event(Shipped)
    for name, cls in (("pay", paid), ("ship", Shipped)):
        f.write_handler(
            name,
            f.pipeline(Start)
            .create("box", DpeBox, data=lambda c: DpeBox(note="x"))
            .append_event(DpeBox, id=lambda c: c.steps["box"].id, event=lambda c, cls=cls: cls(c.payload.ref))
            .return_(lambda c: ok(None)),
        )
    awaited = Shipped if version == "shipped" else paid
    f.workflow(
        "waiter",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start)
        .wait_for_event("got", awaited, key=lambda c: c.payload.ref, event_key=lambda e: e.ref, timeout="PT1H")
        .return_(lambda c: ok(type(c.steps["got"]).__name__)),
    )
    napper: Any = f.workflow_pipeline(Start).compute("quote", lambda c: 10)
    if version == "priced":
        napper = napper.compute("price", lambda c: c.steps["quote"] + 1)
    f.workflow(
        "napper",
        trigger=manual(Start),
        pipeline=napper.wait("PT1M", name="nap").return_(lambda c: ok(c.steps.get("price"))),
        fill={"price": fill} if fill is not None else None,
    )
    f.workflow(
        "looper",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start)
        .for_each("item", over=lambda c: c.payload.items, do=lambda b: b.wait("PT1M", name="tick"))
        .return_(lambda c: ok(None)),
    )
    f.workflow(
        "retrier",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start).retry(
            times=3,
            base_delay=timedelta(minutes=1),
            do=lambda b: b.get_one("none", lambda c: sa.select(DpeBox).where(DpeBox.note == "never")),
            name="again",
        ),
    )
    return f


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def deploy(db_url: str, clock: FakeClock) -> Iterator[Callable[..., App]]:
    """``deploy(version, fill=None)``: an App of that version on the one database."""
    apps: list[App] = []

    def build(version: str, fill: Callable[[Any], object] | None = None) -> App:
        app = App([feature(version, fill)], database_url=db_url, clock=clock)
        if not apps:
            app.create_all()
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.dispose()


def _start(app: App, workflow: str, items: list[int] | None = None, user: User = ADA) -> tuple[uuid.UUID, uuid.UUID]:
    ref = uuid.uuid4()
    run_id = app.start_workflow(app.workflows[f"dpe:{workflow}"], Start(ref, items or []), user=user)
    return run_id, ref


# --- 1. the event a suspended wait_for_event waits for ------------------------------------------


def test_a_deploy_that_changes_the_awaited_event_strands_the_run_and_the_old_code_resumes_it(
    deploy: Callable[..., App], clock: FakeClock
) -> None:
    v1 = deploy("v1")
    run_id, ref = _start(v1, "waiter")
    v2 = deploy("shipped")
    new_run, _ = _start(v2, "waiter")
    assert run_info(v2, new_run).fingerprint != run_info(v1, run_id).fingerprint  # the awaited event is in it
    assert isinstance(v2.cancel_run(new_run, user=ADA, reason="seen its fingerprint"), Ok)

    (problem,) = v2.check_runs()
    reason = (
        f'workflow.wait_for_event "got" at got now waits for {_name(v2, Shipped)}, the run waits for {_name(v2, Paid)}'
    )
    assert (problem.workflow, problem.path, problem.reason, problem.run_ids) == ("dpe:waiter", "got", reason, (run_id,))

    # The Paid event the run waits for: the new code neither resumes it with that event as a
    # Shipped, nor (once the timeout has passed) with None: it strands it, untouched.
    assert v2.dispatch(v2.handlers["dpe:pay"], Start(ref), user=ADA) == Ok(None)
    assert v2.run_worker(once=True)["resumed"] == 0
    clock.advance(hours=2)
    assert v2.run_worker(once=True)["resumed"] == 0
    info = run_info(v2, run_id)
    assert (info.status, info.path, info.error) == ("suspended", "got", {"code": "stranded", "message": reason})

    # The code that stored it resumes it with the event it waited for.
    assert v1.run_worker(once=True)["resumed"] == 1
    assert v1.result(v1.workflows["dpe:waiter"], run_id, user=ADA) == Ok("Paid")


def test_an_event_after_the_timeout_of_a_run_stranded_past_it_is_no_answer_when_the_old_code_comes_back(
    deploy: Callable[..., App], clock: FakeClock
) -> None:
    """A run that a deploy kept (stranded) past its one-hour timeout, and a Paid for it
    appended after that timeout: the code that can resume it, back, times it out, as a
    worker of that code running all along had.  Before, its feed looked back over every
    event since the run stopped and handed it the late Paid (``Ok("Paid")``), so the same
    history answered otherwise for a deploy in between.  A Paid that came in time wakes
    its run as before."""
    v1 = deploy("v1")
    late, late_ref = _start(v1, "waiter")
    early, early_ref = _start(v1, "waiter")
    v1.run_worker(once=True)  # arms the waits
    v2 = deploy("shipped")  # waits for Shipped in "got": strands both
    clock.advance(minutes=30)
    assert v2.dispatch(v2.handlers["dpe:pay"], Start(early_ref), user=ADA) == Ok(None)
    clock.advance(minutes=60)  # the timeouts (T0 + 1 h) have passed
    assert v2.run_worker(once=True)["resumed"] == 0
    assert v2.dispatch(v2.handlers["dpe:pay"], Start(late_ref), user=ADA) == Ok(None)
    assert v2.run_worker(once=True)["resumed"] == 0
    assert {run_info(v2, r).error["code"] for r in (late, early)} == {"stranded"}

    assert v1.run_worker(once=True)["resumed"] == 2
    assert v1.result(v1.workflows["dpe:waiter"], early, user=ADA) == Ok("Paid")
    assert v1.result(v1.workflows["dpe:waiter"], late, user=ADA) == Ok("NoneType")


def test_an_event_after_the_timeout_does_not_wake_a_run_whose_timeout_no_worker_took_yet(
    deploy: Callable[..., App], clock: FakeClock
) -> None:
    """The feed reads an event appended after a run's timeout before any worker resumed
    the run at that timeout (the workers were down, a deploy): the run times out."""
    v1 = deploy("v1")
    run_id, ref = _start(v1, "waiter")
    v1.run_worker(once=True)
    clock.advance(hours=3)
    assert v1.dispatch(v1.handlers["dpe:pay"], Start(ref), user=ADA) == Ok(None)
    assert v1.run_worker(once=True)["resumed"] == 1
    assert v1.result(v1.workflows["dpe:waiter"], run_id, user=ADA) == Ok("NoneType")


@pytest.mark.parametrize("error", [["stranded_by"], "stranded", 7])
def test_a_stored_error_of_the_wrong_shape_does_not_stop_the_worker_stranding_the_run(
    deploy: Callable[..., App], clock: FakeClock, error: object
) -> None:
    """The error column is the worker's too: it keeps which definitions stranded a run."""
    v1 = deploy("v1")
    run_id, _ref = _start(v1, "napper")
    with v1.engine.begin() as conn:
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(error=error))
    v2 = deploy("priced")  # no fill=: the run did not store "price"
    clock.advance(hours=2)
    assert v2.run_worker(once=True)["resumed"] == 0
    assert v2.run_worker(once=True)["resumed"] == 0  # marked once: passed by
    info = run_info(v2, run_id)
    reason = 'key "price" needed at nap was not stored'
    assert (info.status, info.error) == ("suspended", {"code": "stranded", "message": reason})


@pytest.mark.parametrize(("error", "kind"), [(["stranded_by"], "array"), ("stranded", "string"), (7, "number")])
def test_a_run_whose_stored_error_is_damaged_is_still_listed(
    deploy: Callable[..., App], error: object, kind: str
) -> None:
    """Listing runs is how an operator finds a damaged row: it shows it, it does not raise."""
    app = deploy("v1")
    run_id, _ref = _start(app, "napper")
    with app.engine.begin() as conn:
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(error=error))
    shown = {"code": "unreadable", "message": f"the stored error is a JSON {kind}, not an object"}
    assert run_info(app, run_id).error == shown
    assert [r.error for r in app.runs() if r.run_id == run_id] == [shown]


def test_a_waiting_run_failed_as_damaged_leaves_no_event_wait_behind(deploy: Callable[..., App]) -> None:
    """No event can resume a failed run: its wait row goes with it, so the feed stops
    arming and matching it."""
    app = deploy("v1")
    run_id, ref = _start(app, "waiter")
    waits = sa.select(sa.func.count()).select_from(workflow_waits).where(workflow_waits.c.run_id == run_id)
    with app.engine.begin() as conn:
        assert conn.execute(waits).scalar() == 1
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(state=[1]))
    assert app.dispatch(app.handlers["dpe:pay"], Start(ref), user=ADA) == Ok(None)
    app.run_worker(once=True)
    assert run_info(app, run_id).status == "failed"
    with app.engine.connect() as conn:
        assert conn.execute(waits).scalar() == 0


def _name(app: App, cls: type[Any]) -> str:
    """The type name events of ``cls`` are stored under."""
    return app.features[0].events[cls]


def _lost_race_after_paid(
    app: App, clock: FakeClock, *, noted: int | None = None
) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """A ``waiter`` run woken by its ``Paid`` whose segment then lost a race: suspended,
    due again, the event noted with it (what ``isolated_segment`` leaves behind).
    ``noted``: which of the events so far is noted (the last: the ``Paid``)."""
    ((run_id, ref, event_id),) = _lost_races(app, clock, [ADA], noted=noted)
    return run_id, ref, event_id


def _lost_races(
    app: App, clock: FakeClock, users: list[User], *, noted: int | None = None
) -> list[tuple[uuid.UUID, uuid.UUID, uuid.UUID]]:
    """As :func:`_lost_race_after_paid`, a ``waiter`` run of each of ``users``, each woken
    by its own ``Paid`` (``noted``: which of all events is noted instead, for every run)."""
    started = [_start(app, "waiter", user=user) for user in users]
    app.run_worker(once=True)  # arms the waits
    woken = []
    for (run_id, ref), user in zip(started, users, strict=True):
        assert app.dispatch(app.handlers["dpe:pay"], Start(ref), user=user) == Ok(None)
        with app.engine.begin() as conn:
            ids = conn.scalars(sa.select(events.c.event_id).order_by(events.c.position)).all()
        woken.append((run_id, ref, ids[-1 if noted is None else noted]))
    with app.engine.begin() as conn:
        for run_id, _ref, event_id in woken:
            state = conn.scalar(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id))
            conn.execute(
                workflow_runs.update()
                .where(workflow_runs.c.run_id == run_id)
                .values(state={**state, "woken_by": str(event_id)}, wake_at=T0)
            )
            conn.execute(workflow_waits.delete().where(workflow_waits.c.run_id == run_id))
    clock.advance(seconds=5)
    return woken


def test_a_run_whose_noted_event_this_deploy_cannot_load_is_stranded_not_a_crashed_worker(
    deploy: Callable[..., App], clock: FakeClock
) -> None:
    """A run woken by an event whose segment then lost a race notes the event and is due
    again shortly (tests/workflows/test_workflow_isolation.py).  If a deploy in between
    changed the event's class so that the stored event no longer loads, the worker
    strands the run as it is, naming the event, instead of raising out of its pass (every
    pass, a worker that never gets past it); the code that can load it resumes it."""
    v1 = deploy("v1")
    run_id, ref, event_id = _lost_race_after_paid(v1, clock)

    v3 = deploy("paid-amount")
    assert v3.run_worker(once=True)["resumed"] == 0
    info = run_info(v3, run_id)
    assert (info.status, info.error["code"], info.path) == ("suspended", "stranded", "got"), info.error
    assert info.error["message"] == (
        f"at step got: the stored state cannot be read: the event {event_id} that woke the run ('paid', stored at "
        "schema version 1) does not load as Paid: required field is missing at $.amount; a deploy with the class "
        "as the run stored it resumes the run"
    )
    assert v3.run_worker(once=True)["resumed"] == 0  # passed by from now on, not tried again

    assert v1.run_worker(once=True)["resumed"] == 1  # the code that reads the event
    done = run_info(v1, run_id)
    assert (done.status, done.steps["got"]) == ("completed", Paid(ref)), done


def test_an_awaited_event_this_deploy_cannot_load_strands_the_waiting_run_for_one_that_can(
    deploy: Callable[..., App], clock: FakeClock
) -> None:
    """A rolling deploy: the new code writes ``Paid`` at schema version 2, which the old
    code cannot load, so it cannot tell which run the event is for.  Its feed strands the
    runs waiting for a ``Paid`` there instead of passing the event by (the run would
    miss it for good: the feed's cursor moves on), and the new code's feed arms their
    waits again, finds the event and resumes the run it is for."""
    v1 = deploy("v1")
    run_id, ref = _start(v1, "waiter")
    other, _ = _start(v1, "waiter")  # waits for another Paid, in the same tenant
    v1.run_worker(once=True)  # arms the waits
    v2 = deploy("paid-v2")
    assert v2.dispatch(v2.handlers["dpe:pay"], Start(ref), user=ADA) == Ok(None)

    assert v1.run_worker(once=True)["resumed"] == 0
    event_id = _last_event(v1)
    for stranded in (run_id, other):
        info = run_info(v1, stranded)
        assert (info.status, info.error["code"], info.path) == ("suspended", "stranded", "got"), info.error
        assert info.error["message"] == (
            f"at step got: the event {event_id} ('paid', stored at schema version 2) is newer than Paid's schema "
            "version 1; a deploy that can read it resumes the run"
        )
    assert v1.run_worker(once=True)["resumed"] == 0  # passed by from now on

    assert v2.run_worker(once=True)["resumed"] == 1
    done = run_info(v2, run_id)
    assert (done.status, done.steps["got"]) == ("completed", PAID_V2(ref, 5)), done
    assert run_info(v2, other).status == "suspended"  # its Paid has not come: waiting again
    clock.advance(hours=2)
    assert v2.run_worker(once=True)["resumed"] == 1  # and its timeout still holds
    assert run_info(v2, other).status == "completed"


def test_an_awaited_event_whose_field_no_longer_fits_strands_the_run_naming_the_field_not_its_value(
    deploy: Callable[..., App],
) -> None:
    """Was "… does not load as Paid (ClassValidationError)": the feed's reason is the one
    ``read_stream`` gives (docs/event-store.md), the field by path, never its stored value;
    the run is stranded as before, waiting, its wait unarmed."""
    v1 = deploy("v1")
    run_id, ref = _start(v1, "waiter")
    v1.run_worker(once=True)  # arms the wait
    assert v1.dispatch(v1.handlers["dpe:pay"], Start(ref), user=ADA) == Ok(None)
    event_id = _last_event(v1)
    with v1.engine.begin() as conn:  # as if its type changed since: a UUID field stored as other text
        conn.execute(events.update().where(events.c.event_id == event_id).values(payload={"ref": "SECRET"}))

    assert v1.run_worker(once=True)["resumed"] == 0
    info = run_info(v1, run_id)
    assert (info.status, info.path, _armed(v1, run_id)) == ("suspended", "got", False)
    assert info.error == {
        "code": "stranded",
        "message": f"at step got: the event {event_id} ('paid', stored at schema version 1) does not load as Paid: "
        "expected a UUID string at $.ref; a deploy that can read it resumes the run",
    }


def _last_event(app: App) -> uuid.UUID:
    with app.engine.connect() as conn:
        event_id: uuid.UUID = conn.scalars(sa.select(events.c.event_id).order_by(events.c.position)).all()[-1]
    return event_id


def _armed(app: App, run_id: uuid.UUID) -> bool | None:
    with app.engine.connect() as conn:
        armed: bool | None = conn.scalar(sa.select(workflow_waits.c.armed).where(workflow_waits.c.run_id == run_id))
    return armed


def _stranded(app: App) -> list[uuid.UUID]:
    return sorted(r.run_id for r in app.runs(stranded=True))


def test_a_run_the_feed_stranded_is_no_longer_listed_stranded_once_a_deploy_that_loads_the_event_arms_it(
    deploy: Callable[..., App], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The runs the old code's feed stranded for an event it could not load: the new
    code's feed arms their waits again, resumes the one the event is for, and the others
    wait on as any waiting run, unmarked (the mark is cleared as the wait is armed, in its
    transaction; why it had been stranded stays in the log), not listed as stranded while
    they wait; their timeout still holds, under either code."""
    v1 = deploy("v1")
    run_id, ref = _start(v1, "waiter")
    others = sorted(_start(v1, "waiter")[0] for _ in range(2))
    bobs, _ = _start(v1, "waiter", user=BOB)  # another tenant's: the event is none of its business
    v1.run_worker(once=True)  # arms the waits
    v2 = deploy("paid-v2")
    assert v2.dispatch(v2.handlers["dpe:pay"], Start(ref), user=ADA) == Ok(None)
    assert v1.run_worker(once=True)["resumed"] == 0
    assert _stranded(v1) == sorted([run_id, *others])
    why = run_info(v1, others[0]).error["message"]

    caplog.set_level(logging.INFO, logger="kumiko_typed")
    assert v2.run_worker(once=True)["resumed"] == 1
    assert run_info(v2, run_id).status == "completed"
    assert _stranded(v2) == [] and _stranded(v1) == []  # one database: either code lists none
    for waiting in (*others, bobs):
        info = run_info(v2, waiting)
        assert (info.status, info.path, info.error, _armed(v2, waiting)) == ("suspended", "got", None, True)
    for waiting in others:
        logged = [r.getMessage() for r in caplog.records if str(waiting) in r.getMessage()]
        assert any("waits again" in m and why in m for m in logged), logged

    assert v1.run_worker(once=True)["resumed"] == 0  # the old code leaves them waiting, unmarked
    assert _stranded(v1) == []
    clock.advance(hours=2)
    assert v1.run_worker(once=True)["resumed"] == 3  # and resumes them at their timeout: it can
    assert [run_info(v1, r).status for r in (*others, bobs)] == ["completed"] * 3


def test_a_stranded_run_whose_stored_values_the_arming_deploy_cannot_rebuild_stays_stranded_with_its_reason(
    deploy: Callable[..., App],
) -> None:
    """The arming deploy reads a stranded run before it clears the mark, as a worker reads
    it before resuming: a payload it cannot rebuild strands the run anew, with that reason,
    its wait unarmed, even when no event there is for it (it would else wait unmarked,
    not listed, though no event could resume it under this deploy)."""
    v1 = deploy("v1")
    run_id, _ = _start(v1, "waiter")
    v1.run_worker(once=True)  # arms the wait
    v2 = deploy("paid-v2")
    assert v2.dispatch(v2.handlers["dpe:pay"], Start(uuid.uuid4()), user=ADA) == Ok(None)  # another key's
    assert v1.run_worker(once=True)["resumed"] == 0
    assert _stranded(v1) == [run_id]
    with v1.engine.begin() as conn:
        payload = conn.scalar(sa.select(workflow_runs.c.payload).where(workflow_runs.c.run_id == run_id))
        moved = {**payload, "c": "elsewhere.Start"}  # as if stored by a deploy that had it elsewhere
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(payload=moved))

    assert v2.run_worker(once=True)["resumed"] == 0
    info = run_info(v2, run_id)
    reason = (
        "at step got: the stored state cannot be read: stored class 'elsewhere.Start' is not registered in this App; "
        "a deploy with the class as the run stored it resumes the run"
    )
    assert (info.status, info.error, _armed(v2, run_id)) == (
        "suspended",
        {"code": "stranded", "message": reason},
        False,
    )
    assert _stranded(v2) == [run_id]


def test_a_run_whose_wait_a_deploy_arms_again_and_strands_in_the_look_back_stays_stranded_and_unarmed(
    deploy: Callable[..., App], clock: FakeClock
) -> None:
    """Three deploys: the old code strands the run for a ``Paid`` at schema version 2;
    a deploy whose ``Paid`` lacks a default for ``amount`` arms its wait again and, looking
    back, finds an earlier ``Paid`` it cannot load either: the run is stranded again, with
    that deploy's reason, and its wait left unarmed (as every stranded run's), for the deploy
    that reads both events to arm and resume."""
    v1 = deploy("v1")
    run_id, ref = _start(v1, "waiter")
    v1.run_worker(once=True)  # arms the wait
    assert v1.dispatch(v1.handlers["dpe:pay"], Start(uuid.uuid4()), user=ADA) == Ok(None)  # another key's
    earlier = _last_event(v1)
    v2 = deploy("paid-v2")
    assert v2.dispatch(v2.handlers["dpe:pay"], Start(ref), user=ADA) == Ok(None)
    assert v1.run_worker(once=True)["resumed"] == 0
    assert _stranded(v1) == [run_id] and "newer than" in run_info(v1, run_id).error["message"]

    v3 = deploy("paid-amount")
    assert v3.run_worker(once=True)["resumed"] == 0
    info = run_info(v3, run_id)
    assert (info.status, info.error["code"], _armed(v3, run_id)) == ("suspended", "stranded", False)
    assert info.error["message"] == (
        f"at step got: the event {earlier} ('paid', stored at schema version 1) does not load as Paid: required "
        "field is missing at $.amount; a deploy that can read it resumes the run"
    )
    assert _stranded(v3) == [run_id]

    assert v2.run_worker(once=True)["resumed"] == 1
    done = run_info(v2, run_id)
    assert (done.status, done.error, done.steps["got"]) == ("completed", None, PAID_V2(ref, 5))


def test_a_run_whose_noted_event_is_of_another_type_fails_as_damaged(
    deploy: Callable[..., App], clock: FakeClock
) -> None:
    """A noted event that is no ``Paid`` (here the box's ``created`` event) is a damaged
    row, not a deploy's doing: the run fails alone, and the worker goes on."""
    v1 = deploy("v1")
    run_id, _, event_id = _lost_race_after_paid(v1, clock, noted=0)
    other, _ = _start(v1, "napper")
    clock.advance(minutes=2)
    assert v1.run_worker(once=True)["resumed"] == 2
    info = run_info(v1, run_id)
    assert (info.status, info.error["code"]) == ("failed", "unstorable_state"), info.error
    assert f"the event {event_id} noted as the one that woke the run is no Paid" in info.error["message"]
    assert run_info(v1, other).status == "completed"


BOB = User(id=uuid.UUID(int=2), tenant_id=uuid.UUID(int=22))  # another tenant


def test_the_check_lists_the_runs_whose_noted_event_this_deploy_cannot_load_with_the_workers_reason(
    deploy: Callable[..., App], clock: FakeClock
) -> None:
    """The check reads a run's noted event as the worker does (a lost race's, whatever
    else the state holds): runs of both tenants are listed with the very reason the
    worker strands each with; a run without one, or under the classes that load it, is not."""
    v1 = deploy("v1")
    woken = _lost_races(v1, clock, [ADA, BOB])
    waiting, _ = _start(v1, "waiter")
    napping, _ = _start(v1, "napper", user=BOB)
    assert v1.check_runs() == []  # the deploy that wrote the events loads them

    v3 = deploy("paid-amount")
    checked = v3.check_runs()
    for run_id, _ref, event_id in woken:
        reason = (
            f"at step got: the stored state cannot be read: the event {event_id} that woke the run ('paid', stored "
            "at schema version 1) does not load as Paid: required field is missing at $.amount; a deploy with the "
            "class as the run stored it resumes the run"
        )
        assert (reason, (run_id,)) in [(g.reason, g.run_ids) for g in checked], checked
    assert len(checked) == 2  # one group each: the reason names its event
    assert {(g.workflow, g.path) for g in checked} == {("dpe:waiter", "got")}

    assert v3.run_worker(once=True)["resumed"] == 0
    reasons = {g.run_ids[0]: g.reason for g in checked}
    for run_id, _ref, _event_id in woken:
        info = run_info(v3, run_id)
        assert (info.status, info.error) == ("suspended", {"code": "stranded", "message": reasons[run_id]})
    assert run_info(v3, waiting).error is None and run_info(v3, napping).error is None
    assert v3.check_runs() == checked  # stranded, still listed the same way


def test_the_check_lists_a_run_whose_noted_event_is_of_another_type_with_the_reason_the_worker_fails_it_with(
    deploy: Callable[..., App], clock: FakeClock
) -> None:
    v1 = deploy("v1")
    run_id, _, event_id = _lost_race_after_paid(v1, clock, noted=0)  # the box's created event
    (problem,) = v1.check_runs()
    reason = f"the stored state cannot be read: the event {event_id} noted as the one that woke the run is no Paid"
    assert (problem.workflow, problem.path, problem.reason, problem.run_ids) == ("dpe:waiter", "got", reason, (run_id,))
    v1.run_worker(once=True)
    info = run_info(v1, run_id)
    assert (info.status, info.error) == ("failed", {"code": "unstorable_state", "message": f"at step got: {reason}"})
    assert v1.check_runs() == []


@pytest.mark.parametrize(
    ("noted", "why"),
    [
        ("gone", "the event ... that woke the run is gone from the event store"),
        ("not-a-uuid", "woken_by, the event noted as the one that woke the run, is no event id"),
        (7, "woken_by, the event noted as the one that woke the run, is no event id"),
        ([], "woken_by, the event noted as the one that woke the run, is no event id"),
        (None, "woken_by, the event noted as the one that woke the run, is no event id"),
        ("at-start", "a run at its start waits for no event, yet it noted event ..."),
    ],
)
def test_a_noted_event_that_is_gone_or_no_id_is_listed_with_the_reason_the_worker_fails_the_run_with(
    deploy: Callable[..., App], clock: FakeClock, noted: object, why: str
) -> None:
    """A damaged ``woken_by`` (hostile, or hand-edited): the check and the worker read it
    alike; the run fails alone, with the reason the check gave."""
    v1 = deploy("v1")
    (run_id, _, event_id), (fine, _, _) = _lost_races(v1, clock, [ADA, ADA])  # fine: noted intact
    named = {"gone": str(uuid.uuid4()), "at-start": str(event_id)}.get(noted) if isinstance(noted, str) else None
    with v1.engine.begin() as conn:
        state = conn.scalar(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id))
        changed: dict[str, Any] = {"state": {**state, "woken_by": named or noted}}
        if noted == "at-start":
            changed["path"] = None
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(**changed))
    (problem,) = v1.check_runs()
    path = None if noted == "at-start" else "got"
    assert (problem.path, problem.run_ids) == (path, (run_id,))
    assert problem.reason == f"the stored state cannot be read: {why.replace('...', named or '')}"
    v1.run_worker(once=True)
    info = run_info(v1, run_id)
    assert info.error == {"code": "unstorable_state", "message": f"at step {path}: {problem.reason}"}
    assert run_info(v1, fine).status == "completed"


# --- 2. and 3. a stored state or path of the wrong shape ------------------------------------------


def _replace(state: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**state, **changes}


HOSTILE: dict[str, Callable[[dict[str, Any]], object]] = {
    "state-a-list": lambda s: [s],
    "state-a-string": lambda s: "state",
    "state-a-number": lambda s: 5,
    "values-a-number": lambda s: _replace(s, values=5),
    "values-null": lambda s: _replace(s, values=None),
    "values-keys-a-list": lambda s: _replace(s, values={"$t": "dict", "v": ["quote"]}),
    "values-untagged": lambda s: _replace(s, values={"v": {}}),
    "scope-a-string": lambda s: _replace(s, scope="item"),
    "kind-a-list": lambda s: _replace(s, kind=["workflow.wait"]),
    "kind-a-number": lambda s: _replace(s, kind=7),
    "addressing-an-object": lambda s: _replace(s, addressing={"name": True}),
    "loops-a-string": lambda s: _replace(s, loops="item/do/#0"),
    "loops-a-list": lambda s: _replace(s, loops=["item/do/#0"]),
    "loop-record-a-number": lambda s: _replace(s, loops=dict.fromkeys(s["loops"], 3)),
    "loop-record-without-items": lambda s: _replace(s, loops={k: {"shadows": False} for k in s["loops"]}),
    "loop-items-an-object": lambda s: _replace(s, loops={k: {**r, "items": {}} for k, r in s["loops"].items()}),
    "retries-a-list": lambda s: _replace(s, retries=[1]),
    "event-a-number": lambda s: _replace(s, event=3),
    "siblings-a-string": lambda s: _replace(s, siblings="2"),
    "siblings-of-text": lambda s: _replace(s, siblings=[None, "2"]),
    "siblings-of-fractions": lambda s: _replace(s, siblings=[1.5]),
    "siblings-of-booleans": lambda s: _replace(s, siblings=[True]),
}


@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_a_run_with_a_stored_state_of_the_wrong_shape_is_reported_by_the_check_and_failed_by_the_worker_alike(
    deploy: Callable[..., App], clock: FakeClock, hostile: str
) -> None:
    app = deploy("v1")
    run_id, _ref = _start(app, "looper", items=[1, 2])
    fine, _ = _start(app, "looper", items=[3])
    with app.engine.begin() as conn:
        state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()
        conn.execute(
            workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(state=HOSTILE[hostile](state))
        )

    (problem,) = app.check_runs()
    assert (problem.workflow, problem.path, problem.run_ids) == ("dpe:looper", "item/do/#0/tick", (run_id,))
    assert problem.reason.startswith("the stored state cannot be read: "), problem.reason

    clock.advance(minutes=5)
    app.run_worker(once=True)  # does not raise; the other run goes on
    info = run_info(app, run_id)
    assert (info.status, info.error) == (
        "failed",
        {"code": "unstorable_state", "message": f"at step item/do/#0/tick: {problem.reason}"},
    )
    assert run_info(app, fine).status == "completed"
    assert app.check_runs() == []


def _drop_scope(app: App, run_id: uuid.UUID) -> None:
    with app.engine.begin() as conn:
        state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()
        kept = {key: part for key, part in state.items() if key != "scope"}
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(state=kept))


def test_a_stored_state_without_its_scope_reads_as_an_empty_scope_for_the_check_and_the_worker_alike(
    deploy: Callable[..., App], clock: FakeClock
) -> None:
    """A state with its values and no scope at all (no version writes one, but the shape
    check reads it as an empty scope): outside a loop nothing is missing, so the check
    lists nothing and the worker resumes the run (it failed it with the message "'scope'");
    in a loop the missing item strands the run with the reason the check gives."""
    app = deploy("v1")
    napper, _ = _start(app, "napper")
    looper, _ = _start(app, "looper", items=[1, 2])
    _drop_scope(app, napper)
    _drop_scope(app, looper)
    (problem,) = app.check_runs()
    assert (problem.workflow, problem.run_ids) == ("dpe:looper", (looper,))

    clock.advance(minutes=5)
    app.run_worker(once=True)
    assert (run_info(app, napper).status, run_info(app, napper).error) == ("completed", None)
    info = run_info(app, looper)
    assert (info.status, info.error) == ("suspended", {"code": "stranded", "message": problem.reason})


def _assert_stranded_at(app: App, clock: FakeClock, run_id: uuid.UUID, path: str, reason: str) -> None:
    """Store ``path`` as the run's, then: the check lists it with ``reason``, and a worker
    strands it there with the same reason (keeping, under ``last_``, the error it had)."""
    before = run_info(app, run_id).error or {}
    with app.engine.begin() as conn:
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(path=path))
    (problem,) = app.check_runs()
    assert (problem.path, problem.reason, problem.run_ids) == (path, reason, (run_id,))

    clock.advance(minutes=5)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    kept = {f"last_{key}": value for key, value in before.items()}
    assert (info.status, info.path, info.error) == ("suspended", path, {"code": "stranded", "message": reason, **kept})


@pytest.mark.parametrize("path", ["item/do/#x/tick", "item/do/#/tick", "item/do/#-1/tick", "item/do/#²/tick"])
def test_a_stored_loop_path_with_an_iteration_that_is_no_number_strands_the_run(
    deploy: Callable[..., App], clock: FakeClock, path: str
) -> None:
    app = deploy("v1")
    run_id, _ref = _start(app, "looper", items=[1, 2])
    iteration = path.split("/")[2]
    _assert_stranded_at(app, clock, run_id, path, f"{iteration} at {path} is no loop iteration (# and a number)")


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("again/#0", "#0 at again/#0 is no retry attempt (# and a number from 1)"),
        ("again", 'workflow.retry "again" at again has no attempt to resume (# and a number after it)'),
    ],
)
def test_a_stored_retry_path_without_an_attempt_to_resume_strands_the_run(
    deploy: Callable[..., App], clock: FakeClock, path: str, reason: str
) -> None:
    """Before, the check passed these and a worker failed the run with ``internal_error``
    (``ValueError`` for attempt 0, ``IndexError`` for no attempt at all)."""
    app = deploy("v1")
    run_id, _ref = _start(app, "retrier")
    waiting = run_info(app, run_id)
    assert (waiting.path, waiting.error["attempts"]) == ("again/#2", "1")  # what the strand mark keeps
    _assert_stranded_at(app, clock, run_id, path, reason)


# --- 4. an awaited event no feature registers ----------------------------------------------------


def test_boot_refuses_a_wait_for_an_event_no_feature_registers() -> None:
    f: Feature[Any] = Feature("dpu")
    f.workflow(
        "waiter",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start).branch(
            when=lambda c: True,
            on_true=lambda b: b.wait_for_event(
                "got", Paid, key=lambda c: c.payload.ref, event_key=lambda e: e.ref, timeout="PT1H"
            ),
        ),
    )
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    (problem,) = raised.value.problems
    assert problem == (
        'workflow dpu:waiter, step @branch/on_true/got (workflow.wait_for_event "got"): it waits for Paid, '
        "which is not a registered event; register it with feature.event(Paid) in a feature of this App"
    )


@attrs.frozen
class Refunded:
    ref: str


def test_boot_refuses_a_wait_for_a_union_of_events_saying_what_to_wait_for_instead() -> None:
    """Both classes registered: the advice to register the union with feature.event(...)
    named something no feature can register."""
    f: Feature[Any] = Feature("dpu")
    f.event(Paid)
    f.event(Refunded)
    f.workflow(
        "waiter",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start).wait_for_event(
            "got",
            Paid | Refunded,  # type: ignore[arg-type]
            key=lambda c: c.payload.ref,
            event_key=lambda e: e.ref,
            timeout="PT1H",
        ),
    )
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    (problem,) = raised.value.problems
    assert problem == (
        'workflow dpu:waiter, step got (workflow.wait_for_event "got"): it waits for '
        f"{Paid | Refunded!r}, which is no class: a wait is for one registered event class "
        "(for either of two outcomes, register one class that says which, and append it for both)"
    )


# --- 5. a fill= function that raises ---------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    # CancelledError: a BaseException (an asyncio.run inside the fill), which ended the pass
    [KeyError("quote"), ZeroDivisionError("division by zero"), ValueError("no"), asyncio.CancelledError()],
)
def test_a_fill_that_raises_fails_the_run_with_internal_error_naming_it(
    deploy: Callable[..., App], clock: FakeClock, caplog: pytest.LogCaptureFixture, error: BaseException
) -> None:
    v1 = deploy("v1")
    run_id, _ref = _start(v1, "napper")
    other, ref = _start(v1, "waiter")

    def broken(stored: Any) -> object:
        raise error

    v2 = deploy("priced", fill=broken)
    assert v2.check_runs() == []  # a fill is a function of the values: the check does not run it; and
    # the waiting run waits for the event this definition still waits for
    clock.advance(minutes=5)
    v2.run_worker(once=True)  # does not raise
    info = run_info(v2, run_id)
    name = type(error).__name__
    assert (info.status, info.error) == (
        "failed",
        {"code": "internal_error", "message": f'at step nap: fill= for "price" raised {name} (see the worker\'s log)'},
    )
    assert "Traceback" not in info.error["message"]
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[1] is error]
    assert logged and "price" in logged[0].getMessage()
    assert run_info(v2, other).status == "suspended"  # the pass went on

    # A run waiting for the event this definition still waits for resumes under it.
    assert v2.dispatch(v2.handlers["dpe:pay"], Start(ref), user=ADA) == Ok(None)
    assert v2.run_worker(once=True)["resumed"] == 1
    assert v2.result(v2.workflows["dpe:waiter"], other, user=ADA) == Ok("Paid")


async def _quote_later(stored: Any) -> object:
    return 1


def _quote_soon(stored: Any) -> object:
    """A plain function boot lets through, that gives a coroutine."""
    return _quote_later(stored)


def test_a_fill_that_returns_a_coroutine_fails_the_run_saying_so(deploy: Callable[..., App], clock: FakeClock) -> None:
    """A plain function calling an async one passes boot: the coroutine it gives is not
    stored as the value (nor left for Python to warn of, never awaited); the run fails
    saying why.  Before: the run went on with the coroutine as the step's value."""
    v1 = deploy("v1")
    run_id, _ref = _start(v1, "napper")
    v2 = deploy("priced", fill=_quote_soon)
    clock.advance(minutes=5)
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            v2.run_worker(once=True)
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert unraisable == []
    info = run_info(v2, run_id)
    assert (info.status, info.error["code"]) == ("failed", "internal_error"), info
    assert info.error["message"] == (
        'at step nap: fill= for "price" raised StepRefused: the function returned a coroutine: steps run '
        "synchronously inside the transaction; call the async function outside the pipeline or make it synchronous "
        "(see the worker's log)"
    )
