"""A deploy that changes the classes a suspended run's stored values need — one no longer
registered, or one whose fields changed so that the stored value cannot be rebuilt —
strands the run, intact, instead of failing it (DESIGN §8: an incompatible run is stranded,
never failed); a later deploy that can read it again resumes it.  Both databases.

Each "deploy" is a new App on the same database with the same workflow definition; only
its classes differ.  A damaged row (an unknown tag, a missing key) still fails alone
(tests/workflows/test_workflows.py): no deploy can read it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import run_info
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, Workflow, manual, ok
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)


@attrs.frozen
class Begin:
    n: int


def _note_class(*, author_required: bool) -> type[Any]:
    """One version of the class ``Note``: what two deploys of one module would define."""
    fields: dict[str, Any] = {"text": attrs.field(type=str)}
    if author_required:
        fields["author"] = attrs.field(type=str)
    cls = attrs.make_class("Note", fields, frozen=True)
    cls.__module__ = __name__
    cls.__qualname__ = "Note"
    return cls


NOTE = _note_class(author_required=False)
#: The same class after a deploy added a field without a default.
NOTE_WITH_AUTHOR = _note_class(author_required=True)


def _deploy(app_on: Callable[..., App], clock: FakeClock, classes: list[type[Any]]) -> tuple[App, Workflow[Any]]:
    """An App with the workflow ``classes:noted`` (the same definition in every deploy)."""
    f: Feature[Any] = Feature("classes")
    pipeline = (
        f.workflow_pipeline(Begin)
        .compute("note", lambda c: NOTE(f"note {c.payload.n}"))
        .wait("PT1M")
        .compute("read", lambda c: c.steps["note"].text)
    )
    flow = f.workflow("noted", trigger=manual(Begin), pipeline=pipeline)
    return app_on([f], clock=clock, value_types=classes), flow


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def _stored(app: App, run_id: uuid.UUID) -> tuple[Any, Any, Any]:
    with app.engine.connect() as conn:
        row = conn.execute(
            sa.select(workflow_runs.c.path, workflow_runs.c.state, workflow_runs.c.payload).where(
                workflow_runs.c.run_id == run_id
            )
        ).one()
    return row.path, row.state, row.payload


@pytest.mark.parametrize(
    ("later", "words"),
    [
        ([], "is not registered in this App"),
        ([NOTE_WITH_AUTHOR], "cannot be rebuilt"),
    ],
    ids=["class-dropped", "required-field-added"],
)
def test_a_run_whose_stored_value_this_deploy_cannot_rebuild_is_stranded_then_resumed(
    app_on: Callable[..., App], clock: FakeClock, user: User, later: list[type[Any]], words: str
) -> None:
    v1, flow = _deploy(app_on, clock, [NOTE])
    run_id = v1.start_workflow(flow, Begin(7), user=user)
    kept = v1.start_workflow(flow, Begin(8), user=user)
    assert run_info(v1, run_id).status == "suspended"
    before = _stored(v1, run_id)

    v2, _ = _deploy(app_on, clock, later)
    checked = v2.check_runs()  # before the deploy: reads only
    clock.advance(minutes=2)
    v2.run_worker(once=True)
    info = run_info(v2, run_id)
    assert (info.status, info.error["code"]) == ("suspended", "stranded"), info.error
    assert words in info.error["message"] and "Note" in info.error["message"]
    # The check finds them too, dropped or changed, with the very reason the worker marks
    # the runs with.
    assert [(p.workflow, p.path, p.reason, p.run_ids) for p in checked] == [
        ("classes:noted", "@wait", info.error["message"], tuple(sorted((run_id, kept))))
    ]
    assert "SELECT" not in info.error["message"] and "Traceback" not in info.error["message"]
    assert _stored(v2, run_id) == before  # nothing of it changed but the mark
    assert run_info(v2, kept).status == "suspended"  # the other run too: each is stranded alone
    # The same deploy passes it by from now on, without marking it again.
    marked = info.error
    assert v2.run_worker(once=True)["resumed"] == 0
    assert run_info(v2, run_id).error == marked

    # A deploy with the class as the run stored it resumes both runs where they stopped.
    v3, _ = _deploy(app_on, clock, [NOTE])
    assert v3.run_worker(once=True)["resumed"] == 2
    for rid, n in ((run_id, 7), (kept, 8)):
        done = run_info(v3, rid)
        assert (done.status, done.error) == ("completed", None)
        assert done.steps["read"] == f"note {n}"


def test_a_run_whose_payload_class_changed_is_stranded_not_failed(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """The payload is decoded before any step: a payload class that lost a value the stored
    payload carries strands the run the same way."""
    v1, flow = _deploy(app_on, clock, [NOTE])
    run_id = v1.start_workflow(flow, Begin(3), user=user)
    stored = _stored(v1, run_id)[2]
    assert stored["c"].endswith(".Begin")
    moved = {**stored, "c": "elsewhere.Begin"}  # as if stored by a deploy that had it elsewhere
    with v1.engine.begin() as conn:
        conn.execute(sa.update(workflow_runs).where(workflow_runs.c.run_id == run_id).values(payload=moved))
    clock.advance(minutes=2)
    v1.run_worker(once=True)
    info = run_info(v1, run_id)
    assert (info.status, info.error["code"]) == ("suspended", "stranded"), info.error
    assert "elsewhere.Begin" in info.error["message"]


@attrs.frozen
class Order:
    """What ``classes:paid`` takes in the second deploy; ``Begin`` stays registered."""

    ref: str


def _deploy_paid(app_on: Callable[..., App], clock: FakeClock, payload: type[Any]) -> tuple[App, Workflow[Any]]:
    f: Feature[Any] = Feature("classes")
    f.workflow("other", trigger=manual(Begin), pipeline=f.workflow_pipeline(Begin).compute("n", lambda c: 1))
    f.workflow("keeps", trigger=manual(Order), pipeline=f.workflow_pipeline(Order).compute("n", lambda c: 1))
    read = (lambda c: c.payload.n) if payload is Begin else (lambda c: c.payload.ref.upper())
    pipeline = f.workflow_pipeline(payload).wait("PT1M", name="nap").compute("read", read)
    flow = f.workflow("paid", trigger=manual(payload), pipeline=pipeline)
    return app_on([f], clock=clock), flow


def test_a_run_whose_workflow_now_takes_another_payload_class_is_stranded_then_resumed(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """A deploy whose workflow takes another payload class (both registered): before, the
    check listed nothing and the worker resumed the run with the old payload, failing it
    with ``internal_error`` (``AttributeError``) in the first resolver that read it."""
    v1, flow = _deploy_paid(app_on, clock, Begin)
    run_id = v1.start_workflow(flow, Begin(3), user=user)
    reason = (
        "at step nap: the stored state cannot be read: its payload is a Begin, and workflow classes:paid "
        "now takes Order; a deploy with the class as the run stored it resumes the run"
    )
    v2, _ = _deploy_paid(app_on, clock, Order)
    (problem,) = v2.check_runs()
    assert (problem.workflow, problem.path, problem.reason) == ("classes:paid", "nap", reason)
    assert problem.run_ids == (run_id,)
    clock.advance(minutes=2)
    v2.run_worker(once=True)
    info = run_info(v2, run_id)
    assert (info.status, info.path, info.error) == ("suspended", "nap", {"code": "stranded", "message": reason})

    v3, _ = _deploy_paid(app_on, clock, Begin)  # the payload class back: the run resumes
    assert v3.check_runs() == []
    v3.run_worker(once=True)
    done = run_info(v3, run_id)
    assert (done.status, done.error, done.steps["read"]) == ("completed", None, 3)


# --- an event wait -----------------------------------------------------------------------------


@attrs.frozen
class Awaited:
    ref: uuid.UUID


@attrs.frozen
class Arrived:
    ref: uuid.UUID
    note: str


class CadParcel(Entity):
    __tablename__ = "cad_parcel"
    label: Mapped[str]


def _deploy_waiting(
    app_on: Callable[..., App], clock: FakeClock, classes: list[type[Any]]
) -> tuple[App, Workflow[Any], Any]:
    f: Feature[Any] = Feature("classes_ev")
    f.entity(CadParcel)
    f.event(Arrived)
    emit = f.write_handler(
        "emit",
        f.pipeline(Arrived)
        .create("parcel", CadParcel, data=lambda c: CadParcel(label=c.payload.note))
        .append_event(CadParcel, id=lambda c: c.steps["parcel"].id, event=lambda c: c.payload)
        .return_(lambda c: ok(None)),
    )
    pipeline = (
        f.workflow_pipeline(Awaited)
        .compute("note", lambda c: NOTE("kept"))
        .wait_for_event("got", Arrived, key=lambda c: c.payload.ref, event_key=lambda e: e.ref, timeout="PT1H")
        .compute("read", lambda c: (c.steps["note"].text, None if c.steps["got"] is None else c.steps["got"].note))
    )
    flow = f.workflow("awaiting", trigger=manual(Awaited), pipeline=pipeline)
    return app_on([f], clock=clock, value_types=classes), flow, emit


def test_an_event_that_came_while_the_run_could_not_be_read_resumes_it_after_the_class_is_back(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """No lost wake-up: the event the run waited for arrives under the deploy that cannot
    read the run; the run is stranded, and the deploy with the class back resumes it with
    that event, not with the timeout."""
    v1, flow, _ = _deploy_waiting(app_on, clock, [NOTE])
    ref = uuid.uuid4()
    run_id = v1.start_workflow(flow, Awaited(ref), user=user)
    assert (run_info(v1, run_id).status, run_info(v1, run_id).path) == ("suspended", "got")

    v2, _, emit = _deploy_waiting(app_on, clock, [])
    assert v2.dispatch(emit, Arrived(ref, "here"), user=user) == Ok(None)
    v2.run_worker(once=True)
    info = run_info(v2, run_id)
    assert (info.status, info.error["code"]) == ("suspended", "stranded"), info.error
    assert "is not registered in this App" in info.error["message"]

    v3, _, _ = _deploy_waiting(app_on, clock, [NOTE])
    v3.run_worker(once=True)
    done = run_info(v3, run_id)
    assert (done.status, done.steps["read"]) == ("completed", ("kept", "here")), done


def test_a_stored_dict_that_looks_like_a_class_is_not_taken_for_one(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """User data holding the codec's own tag keys is data: the check's filter lets it
    through, its exact read clears it, and the worker resumes the run."""
    f: Feature[Any] = Feature("lookalike")
    ghost = {"$t": "attrs", "c": "nowhere.Ghost", "v": {}}
    pipeline = f.workflow_pipeline(Begin).compute("raw", lambda c: ghost).wait("PT1M").compute("seen", lambda c: 1)
    flow = f.workflow("ghostly", trigger=manual(Begin), pipeline=pipeline)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Begin(1), user=user)
    assert app.check_runs() == []
    clock.advance(minutes=2)
    app.run_worker(once=True)
    done = run_info(app, run_id)
    assert (done.status, done.steps["raw"]) == ("completed", ghost)
