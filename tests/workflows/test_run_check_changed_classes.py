"""The pre-deploy check finds the runs whose stored values name a class the checked App
has CHANGED under the same name (a field without a default added, an enum member a stored
value uses removed, a field that no longer takes the stored value), with the very reason
the worker strands them with; a compatible change (a field with a default, an enum member
added) lists nothing.  Both databases give the same groups.

Each "deploy" is a new App on the same database with the same workflow definition; only
its classes differ (made under one module and name, as two deploys of one module would).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from kumiko_typed import App, Feature, User, manual
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)


@attrs.frozen
class Begin:
    n: int
    what: str


def _note(**extra: Any) -> type[Any]:
    """A version of the class ``Note`` (``extra``: the fields a later deploy added or changed)."""
    fields: dict[str, Any] = {"text": attrs.field(type=str), **extra}
    cls = attrs.make_class("Note", fields, frozen=True)
    cls.__module__, cls.__qualname__ = __name__, "Note"
    return cls


def _tint(*members: str) -> type[enum.Enum]:
    """A version of the enum ``Tint``."""
    return enum.Enum("Tint", [(m, m.lower()) for m in members], module=__name__, qualname="Tint")  # type: ignore[return-value]


NOTE, TINT = _note(), _tint("RED", "BLUE")
#: What later deploys define under the same names.
LATER: dict[str, tuple[type[Any], type[enum.Enum]]] = {
    "unchanged": (_note(), _tint("RED", "BLUE")),
    "field-without-default": (_note(author=attrs.field(type=str)), TINT),
    "field-with-default": (_note(author=attrs.field(type=str, default="?")), TINT),
    "field-type-changed": (_note(text=attrs.field(type=int, validator=attrs.validators.instance_of(int))), TINT),
    "member-removed": (NOTE, _tint("RED")),
    "member-added": (NOTE, _tint("RED", "BLUE", "GREEN")),
    "both": (_note(author=attrs.field(type=str)), _tint("RED")),
}


def _value(what: str, n: int) -> object:
    """What a run started with ``Begin(n, what)`` stores (made with the first deploy's classes)."""
    return {
        "note": lambda: NOTE(f"note {n}"),
        "blue": lambda: TINT["BLUE"],
        "red": lambda: TINT["RED"],
        "nested": lambda: {"box": [n, {"inner": NOTE(f"deep {n}")}]},
        "plain": lambda: {"n": n, "words": ["no", "class"]},
    }[what]()


def _deploy(app_on: Callable[..., App], clock: FakeClock, classes: tuple[type[Any], ...]) -> App:
    """An App with the workflows ``chg:held`` (waits after storing ``value``) and
    ``chg:other`` (the same, its wait named otherwise: another path)."""
    f: Feature[Any] = Feature("chg")
    for name, wait in (("held", "hold"), ("other", "pause")):
        pipeline = (
            f.workflow_pipeline(Begin)
            .compute("value", lambda c: _value(c.payload.what, c.payload.n))
            .wait("PT1M", name=wait)
            .compute("seen", lambda c: repr(c.steps["value"]))
        )
        f.workflow(name, trigger=manual(Begin), pipeline=pipeline)
    return app_on([f], clock=clock, value_types=list(classes))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


KINDS = ("note", "blue", "red", "nested", "plain")
#: The kinds of run each deploy cannot rebuild, by the class that fails them.
FAILING: dict[str, dict[str, tuple[str, ...]]] = {
    "unchanged": {},
    "field-without-default": {"Note": ("note", "nested")},
    "field-with-default": {},
    "field-type-changed": {"Note": ("note", "nested")},
    "member-removed": {"Tint": ("blue",)},
    "member-added": {},
    "both": {"Note": ("note", "nested"), "Tint": ("blue",)},
}


@pytest.mark.parametrize("later", sorted(LATER))
def test_the_check_lists_the_runs_a_changed_class_strands_with_the_workers_reason(
    app_on: Callable[..., App], clock: FakeClock, user: User, later: str
) -> None:
    v1 = _deploy(app_on, clock, (NOTE, TINT))
    flows = v1.workflows
    runs: dict[tuple[str, str], list[uuid.UUID]] = {}
    for n in range(3):  # many runs of each kind, in two workflows (two paths)
        for kind in KINDS:
            for name, path in (("chg:held", "hold"), ("chg:other", "pause")):
                run_id = v1.start_workflow(flows[name], Begin(n, kind), user=user)
                runs.setdefault((name, path), []).append(run_id)
                runs.setdefault((name, kind), []).append(run_id)

    v2 = _deploy(app_on, clock, LATER[later])
    checked = v2.check_runs()  # before the deploy: reads only
    expected = sorted(
        (name, path, cls, tuple(sorted(r for kind in kinds for r in runs[name, kind])))
        for cls, kinds in FAILING[later].items()
        for name, path in (("chg:held", "hold"), ("chg:other", "pause"))
    )
    found: dict[tuple[str, str | None, str], list[uuid.UUID]] = {}
    for g in checked:
        found.setdefault((g.workflow, g.path, _named(g.reason)), []).extend(g.run_ids)
    assert sorted((*key, tuple(sorted(ids))) for key, ids in found.items()) == expected
    assert len(checked) == len(expected)  # reasons name fields, never a run's values: one group each
    for group in checked:
        assert not any(f"note {n}" in group.reason or f"deep {n}" in group.reason for n in range(3)), group
        assert "'blue'" not in group.reason, group
    for group in checked:
        assert group.reason.startswith(f"at step {group.path}: the stored state cannot be read: stored "), group
        assert "SELECT" not in group.reason and "Traceback" not in group.reason

    clock.advance(minutes=2)
    v2.run_worker(once=True)
    reasons = {run_id: g.reason for g in checked for run_id in g.run_ids}
    for run_id in (r for rs in runs.values() for r in rs):
        info = v2.get_run(run_id)
        assert info is not None
        if run_id in reasons:  # the worker strands it, marked with what the check said
            assert (info.status, info.error) == ("suspended", {"code": "stranded", "message": reasons[run_id]})
        else:
            assert (info.status, info.error) == ("completed", None), info.error
    assert v2.check_runs() == checked  # stranded runs are still listed, the same way


def _named(reason: str) -> str:
    """Which class a reason says cannot be rebuilt."""
    for cls in ("Note", "Tint"):
        if f"stored {__name__}.{cls} cannot be rebuilt" in reason:
            return cls
    raise AssertionError(reason)


def _state(app: App, run_id: uuid.UUID) -> Any:
    with app.engine.connect() as conn:
        return conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()


def _damage(app: App, run_id: uuid.UUID) -> None:
    """Add a value no codec reads (an unknown tag) to the run's stored values."""
    state = _state(app, run_id)
    values = {**state["values"], "v": {**state["values"]["v"], "bad": {"$t": "bogus", "v": 1}}}
    with app.engine.begin() as conn:
        conn.execute(
            workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(state={**state, "values": values})
        )


def test_a_damaged_value_beside_a_class_is_listed_with_the_reason_the_worker_fails_the_run_with(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    app = _deploy(app_on, clock, (NOTE, TINT))
    run_id = app.start_workflow(app.workflows["chg:held"], Begin(1, "note"), user=user)
    fine = app.start_workflow(app.workflows["chg:held"], Begin(2, "note"), user=user)
    _damage(app, run_id)

    (problem,) = app.check_runs()
    assert (problem.workflow, problem.path, problem.run_ids) == ("chg:held", "hold", (run_id,))
    assert problem.reason == "the stored state cannot be read: unknown stored value tag 'bogus'"
    clock.advance(minutes=2)
    app.run_worker(once=True)
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.error) == (
        "failed",
        {"code": "unstorable_state", "message": f"at step hold: {problem.reason}"},
    )
    done = app.get_run(fine)
    assert done is not None and done.status == "completed"


def test_a_run_whose_state_names_no_class_is_not_decoded(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """Only a state that names a class is decoded (and its payload, always a class): the
    same damage in a state of plain values is not looked for — the worker finds it."""
    app = _deploy(app_on, clock, (NOTE, TINT))
    plain = app.start_workflow(app.workflows["chg:held"], Begin(1, "plain"), user=user)
    _damage(app, plain)
    assert app.check_runs() == []
    later = _deploy(app_on, clock, LATER["both"])
    assert later.check_runs() == []


def test_a_changed_payload_class_is_listed_for_every_run_its_stored_payload_fails(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """The payload is decoded for every run, whatever its state names: a stored payload
    the payload class no longer takes (as if stored before ``what`` was added) lists its
    run, and no other."""
    app = _deploy(app_on, clock, (NOTE, TINT))
    runs = {n: app.start_workflow(app.workflows["chg:held"], Begin(n, "plain"), user=user) for n in (1, 2, 3)}
    payload = _payload(app, runs[2])
    stored = {**payload, "v": {"n": payload["v"]["n"]}}
    with app.engine.begin() as conn:
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == runs[2]).values(payload=stored))

    (problem,) = app.check_runs()
    assert (problem.path, problem.run_ids) == ("hold", (runs[2],))
    assert f"stored {__name__}.Begin cannot be rebuilt" in problem.reason and "what" in problem.reason
    clock.advance(minutes=2)
    app.run_worker(once=True)
    info = app.get_run(runs[2])
    assert info is not None and info.error == {"code": "stranded", "message": problem.reason}


def _payload(app: App, run_id: uuid.UUID) -> Any:
    with app.engine.connect() as conn:
        return conn.execute(sa.select(workflow_runs.c.payload).where(workflow_runs.c.run_id == run_id)).scalar_one()


@pytest.mark.parametrize("kept_as", ["fine", "payload-changed", "state-a-number"])
def test_a_run_kept_at_its_start_is_judged_as_the_worker_resumes_it(
    app_on: Callable[..., App], clock: FakeClock, user: User, kept_as: str
) -> None:
    """A triggered run whose first segment lost a race is kept suspended at its start,
    without a path (``WorkflowEngine.create``); a worker runs it from its start, after
    decoding its payload: the check lists it only if that payload cannot be rebuilt (the
    worker strands it) or its state is damaged (the worker fails it)."""
    app = _deploy(app_on, clock, (NOTE, TINT))
    run_id = app.start_workflow(app.workflows["chg:held"], Begin(1, "note"), user=user)
    payload = _payload(app, run_id)
    kept: dict[str, Any] = {"status": "suspended", "path": None, "state": {}, "wake_at": T0}
    if kept_as == "payload-changed":
        kept["payload"] = {**payload, "v": {"n": 1}}  # stored before ``what`` was added
    if kept_as == "state-a-number":
        kept["state"] = 5
    with app.engine.begin() as conn:
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(**kept))

    checked = app.check_runs()
    app.run_worker(once=True)
    info = app.get_run(run_id)
    assert info is not None
    if kept_as == "payload-changed":
        assert [(g.path, g.run_ids) for g in checked] == [(None, (run_id,))]
        assert (info.status, info.error) == ("suspended", {"code": "stranded", "message": checked[0].reason})
    elif kept_as == "state-a-number":
        assert [(g.path, g.run_ids) for g in checked] == [(None, (run_id,))]
        assert checked[0].reason.startswith("the stored state cannot be read: "), checked[0].reason
        message = f"at step None: {checked[0].reason}"
        assert (info.status, info.error) == ("failed", {"code": "unstorable_state", "message": message})
    else:
        assert checked == []
        assert (info.status, info.path) == ("suspended", "hold")  # ran from its start to its wait
