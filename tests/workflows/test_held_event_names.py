"""An event a suspended run holds (what a ``wait_for_event`` handed it, an ``on_event``
run's payload) is stored by the name its class is registered under, as the event store
stores the event itself: a deploy that renames the class, or moves it to another module,
and registers it under the same name resumes the run with the event.  Before, a held event
was stored by module and class name alone, and such a deploy stranded every run holding
one.  A run an earlier release stored (module and class name only) still resumes.  Both
databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import ok_data, run_info

from kumiko_typed import App, Entity, Feature, Ok, User, Workflow, manual, ok, on_event
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


class HeldBox(Entity):
    __tablename__ = "held_event_box"


@attrs.frozen
class Begin:
    box: uuid.UUID


def _event_class(module: str, name: str) -> type[Any]:
    """The event as one release defines it: the same field, its class named ``name`` in
    ``module``."""
    cls = attrs.make_class(name, {"box": attrs.field(type=uuid.UUID)}, frozen=True)
    cls.__module__ = module
    cls.__qualname__ = name
    return cls


#: Release A's class, and release B's: renamed and moved, registered under the same name.
PAID = _event_class(__name__, "Paid")
SETTLED = _event_class("billing.events", "Settled")


def _deploy(
    app_on: Callable[..., App], clock: FakeClock, paid: type[Any], name: str = "paid"
) -> tuple[App, Workflow[Any], Workflow[Any], Any]:
    f: Feature[Any] = Feature("held")
    f.entity(HeldBox)
    f.event(paid, name=name)
    pay = f.write_handler(
        "pay",
        f.pipeline(Begin)
        .append_event(HeldBox, id=lambda c: c.payload.box, event=lambda c: paid(c.payload.box))
        .return_(lambda c: ok(None)),
    )
    box = f.write_handler(
        "box",
        f.pipeline(Begin).create("box", HeldBox, data=lambda c: HeldBox()).return_(lambda c: ok(c.steps["box"].id)),
    )
    waiting = f.workflow(
        "waiting",
        trigger=manual(Begin),
        pipeline=f.workflow_pipeline(Begin)
        .wait_for_event("paid", paid, key=lambda c: c.payload.box, event_key=lambda e: e.box, timeout="P1D")
        .wait("PT1M", name="nap")
        .return_(lambda c: ok(repr(c.steps["paid"]))),
    )
    triggered = f.workflow(
        "triggered",
        trigger=on_event(paid),
        pipeline=f.workflow_pipeline(paid).wait("PT1M", name="nap").return_(lambda c: ok(repr(c.payload))),
    )
    return app_on([f], clock=clock), waiting, triggered, (pay, box)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def _suspended_holding_paid(app_on: Callable[..., App], clock: FakeClock) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """Under release A: a run handed a ``Paid`` by its ``wait_for_event``, and a run an
    appended ``Paid`` started, both napping with it.  Their ids and the box's."""
    app, waiting, triggered, (pay, box) = _deploy(app_on, clock, PAID)
    made = ok_data(app.dispatch(box, Begin(uuid.uuid4()), user=ADA))
    run_id = app.start_workflow(waiting, Begin(made), user=ADA)
    assert app.dispatch(pay, Begin(made), user=ADA) == Ok(None)
    app.run_worker(once=True)
    [started] = [r.run_id for r in app.runs(triggered.name)]
    for rid in (run_id, started):
        info = run_info(app, rid)
        assert (info.status, info.path) == ("suspended", "nap"), info.error
    app.dispose()
    return run_id, started, made


def _held(app: App, run_id: uuid.UUID) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A run's stored payload and the value of its step ``paid``, if it holds one."""
    with app.engine.connect() as conn:
        payload, state = conn.execute(
            sa.select(workflow_runs.c.payload, workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)
        ).one()
    return payload, state["values"]["v"].get("paid")


def test_a_run_holding_an_event_resumes_after_its_class_is_renamed_and_moved(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    run_id, started, made = _suspended_holding_paid(app_on, clock)

    app, waiting, triggered, _ = _deploy(app_on, clock, SETTLED)
    assert app.check_runs() == []  # the pre-deploy check reads it as the worker does
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 2
    assert app.result(waiting, run_id, user=ADA) == Ok(f"Settled(box={made!r})")
    assert app.result(triggered, started, user=ADA) == Ok(f"Settled(box={made!r})")


def test_a_run_an_earlier_release_stored_by_class_name_still_resumes(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    """This release stores a held event by its registered name beside its module and
    class name, which an earlier release stored alone and read it by (it still does, so a
    rolling deploy's older workers resume this release's runs).  A run stored so is read
    by module and class name while the class is there under that name."""
    run_id, started, made = _suspended_holding_paid(app_on, clock)
    app, waiting, triggered, _ = _deploy(app_on, clock, PAID)
    held = _held(app, run_id)[1]
    assert held is not None and (held["e"], held["c"]) == ("paid", f"{__name__}.Paid")
    assert _held(app, started)[0]["e"] == "paid"
    for rid in (run_id, started):
        payload, held = _held(app, rid)
        with app.engine.begin() as conn:
            state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == rid)).scalar_one()
            if held is not None:
                state["values"]["v"]["paid"] = {k: v for k, v in held.items() if k != "e"}
            older = {k: v for k, v in payload.items() if k != "e"}
            update = sa.update(workflow_runs).where(workflow_runs.c.run_id == rid)
            conn.execute(update.values(payload=older, state=state))
    assert _held(app, started)[0].keys() == {"$t", "c", "v", "s"}
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 2
    assert app.result(waiting, run_id, user=ADA) == Ok(f"Paid(box={made!r})")
    assert app.result(triggered, started, user=ADA) == Ok(f"Paid(box={made!r})")


def test_a_run_holding_an_event_whose_name_is_no_longer_registered_is_stranded(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    """The registered name is what reads the event, as the event store reads it: the same
    class under another name strands the run, naming the event, until a deploy registers
    the name again."""
    run_id, _started, made = _suspended_holding_paid(app_on, clock)
    app, _waiting, _triggered, _ = _deploy(app_on, clock, PAID, name="payment-received")
    clock.advance(minutes=1)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    assert (info.status, info.error["code"]) == ("suspended", "stranded"), info.error
    assert "stored event 'paid' is not registered in this App" in info.error["message"]
    app.dispose()

    again, waiting, _triggered, _ = _deploy(app_on, clock, SETTLED)
    again.run_worker(once=True)
    assert again.result(waiting, run_id, user=ADA) == Ok(f"Settled(box={made!r})")
