"""An exception whose own ``__str__`` raises (a ``__str__`` reading an attribute its
``__init__`` never set) is still the step's failure, named by its class and step: the
framework never asks for its text, which goes to the log only (where ``logging`` copes
with it).  Before, wrapping it asked for the text, and the ``AttributeError`` that raised
replaced it: a run failed "in the segment from step @wait: AttributeError" — the wrong step
and the wrong class — and a dispatch failed naming no step.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import attrs
from _support import run_info

from kumiko_typed import App, Failure, Feature, User, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=11))


@attrs.frozen
class Job:
    n: int


class Mute(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)

    def __str__(self) -> str:
        return f"failed with {self.reason}"  # type: ignore[attr-defined]  # never set


def _boom(c: Any) -> int:
    raise Mute(7)


def test_a_step_raising_an_exception_without_a_readable_text_is_named_by_its_step(db_url: str) -> None:
    clock = FakeClock(T0)
    f: Feature[Any] = Feature("mute")
    workflow = f.workflow(
        "w",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job).wait("PT1M").compute("boom", _boom).return_(lambda c: ok(1)),
    )
    handler = f.write_handler("h", f.pipeline(Job).compute("boom", _boom).return_(lambda c: ok(None)))
    app = App([f], database_url=db_url, clock=clock)
    app.create_all()
    try:
        run_id = app.start_workflow(workflow, Job(1), user=ADA)
        clock.advance(minutes=1)
        assert app.run_worker(once=True)["resumed"] == 1
        info = run_info(app, run_id)
        assert info.status == "failed"
        assert info.error["message"].startswith('step boom compute "boom" raised Mute (error id ')
        result = app.dispatch(handler, Job(1), user=ADA)
        assert isinstance(result, Failure) and result.code == "internal_error"
        assert result.message.startswith('step 0 compute "boom" raised Mute (error id ')
    finally:
        app.dispose()
