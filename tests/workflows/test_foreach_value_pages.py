"""A ``for_each`` over a step value stores its items once (stored form 5): at its first
suspension a loop over ``c.steps["lines"]`` stored the value as its part and the items
again as the loop's pages, twice the bytes of the items.  Now the value is stored as pages
the loop reads as its items.  Both databases: the bytes a run holds are those of a loop
over a computed list; the loop goes on as a loop over a copy of the value (stored as
before) does, items, order and what each iteration sees (an item changed in place, the
value changed in place, workers restarted), nested loops, an empty and a short value, a
loop over a filtered value (stored as before); a worker of stored form 4 leaves such a
run for this release."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import run_info

from kumiko_typed import App, Feature, User, _serialization, _stored_classes, _workflow_engine, manual
from kumiko_typed._tables import workflow_parts, workflow_runs
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@attrs.frozen
class Go:
    n: int


def _lines(n: int) -> list[dict[str, Any]]:
    return [{"name": f"line {i:04}", "count": i, "id": uuid.UUID(int=i)} for i in range(n)]


def _held(app: App, run_id: uuid.UUID) -> tuple[int, list[str]]:
    """The bytes of JSON the database holds for a run (its state and its parts), and the
    names of its parts."""
    with app.engine.connect() as conn:
        state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()
        stmt = sa.select(workflow_parts.c.name, workflow_parts.c.value).where(workflow_parts.c.run_id == run_id)
        parts = conn.execute(stmt).all()
    return len(json.dumps(state)) + sum(len(json.dumps(value)) for _, value in parts), sorted(n for n, _ in parts)


def _until_done(apps: list[App], run_id: uuid.UUID, clock: FakeClock, each: Callable[[], None] = lambda: None) -> Any:
    """Resume the run until it is no longer suspended, each segment by the next of
    ``apps`` (each an App of its own on the database: a worker restarted)."""
    segments = 0
    while run_info(apps[0], run_id).status == "suspended":
        each()
        clock.advance(minutes=1)
        apps[segments % len(apps)].run_worker(once=True)
        segments += 1
    return run_info(apps[0], run_id)


def test_a_loop_over_a_step_value_stores_its_items_once(app_on: AppOn, clock: FakeClock, user: User) -> None:
    """2,000 items: a loop over the step value holding them stores what a loop over a
    list it computes stores (the items once), not twice that (the value's part and the
    loop's pages: about 340 KB against 170 KB), at its first suspension and after."""
    f = Feature("fvbytes")
    over_step = f.workflow(
        "step",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("lines", lambda c: _lines(c.payload.n))
        .for_each("line", over=lambda c: c.steps["lines"], do=lambda b: b.wait("PT1M")),
    )
    over_list = f.workflow(
        "list",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).for_each(
            "line", over=lambda c: _lines(c.payload.n), do=lambda b: b.wait("PT1M")
        ),
    )
    app = app_on([f], clock=clock)
    step_id = app.start_workflow(over_step, Go(2_000), user=user)
    list_id = app.start_workflow(over_list, Go(2_000), user=user)
    step_bytes, step_parts = _held(app, step_id)
    list_bytes, list_parts = _held(app, list_id)
    assert list_bytes > 150_000, list_bytes  # the items, once
    assert step_bytes < 1.05 * list_bytes, (step_bytes, list_bytes)  # it was 2.0 times
    assert step_parts == sorted(f"p/lines/{k}" for k in range(32))  # 2,000 items in pages of 64
    assert list_parts == sorted(f"i/line/{k}" for k in range(32))
    for _ in range(5):
        clock.advance(minutes=1)
        app.run_worker(once=True)
    assert run_info(app, step_id).path == "line/do/#5/@wait"
    assert _held(app, step_id)[1] == step_parts
    assert _held(app, step_id)[0] < 1.05 * _held(app, list_id)[0]
    assert run_info(app, step_id).steps["lines"] == _lines(2_000)  # get_run shows the value


def _saw(c: Any) -> tuple[Any, ...]:
    """What an iteration notes after its wait: its item, what it changed in it, what the
    value's item of that index holds, and the value's length."""
    line = c.scope["line"]
    shown = c.steps["lines"][line["count"]]
    return (*(c.steps["saw"] or ()), (line["name"], line.get("marks"), shown.get("marks"), len(c.steps["lines"])))


def _mark(c: Any) -> int:
    c.scope["line"]["marks"] = [*c.scope["line"].get("marks", []), c.scope["line"]["count"]]
    return 1


def _append(c: Any) -> int:
    c.steps["lines"].append({"name": "appended", "count": -1, "id": uuid.UUID(int=0)})
    return len(c.steps["lines"])


_BODIES: dict[str, Callable[[Any], Any]] = {
    "waits": lambda b: b.wait("PT1M").compute("saw", _saw),
    "changes its item": lambda b: b.compute("m", _mark).wait("PT1M").compute("saw", _saw),
    "changes the value": lambda b: b.compute("a", _append).wait("PT1M").compute("saw", _saw),
    "reads the value": lambda b: b.compute("n", lambda c: len(c.steps["lines"])).wait("PT1M").compute("saw", _saw),
}


