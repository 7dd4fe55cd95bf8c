"""A ``StrEnum`` or ``IntEnum`` member is a ``str`` or an ``int`` too: stored in a run's state
or as an idempotent call's answer, it read back as the plain text or number, though its field
is typed as the enum (found porting the cargo shipping sample, whose locations are a
``StrEnum``).  A member whose name is not its value then missed a dict keyed by members,
and ``.name`` raised; a dict keyed by members came back keyed by their text.  Now each
reads back as the member, on both databases."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from datetime import timedelta

import attrs
from _support import ok_data

from kumiko_typed import App, Feature, User, manual, ok
from kumiko_typed.testing import FakeClock


class Port(enum.StrEnum):
    HONGKONG = "CNHKG"
    TOKYO = "JPTYO"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


#: Keyed by members: a plain "CNHKG" is no key of it (a member hashes by its name).
BERTHS = {Port.HONGKONG: 7, Port.TOKYO: 3}


@attrs.frozen
class Ship:
    port: Port
    priority: Priority


@attrs.frozen
class Berth:
    port: Port
    priority: Priority
    berth: int


feature = Feature("mixin_enums", value_types=[Berth])

berth = feature.write_handler(
    "berth",
    feature.pipeline(Ship).return_(lambda c: ok(Berth(c.payload.port, c.payload.priority, BERTHS[c.payload.port]))),
)

later = feature.workflow(
    "later",
    trigger=manual(Ship),
    pipeline=feature.workflow_pipeline(Ship)
    .compute("next", lambda c: Port.TOKYO if c.payload.port == Port.HONGKONG else Port.HONGKONG)
    .compute("queue", lambda c: {c.payload.port: [c.payload.priority]})
    .wait(timedelta(hours=1))
    # Read after the resume: the payload and the step's value come back from the stored state.
    .compute("berths", lambda c: (BERTHS[c.payload.port], BERTHS[c.steps["next"]], c.steps["queue"][Port.HONGKONG]))
    .compute("names", lambda c: (c.payload.port.name, c.steps["next"].name, c.payload.priority.name)),
)

USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def test_an_idempotent_answer_holding_mixin_enums_comes_back_as_members(app_on: Callable[..., App]) -> None:
    app = app_on([feature])
    first = ok_data(app.dispatch(berth, Ship(Port.HONGKONG, Priority.HIGH), user=USER, idempotency_key="k"))
    again = ok_data(app.dispatch(berth, Ship(Port.HONGKONG, Priority.HIGH), user=USER, idempotency_key="k"))
    assert first == again == Berth(Port.HONGKONG, Priority.HIGH, 7)
    assert type(again.port) is Port and type(again.priority) is Priority
    # A JSON repeat of the same call (members spelt as their values) is the same request.
    json_again = app.dispatch_json(berth.name, {"port": "CNHKG", "priority": 2}, user=USER, idempotency_key="k")
    assert type(ok_data(json_again).port) is Port


def test_a_run_reads_its_mixin_enums_back_as_members_after_a_wait(app_on: Callable[..., App]) -> None:
    clock = FakeClock()
    app = app_on([feature], clock=clock)
    run_id = app.start_workflow(later, Ship(Port.HONGKONG, Priority.LOW), user=USER)
    clock.advance(timedelta(hours=1))
    app.run_worker(once=True)
    run = app.get_run(run_id)
    assert run is not None and run.status == "completed", run
    assert run.steps["berths"] == (7, 3, [Priority.LOW])
    assert [type(k) for k in run.steps["queue"]] == [Port]
    assert run.steps["names"] == ("HONGKONG", "TOKYO", "LOW")
    assert type(run.steps["next"]) is Port
