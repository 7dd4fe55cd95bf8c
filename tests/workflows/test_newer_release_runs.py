"""A run stored by a newer release, read by a worker of an older one beside it (a rolling
deploy), on SQLite and PostgreSQL.  The newer release may store values under type tags
the older one does not know; that is no damage.  Each run's state records the stored form
it was written in (``format``): a worker that reads an older form only leaves the run
stranded, intact, for a worker of the newer release, which resumes it.  A tag unknown in a
form the worker reads is damage, and fails the run as before."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from kumiko_typed import App, Feature, User, _serialization, _stored_classes, _workflow_engine, manual
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))
#: A value as a newer release might store it: under a tag this release does not know.
NEW_VALUE = {"$t": "ipv4", "v": "10.0.0.1"}


@attrs.frozen
class Job:
    n: int


f = Feature("nrr")
flow = f.workflow(
    "flow",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .compute("first", lambda c: c.payload.n)
    .wait("PT1M")
    .compute("second", lambda c: c.steps["first"] + 1),
)


def _state(app: App, run_id: uuid.UUID) -> dict[str, Any]:
    with app.engine.connect() as conn:
        state: dict[str, Any] = conn.scalar(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id))
    return state


def _store(app: App, run_id: uuid.UUID, state: dict[str, Any]) -> None:
    with app.engine.begin() as conn:
        conn.execute(sa.update(workflow_runs).where(workflow_runs.c.run_id == run_id).values(state=state))


def _suspended(app_on: AppOn) -> tuple[App, FakeClock, uuid.UUID, dict[str, Any]]:
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Job(1), user=ADA)
    state = _state(app, run_id)
    assert state["format"] == _serialization.WITHOUT_VALUE_PAGES  # the oldest form that reads it
    clock.advance(minutes=2)
    return app, clock, run_id, state


def _newer_release(monkeypatch: pytest.MonkeyPatch, form: int) -> None:
    """This process's code as a newer release's: it writes and reads up to ``form``."""
    for module in (_serialization, _stored_classes, _workflow_engine):
        monkeypatch.setattr(module, "FORMAT", form)


def test_a_run_a_newer_release_stored_with_an_unknown_tag_is_left_for_it_not_failed(app_on: AppOn) -> None:
    app, _clock, run_id, state = _suspended(app_on)
    values = state["values"]["v"]
    with_new_value = {**state["values"], "v": {**values, "ip": NEW_VALUE}}
    newer = {**state, "format": _serialization.FORMAT + 1, "values": with_new_value}
    _store(app, run_id, newer)

    assert app.run_worker(once=True)["resumed"] == 0
    info = app.get_run(run_id)
    assert info is not None and info.status == "suspended" and info.error is not None
    assert info.error["code"] == "stranded"
    assert info.error["message"] == (
        f"at step @wait: it was stored by a newer release (stored form {_serialization.FORMAT + 1}; this one reads"
        f" up to {_serialization.FORMAT}): a worker of that release resumes it"
    )
    assert [r.run_id for r in app.runs(stranded=True)] == [run_id]
    stored = _state(app, run_id)
    assert stored == newer  # intact, for the newer release
    # Marked once: later passes of this release pass it by without writing.
    assert app.run_worker(once=True)["resumed"] == 0
    assert app.get_run(run_id) == info
    # The pre-deploy check of this release against that database says the same.
    assert [(i.path, i.reason, i.run_ids) for i in app.check_runs()] == [("@wait", info.error["message"], (run_id,))]


def test_the_newer_release_resumes_a_run_an_older_one_left(app_on: AppOn, monkeypatch: pytest.MonkeyPatch) -> None:
    app, _clock, run_id, state = _suspended(app_on)
    _store(app, run_id, {**state, "format": _serialization.FORMAT + 1})
    assert app.run_worker(once=True)["resumed"] == 0  # this release leaves it (marked stranded)
    _newer_release(monkeypatch, _serialization.FORMAT + 1)
    newer = app_on([f], clock=FakeClock(T0.replace(minute=5)))
    assert newer.run_worker(once=True)["resumed"] == 1  # the older release's mark is not its own
    info = newer.get_run(run_id)
    assert info is not None and (info.status, info.steps["second"], info.error) == ("completed", 2, None)


def test_an_unknown_tag_in_a_form_this_release_reads_is_damage_and_fails_the_run(app_on: AppOn) -> None:
    app, _clock, run_id, state = _suspended(app_on)
    values = state["values"]["v"]
    _store(app, run_id, {**state, "values": {**state["values"], "v": {**values, "ip": NEW_VALUE}}})
    app.run_worker(once=True)
    info = app.get_run(run_id)
    assert info is not None and info.status == "failed"
    reason = "the stored state cannot be read: unknown stored value tag 'ipv4'"
    assert info.error == {"code": "unstorable_state", "message": f"at step @wait: {reason}"}