@pytest.mark.parametrize("body", list(_BODIES))
def test_a_loop_over_a_step_value_goes_on_as_one_over_a_copy_of_it(
    app_on: AppOn, clock: FakeClock, user: User, body: str
) -> None:
    """70 items (two pages), a segment per item, each by another of two workers (Apps of
    their own: restarted): the loop over the value and the loop over a copy of it (its
    items stored apart, as before) see the same items in the same order, and the same of
    a change a step makes in place to its item or to the value (which a resumed segment
    sees in one and not the other, as before), and end with the same values."""
    f = Feature(f"fvsame{body.replace(' ', '')}")
    flows = {
        over: f.workflow(
            over,
            trigger=manual(Go),
            pipeline=f.workflow_pipeline(Go)
            .compute("lines", lambda c: _lines(c.payload.n))
            .for_each("line", over=fn, do=_BODIES[body])
            .compute("after", lambda c: [len(c.steps["lines"]), c.steps["lines"][-1]]),
        )
        for over, fn in (("value", lambda c: c.steps["lines"]), ("copy", lambda c: list(c.steps["lines"])))
    }
    apps = [app_on([f], clock=clock), app_on([f], clock=clock)]
    ended = {}
    for over, flow in flows.items():
        run_id = apps[0].start_workflow(flow, Go(70), user=user)
        # Stored once, but from a copy, or from a value changed (appended to) since the loop began.
        once = over == "value" and body != "changes the value"
        assert _held(apps[0], run_id)[1] == (
            ["p/lines/0", "p/lines/1"] if once else ["i/line/0", "i/line/1", "v/lines"]
        )
        stood: list[list[str]] = []
        info = _until_done(apps, run_id, clock, lambda: stood.append(_held(apps[0], run_id)[1]))
        assert info.status == "completed", info
        if once and body != "changes its item":  # the value stays the loop's pages throughout
            assert all([n for n in names if n != "v/saw"] == ["p/lines/0", "p/lines/1"] for names in stood), stood
        elif once:  # changed in place after a resume: the value is stored apart from then on, as before
            assert all(names[:2] == ["p/lines/0", "p/lines/1"] for names in stood), stood
            assert "v/lines" in stood[-1], stood
        assert _held(apps[0], run_id)[1] == []
        ended[over] = info.steps
    assert ended["value"] == ended["copy"]
    assert [saw[0] for saw in ended["value"]["saw"]] == [line["name"] for line in _lines(70)]


@pytest.mark.parametrize("inner", ["step value", "outer item"])
def test_nested_loops_over_step_values(app_on: AppOn, clock: FakeClock, user: User, inner: str) -> None:
    """An outer loop over a step value and an inner one over another step value (both
    stored once, the inner one's pages kept from one outer iteration to the next) or over
    a list of the outer item (its pages the inner loop's own, as before): each pair in
    order, as with copies of the values, and the parts where the run stands."""
    f = Feature(f"fvnested{inner.replace(' ', '')}")
    overs: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
        "value": (
            lambda c: c.steps["groups"],
            (lambda c: c.steps["lines"]) if inner == "step value" else (lambda c: c.scope["group"]["lines"]),
        ),
        "copy": (
            lambda c: list(c.steps["groups"]),
            (lambda c: list(c.steps["lines"]))
            if inner == "step value"
            else (lambda c: list(c.scope["group"]["lines"])),
        ),
    }
    flows = {
        over: f.workflow(
            over,
            trigger=manual(Go),
            pipeline=f.workflow_pipeline(Go)
            .compute("groups", lambda c: [{"g": g, "lines": _lines(30)} for g in range(3)])
            .compute("lines", lambda c: _lines(30))
            .for_each(
                "group",
                over=outer,
                do=lambda b, inner_over=inner_over: b.for_each(  # type: ignore[misc]
                    "line",
                    over=inner_over,
                    do=lambda d: d.wait("PT1M").compute(
                        "pairs",
                        lambda c: (*(c.steps["pairs"] or ()), (c.scope["group"]["g"], c.scope["line"]["count"])),
                    ),
                ),
            ),
        )
        for over, (outer, inner_over) in overs.items()
    }
    apps = [app_on([f], clock=clock), app_on([f], clock=clock)]
    ended = {}
    for over, flow in flows.items():
        run_id = apps[0].start_workflow(flow, Go(0), user=user)
        stood: list[tuple[str, list[str]]] = []

        def note(run_id: uuid.UUID = run_id, stood: list[tuple[str, list[str]]] = stood) -> None:
            stood.append((run_info(apps[0], run_id).path, _held(apps[0], run_id)[1]))

        info = _until_done(apps, run_id, clock, note)
        assert info.status == "completed", info
        ended[over] = info.steps
        if over == "value":
            assert len(stood) == 90
            for path, names in stood:
                outer_at = path.split("/")[2]
                # The inner loop's items: the value's pages, kept; or its own, one outer item's.
                own = ["p/lines/0"] if inner == "step value" else [f"i/group/do/{outer_at}/line/0", "v/lines"]
                assert [n for n in names if n != "v/pairs"] == sorted(["p/groups/0", *own]), (path, names)
    assert ended["value"] == ended["copy"]
    assert ended["value"]["pairs"] == tuple((g, i) for g in range(3) for i in range(30))


