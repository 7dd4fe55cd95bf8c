"""Edges of a run waiting between two ``retry`` attempts.

- A deploy that strands such a run keeps what its last attempt failed with: the strand
  mark says why the run cannot go on (``code``/``message``) and, beside it, the retry's
  record it was put over (``last_code``, ``last_message``, ``last_attempts``,
  ``last_times``).  Before, the mark replaced the record: a stranded run no longer said
  what had failed.
- An attempt's own code may be one of the library's (a called handler answering
  ``fail("stranded", ...)``): the run is not taken for one a deploy stranded
  (``runs(stranded=True)`` lists the runs the library marked, by its mark, not by the
  code).  Before, the listing matched the code.

- The framework's refusal of the program (``PROGRAM_REFUSALS``: a class no feature
  registers, a resolver that gives an async generator) raised in a handler the retry body
  calls fails the run at its first attempt, as one raised in the body itself does: every
  attempt would be refused the same.  Before, the called handler's ``internal_error`` was a
  failed attempt like any other, tried again after its backoff until ``times`` was spent.

(A resolver in a retry body that gives a coroutine fails the run at its first attempt:
tests/pipeline/test_awaitable_results.py.)

Both databases; time moves by the App's fake clock."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import run_info
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, User, Workflow, fail, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


@attrs.frozen
class Ask:
    code: str


class RreNote(Entity):
    __tablename__ = "rre_note"
    n: Mapped[int]


@attrs.frozen
class NeverRegistered:
    n: int


async def _lines() -> Any:  # an async generator: a resolver that gives one is refused
    yield 1


def _release(app_on: Callable[..., App], clock: FakeClock, retry_name: str = "try") -> tuple[App, Workflow[Any]]:
    """A workflow whose retry calls a handler that answers ``fail(payload.code, ...)``;
    ``retry_name`` is the retry's name (another name strands a run waiting in it)."""
    f: Feature[Any] = Feature("rre", requires=["call_feature"])
    provider = f.write_handler(
        "provider", f.pipeline(Ask).return_(lambda c: fail(c.payload.code, "the provider said no"))
    )
    flow = f.workflow(
        "flow",
        trigger=manual(Ask),
        pipeline=f.workflow_pipeline(Ask).retry(
            times=3,
            base_delay=timedelta(minutes=1),
            name=retry_name,
            do=lambda b: b.call_feature("answer", provider, payload=lambda c: c.payload),
        ),
    )
    return app_on([f], clock=clock), flow


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def test_a_stranded_run_still_says_what_its_retry_failed_with(app_on: Callable[..., App], clock: FakeClock) -> None:
    app, flow = _release(app_on, clock)
    run_id = app.start_workflow(flow, Ask("declined"), user=ADA)
    waiting = run_info(app, run_id)
    assert (waiting.status, waiting.path, waiting.error["code"]) == ("suspended", "try/#2", "declined")
    app.dispose()

    app, _ = _release(app_on, clock, retry_name="attempt")  # the retry renamed: the run cannot go on
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 0
    stranded = run_info(app, run_id)
    assert stranded.status == "suspended"
    assert stranded.error == {
        "code": "stranded",
        "message": 'step "try" at try/#2 no longer exists',
        "last_code": "declined",
        "last_message": waiting.error["message"],
        "last_attempts": "1",
        "last_times": "3",
    }
    assert [r.run_id for r in app.runs(stranded=True)] == [run_id]
    app.dispose()

    app, flow = _release(app_on, clock)  # the retry back: the run goes on with its second attempt
    assert app.run_worker(once=True)["resumed"] == 1
    again = run_info(app, run_id)
    assert (again.status, again.path) == ("suspended", "try/#3")
    assert (again.error["code"], again.error["attempts"]) == ("declined", "2")
    assert app.runs(stranded=True) == []


def test_an_attempts_own_code_stranded_is_no_strand_mark(app_on: Callable[..., App], clock: FakeClock) -> None:
    app, flow = _release(app_on, clock)
    run_id = app.start_workflow(flow, Ask("stranded"), user=ADA)
    waiting = run_info(app, run_id)
    assert (waiting.status, waiting.path) == ("suspended", "try/#2")
    assert (waiting.error["code"], waiting.error["attempts"]) == ("stranded", "1")  # the handler's own answer
    assert app.runs(stranded=True) == []  # no deploy stranded it
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1  # it goes on, as any run waiting to try again
    assert run_info(app, run_id).path == "try/#3"
    app.dispose()

    app, _ = _release(app_on, clock, retry_name="attempt")
    clock.advance(minutes=2)
    app.run_worker(once=True)
    stranded = run_info(app, run_id)
    assert (stranded.error["code"], stranded.error["last_code"], stranded.error["last_attempts"]) == (
        "stranded",
        "stranded",
        "2",
    )
    assert [r.run_id for r in app.runs(stranded=True)] == [run_id]


#: A called handler's step the framework refuses, and what the refusal says.
REFUSALS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "unregistered": (
        lambda p: p.append_event(RreNote, id=lambda c: c.steps["note"].id, event=lambda c: NeverRegistered(1)),
        "raised UnregisteredError: NeverRegistered is not a registered event",
    ),
    "async-generator": (
        lambda p: p.compute("lines", lambda c: _lines()),
        'compute "lines" raised StepRefused: fn= returned an async generator',
    ),
}


@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_a_refusal_in_a_called_handler_fails_the_run_at_its_first_attempt(
    app_on: Callable[..., App], clock: FakeClock, refusal: str
) -> None:
    refused_step, says = REFUSALS[refusal]
    f: Feature[Any] = Feature("rrr", requires=["call_feature"])
    f.entity(RreNote)
    entered: list[int] = []

    def enter(c: Any) -> int:
        entered.append(1)
        return len(entered)

    provider = f.write_handler(
        "provider",
        refused_step(
            f.pipeline(Ask).compute("entered", enter).create("note", RreNote, data=lambda c: RreNote(n=1))
        ).return_(lambda c: ok(None)),
    )
    flow = f.workflow(
        "flow",
        trigger=manual(Ask),
        pipeline=f.workflow_pipeline(Ask).retry(
            times=3,
            base_delay=timedelta(minutes=1),
            name="try",
            do=lambda b: b.call_feature("answer", provider, payload=lambda c: c.payload),
        ),
    )
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Ask("x"), user=ADA)
    info = run_info(app, run_id)
    assert (info.status, info.error["code"]) == ("failed", "internal_error"), info
    assert "attempts" not in info.error, info  # no attempt record: the run's own failure
    message = info.error["message"]
    assert message.startswith('step try/do/#1/answer call_feature "answer" raised StepRefused: '), message
    assert "the called handler rrr:provider" in message and says in message, message
    assert entered == [1]
    clock.advance(hours=1)
    app.run_worker(once=True)
    assert entered == [1]  # never tried again
    with app.engine.connect() as conn:  # the attempt's create rolled back
        assert conn.execute(sa.select(sa.func.count()).select_from(RreNote)).scalar() == 0
