"""An event a run keeps in its state (an ``on_event`` payload, what a ``wait_for_event``
handed it) is read, after a deploy that gives its class a new schema version and an
upcaster, through that upcaster, as the event store reads the event itself.  Before, the
run was stranded ("now requires 'amount', which it lacks") although the App could read
the event: the stored value had no schema version.  Both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, Workflow, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


class UpcBox(Entity):
    __tablename__ = "upc_box"


@attrs.frozen
class Begin:
    box: uuid.UUID


def _paid_class(version: int) -> type[Any]:
    """``Paid`` as two releases of one module define it: version 2 added ``amount``."""
    fields: dict[str, Any] = {"box": attrs.field(type=uuid.UUID)}
    if version == 2:
        fields["amount"] = attrs.field(type=int)
    cls = attrs.make_class("Paid", fields, frozen=True)
    cls.__module__ = __name__
    cls.__qualname__ = "Paid"
    return cls


PAID = {1: _paid_class(1), 2: _paid_class(2)}


def _paid_retyped() -> type[Any]:
    """``Paid`` after a deploy changed the type of ``box`` without a new schema version:
    a stored ``Paid`` no longer loads (``box`` is no integer)."""
    cls = attrs.make_class("Paid", {"box": attrs.field(type=int)}, frozen=True)
    cls.__module__ = __name__
    cls.__qualname__ = "Paid"
    return cls


def _deploy(
    app_on: Callable[..., App], clock: FakeClock, version: int, **kwargs: Any
) -> tuple[App, Workflow[Any], Any]:
    paid = _paid_retyped() if version == 0 else PAID[version]
    f: Feature[Any] = Feature("upc")
    f.entity(UpcBox)
    if version in (0, 1):  # 0: PAID[1] with ``box`` retyped, at the same schema version
        f.event(paid, name="paid")
    else:
        f.event(paid, name="paid", version=2, upcasters={1: lambda p: {**p, "amount": 7}})
    pay = f.write_handler(
        "pay",
        f.pipeline(Begin)
        .append_event(
            UpcBox,
            id=lambda c: c.payload.box,
            event=lambda c: paid(c.payload.box) if version < 2 else paid(c.payload.box, 9),
        )
        .return_(lambda c: ok(None)),
    )
    box = f.write_handler(
        "box", f.pipeline(Begin).create("box", UpcBox, data=lambda c: UpcBox()).return_(lambda c: ok(c.steps["box"].id))
    )
    flow = f.workflow(
        "flow",
        trigger=manual(Begin),
        pipeline=f.workflow_pipeline(Begin)
        .wait_for_event("paid", paid, key=lambda c: c.payload.box, event_key=lambda e: e.box, timeout="P1D")
        .wait("PT1M", name="nap")
        .return_(lambda c: ok(repr(c.steps["paid"]))),
    )
    return app_on([f], clock=clock, **kwargs), flow, (pay, box)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def test_an_event_a_run_was_handed_is_upcast_after_the_deploy(app_on: Callable[..., App], clock: FakeClock) -> None:
    old, flow, (pay, box) = _deploy(app_on, clock, 1)
    made = old.dispatch(box, Begin(uuid.uuid4()), user=ADA)
    assert isinstance(made, Ok)
    run_id = old.start_workflow(flow, Begin(made.data), user=ADA)
    assert old.dispatch(pay, Begin(made.data), user=ADA) == Ok(None)
    assert old.run_worker(once=True)["resumed"] == 1  # now napping, the version-1 Paid in its state
    old.dispose()

    app, flow, _ = _deploy(app_on, clock, 2)
    assert app.check_runs() == []
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(flow, run_id, user=ADA) == Ok(f"Paid(box={made.data!r}, amount=7)")


def test_an_upcaster_that_raises_strands_the_run_without_its_values(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    old, flow, (pay, box) = _deploy(app_on, clock, 1)
    made = old.dispatch(box, Begin(uuid.uuid4()), user=ADA)
    assert isinstance(made, Ok)
    run_id = old.start_workflow(flow, Begin(made.data), user=ADA)
    old.dispatch(pay, Begin(made.data), user=ADA)
    old.run_worker(once=True)
    old.dispose()

    f: Feature[Any] = Feature("upc")
    f.entity(UpcBox)

    def refuse(stored: dict[str, Any]) -> dict[str, Any]:
        raise KeyError(str(stored))  # a user's upcaster, quoting the stored payload

    f.event(PAID[2], name="paid", version=2, upcasters={1: refuse})
    f.workflow(
        "flow",
        trigger=manual(Begin),
        pipeline=f.workflow_pipeline(Begin)
        .wait_for_event("paid", PAID[2], key=lambda c: c.payload.box, event_key=lambda e: e.box, timeout="P1D")
        .wait("PT1M", name="nap"),
    )
    app = app_on([f], clock=clock)
    (problem,) = app.check_runs()
    assert "stored at schema version 1): an upcaster to schema version 2 raised KeyError" in problem.reason
    assert str(made.data) not in problem.reason
    clock.advance(minutes=1)
    app.run_worker(once=True)
    run = app.get_run(run_id)
    assert run is not None and run.status == "suspended" and run.error is not None
    assert run.error["code"] == "stranded"


def test_a_repeated_dispatch_of_an_event_payload_answers_across_the_deploy(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    """The schema version is how a run stores an event, not part of its value: a payload's
    idempotency fingerprint leaves it out, so a repeat after the deploy is no conflict."""
    for version in (1, 2):
        f: Feature[Any] = Feature("upc")
        f.entity(UpcBox)
        f.event(PAID[1], name="paid", version=version, upcasters={1: lambda p: p} if version == 2 else None)
        echo = f.write_handler("echo", f.pipeline(PAID[1]).return_(lambda c: ok(c.payload.box)))
        app = app_on([f], clock=clock)
        box = uuid.UUID(int=1)
        assert app.dispatch(echo, PAID[1](box), user=ADA, idempotency_key="k") == Ok(box)
        app.dispose()


def test_an_event_a_run_holds_whose_field_changed_type_is_stranded_as_the_event_store_refuses_it(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    """A deploy that changes the type of an event's field without a new schema version:
    ``read_stream`` refuses the stored event, and so does a run holding it.  Before, the run
    rebuilt the event by ``__init__`` alone and resumed with ``Paid(box=UUID(...))`` where
    the deployed ``Paid`` declares ``box: int`` (the check listed nothing)."""
    old, flow, (pay, box) = _deploy(app_on, clock, 1)
    made = old.dispatch(box, Begin(uuid.uuid4()), user=ADA)
    assert isinstance(made, Ok)
    run_id = old.start_workflow(flow, Begin(made.data), user=ADA)
    assert old.dispatch(pay, Begin(made.data), user=ADA) == Ok(None)
    assert old.run_worker(once=True)["resumed"] == 1  # napping, the Paid in its state
    old.dispose()

    app, flow, _ = _deploy(app_on, clock, 0)
    unfit = "does not load as Paid: expected an integer at $.box"
    refused = app.read_stream(UpcBox, made.data, user=ADA)
    assert isinstance(refused, Failure) and unfit in refused.message
    reason = (
        f"at step nap: the stored state cannot be read: stored {__name__}.Paid ('paid', stored at schema version 1) "
        f"{unfit}; a deploy with the class as the run stored it resumes the run"
    )
    assert [(p.path, p.reason, p.run_ids) for p in app.check_runs()] == [("nap", reason, (run_id,))]
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 0
    run = app.get_run(run_id)
    assert run is not None
    assert (run.status, run.path, run.error) == ("suspended", "nap", {"code": "stranded", "message": reason})
    assert str(made.data) not in reason
    app.dispose()

    back, flow, _ = _deploy(app_on, clock, 1)  # the class as the run stored it
    assert back.run_worker(once=True)["resumed"] == 1
    assert back.result(flow, run_id, user=ADA) == Ok(f"Paid(box={made.data!r})")