def test_an_empty_a_short_and_a_filtered_step_value(app_on: AppOn, clock: FakeClock, user: User) -> None:
    """A loop over an empty step value runs nothing; over a short one its items stay in
    the loop's record; over a filtered list of a long one (a new list: no value's pages)
    its items are its own pages, and the value its own part, as before."""
    f = Feature("fvsmall")
    flow = f.workflow(
        "small",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("none", lambda c: [])
        .compute("few", lambda c: [1, 2, 3])
        .compute("lines", lambda c: _lines(c.payload.n))
        .for_each("x", over=lambda c: c.steps["none"], do=lambda b: b.wait("PT1M"))
        .for_each(
            "y",
            over=lambda c: c.steps["few"],
            do=lambda b: b.wait("PT1M").compute("ys", lambda c: (*(c.steps["ys"] or ()), c.scope["y"])),
        )
        .for_each(
            "line",
            over=lambda c: [line for line in c.steps["lines"] if line["count"] % 2 == 0],
            do=lambda b: b.wait("PT1M").compute("even", lambda c: (*(c.steps["even"] or ()), c.scope["line"]["count"])),
        ),
    )
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(200), user=user)
    assert run_info(app, run_id).path == "y/do/#0/@wait"
    assert _held(app, run_id)[1] == ["v/lines"]  # no loop over it yet
    for _ in range(3):
        clock.advance(minutes=1)
        app.run_worker(once=True)
    assert run_info(app, run_id).path == "line/do/#0/@wait"
    assert _held(app, run_id)[1] == ["i/line/0", "i/line/1", "v/lines"]
    info = _until_done([app], run_id, clock)
    assert info.status == "completed", info
    assert info.steps["ys"] == (1, 2, 3)
    assert info.steps["even"] == tuple(range(0, 200, 2))
    assert info.steps["lines"] == _lines(200)


def test_a_worker_of_stored_form_4_leaves_such_a_run_for_this_release(
    app_on: AppOn, clock: FakeClock, user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that reads stored forms up to 4 (the release before) finds a value missing
    from such a run's state: it strands the run, intact, naming the form, and this
    release's workers resume it."""
    f = Feature("fvform")
    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("lines", lambda c: _lines(c.payload.n))
        .for_each("line", over=lambda c: c.steps["lines"], do=lambda b: b.wait("PT1M"))
        .compute("count", lambda c: len(c.steps["lines"])),
    )
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(100), user=user)
    held = _held(app, run_id)
    with app.engine.connect() as conn:
        state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()
    assert state["format"] == 5 and state["value_pages"] == {"lines": {"name": "p/lines", "count": 100, "size": 64}}
    with monkeypatch.context() as older:
        for module in (_serialization, _stored_classes, _workflow_engine):
            older.setattr(module, "FORMAT", 4)
        before = app_on([f], clock=clock)
        clock.advance(minutes=1)
        assert before.run_worker(once=True)["resumed"] == 0
        info = run_info(before, run_id)
        assert info.status == "suspended" and info.error is not None and info.error["code"] == "stranded", info
        assert info.error["message"] == (
            "at step line/do/#0/@wait: it was stored by a newer release (stored form 5; this one reads up to 4):"
            " a worker of that release resumes it"
        )
    assert _held(app, run_id) == held
    info = _until_done([app_on([f], clock=clock)], run_id, clock)
    assert info.status == "completed" and info.steps["count"] == 100, info


def test_a_run_with_no_value_stored_as_pages_is_stamped_form_4_and_a_worker_of_form_4_resumes_it(
    app_on: AppOn, clock: FakeClock, user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a state that holds a value stored as pages needs form 5: any other is stamped 4,
    so a rollback to the release before strands only runs that hold one.  Before, every
    run this release stored was stamped 5, and that release left them all stranded."""
    f = Feature("fvplain")
    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("lines", lambda c: _lines(c.payload.n))
        .for_each(
            "line",
            over=lambda c: [line for line in c.steps["lines"] if line["count"] % 2 == 0],
            do=lambda b: b.wait("PT1M"),
        )
        .compute("count", lambda c: len(c.steps["lines"])),
    )
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(100), user=user)
    with app.engine.connect() as conn:
        state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()
    assert state["format"] == 4 and "value_pages" not in state
    with monkeypatch.context() as older:
        for module in (_serialization, _stored_classes, _workflow_engine):
            older.setattr(module, "FORMAT", 4)
        before = app_on([f], clock=clock)
        for _ in range(51):  # a segment per item of the 50 (a stranded run would stay suspended)
            clock.advance(minutes=1)
            before.run_worker(once=True)
        info = run_info(before, run_id)
    assert info.status == "completed" and info.steps["count"] == 100, info
