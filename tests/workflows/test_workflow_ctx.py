"""What a resolver receives is what its type says (docs/steps.md, ``c.workflow``): in a
workflow, before and after a suspension, at the top level, in a branch arm, a loop body and
a retry body, a ``WorkflowCtx`` whose ``c.workflow`` is the run; in a handler — one a
workflow step calls too — and in a query, a plain ``Ctx`` whose ``c.workflow`` is ``None``.
On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
from _support import ok_data, run_info

from kumiko_typed import App, Ctx, Feature, User, manual, ok
from kumiko_typed._ctx import WorkflowCtx
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)


@attrs.frozen
class Start:
    lines: list[int]


def _seen(c: Ctx[Any, Any, Any]) -> tuple[bool, str | None, str | None]:
    """Whether ``c`` is a workflow's, and the run's name and stored path it carries."""
    info = c.workflow
    return isinstance(c, WorkflowCtx), None if info is None else info.workflow, None if info is None else info.path


def test_workflow_resolvers_get_the_run_and_others_none(app_on: Callable[..., App], user: User) -> None:
    f = Feature("wfctx", requires=["call_feature"])
    plain = f.write_handler("plain", f.pipeline(Start).return_(lambda c: ok(_seen(c))))
    asked = f.query_handler("asked", f.query_pipeline(Start).return_(lambda c: ok(_seen(c))))
    flow = f.workflow(
        "flow",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start)
        .compute("run", lambda c: c.workflow.run_id)
        .compute("top", _seen)
        .branch(when=lambda c: c.workflow.path is None, on_true=lambda b: b.compute("arm", _seen))
        .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.compute("body", _seen))
        .retry(times=2, do=lambda b: b.compute("attempt", _seen))
        .call_feature("called", plain, payload=lambda c: c.payload)
        .wait("PT1H", name="pause")
        .compute("resumed", _seen)
        .return_(
            lambda c: ok(
                {
                    "run": c.steps["run"],
                    "top": c.steps["top"],
                    "arm": c.steps["arm"],
                    "body": c.steps["body"],
                    "attempt": c.steps["attempt"],
                    "called": c.steps["called"],
                    "resumed": c.steps["resumed"],
                }
            )
        ),
    )
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Start([1, 2]), user=user)
    assert run_info(app, run_id).status == "suspended"
    clock.advance(hours=1)
    app.run_worker(once=True)

    first = (True, "wfctx:flow", None)
    assert ok_data(app.result(flow, run_id, user=user)) == {
        "run": run_id,
        "top": first,
        "arm": first,
        "body": first,
        "attempt": first,
        "called": (False, None, None),
        "resumed": (True, "wfctx:flow", "pause"),  # where it was stored
    }
    assert ok_data(app.dispatch(plain, Start([]), user=user)) == (False, None, None)
    assert ok_data(app.query(asked, Start([]), user=user)) == (False, None, None)
