"""An entity a suspended run holds (a ``create``'s ``Saved``, a read's row) is stored by its
aggregate type, the name its feature registers it under (``feature.entity(Cls, name=)``)
and its event stream carries: a deploy that renames the class, or moves it to another
module, and registers it under the same aggregate type resumes the run with it, as a held
event is read by its registered name.  Before, a held entity was stored by module and
class name alone, and such a deploy stranded every run holding one.  A run an earlier
release stored (module and class name only) still resumes.  Both databases."""

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

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


class HenBox(Entity):
    """Release A's entity: aggregate type ``hen-box`` by default."""

    __tablename__ = "hen_box"
    label: Mapped[str]


class HenCrate(Entity):
    """Release B's: ``HenBox`` renamed to ``Crate`` and moved to ``storage.crates`` (its
    own table here: one process cannot map two versions of one table)."""

    __tablename__ = "hen_crate"
    label: Mapped[str]


HenCrate.__module__, HenCrate.__name__, HenCrate.__qualname__ = "storage.crates", "Crate", "Crate"


@attrs.frozen
class Begin:
    label: str


def _deploy(app_on: Callable[..., App], clock: FakeClock, box: type[Any]) -> tuple[App, Workflow[Any]]:
    f: Feature[Any] = Feature("hen")
    f.entity(box, name="hen-box")
    held = f.workflow(
        "held",
        trigger=manual(Begin),
        pipeline=f.workflow_pipeline(Begin)
        .create("box", box, data=lambda c: box(label=c.payload.label))
        .wait("PT1M", name="nap")
        .return_(lambda c: ok((type(c.steps["box"].entity).__name__, c.steps["box"].entity.label))),
    )
    return app_on([f], clock=clock), held


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def _stored_box(app: App, run_id: uuid.UUID) -> dict[str, Any]:
    with app.engine.connect() as conn:
        state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()
    entity: dict[str, Any] = state["values"]["v"]["box"]["v"]["entity"]
    return entity


def test_a_run_holding_an_entity_resumes_after_its_class_is_renamed_and_moved(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    app, held = _deploy(app_on, clock, HenBox)
    run_id = app.start_workflow(held, Begin("fragile"), user=ADA)
    assert (run_info(app, run_id).status, run_info(app, run_id).path) == ("suspended", "nap")
    stored = _stored_box(app, run_id)
    assert (stored["a"], stored["c"]) == ("hen-box", f"{__name__}.HenBox")
    app.dispose()

    app, held = _deploy(app_on, clock, HenCrate)
    assert app.check_runs() == []  # the pre-deploy check reads it as the worker does
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(held, run_id, user=ADA) == Ok(("Crate", "fragile")), run_info(app, run_id).error


def test_a_run_an_earlier_release_stored_by_class_name_still_resumes(
    app_on: Callable[..., App], clock: FakeClock
) -> None:
    """An earlier release stored an entity by its module and class name alone, and reads
    it so (it still does: its workers resume this release's runs during a rolling deploy).
    A run stored so is read by that name while the class is there under it."""
    app, held = _deploy(app_on, clock, HenBox)
    run_id = app.start_workflow(held, Begin("old"), user=ADA)
    with app.engine.begin() as conn:
        state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()
        entity = state["values"]["v"]["box"]["v"]["entity"]
        state["values"]["v"]["box"]["v"]["entity"] = {k: v for k, v in entity.items() if k != "a"}
        conn.execute(sa.update(workflow_runs).where(workflow_runs.c.run_id == run_id).values(state=state))
    assert "a" not in _stored_box(app, run_id)
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(held, run_id, user=ADA) == Ok(("HenBox", "old"))


def test_a_deploy_that_changes_the_aggregate_type_strands_the_run(app_on: Callable[..., App], clock: FakeClock) -> None:
    """The aggregate type is the entity's stored name, as its stream's: registered under
    another, the class is not the one the run stored (its streams would not be read as
    its either), and the run is stranded saying so, for a deploy that registers it back."""
    app, held = _deploy(app_on, clock, HenBox)
    run_id = app.start_workflow(held, Begin("kept"), user=ADA)
    app.dispose()

    f: Feature[Any] = Feature("hen")
    f.entity(HenCrate, name="crate")
    f.workflow(
        "held",
        trigger=manual(Begin),
        pipeline=f.workflow_pipeline(Begin)
        .create("box", HenCrate, data=lambda c: HenCrate(label=c.payload.label))
        .wait("PT1M", name="nap"),
    )
    app = app_on([f], clock=clock)
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 0
    error = run_info(app, run_id).error
    assert error["code"] == "stranded"
    assert "stored entity 'hen-box' is not registered in this App" in error["message"]
