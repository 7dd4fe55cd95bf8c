"""A step whose code raises a ``BaseException`` that is not an ``Exception`` — an
``asyncio.CancelledError`` out of an ``asyncio.run`` inside a step, a library's own
``BaseException`` subclass — is that step's failure, like any exception it raises: the
run fails naming the step, a ``retry`` counts it as a failed attempt, and the worker goes
on with every other run.  Before, it ended the worker's pass (and ``run_worker``) with
the batch undone, and as the run stayed due, every pass after it: one such run stopped
the workers for all.  Stopping the process (``KeyboardInterrupt``, ``SystemExit``) is
still no step's failure: it ends the pass, the run left as it was for the next worker.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from _support import run_info
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=11))


@attrs.frozen
class Job:
    n: int


@attrs.frozen
class Paid:
    n: int


class BxBox(Entity):
    __tablename__ = "bx_box"
    note: Mapped[str]


class Halt(BaseException):
    """A library's own ``BaseException`` (as ``gevent``'s ``GreenletExit`` is)."""


def _raising(kind: type[BaseException]) -> Any:
    def step(c: Any) -> int:
        raise kind()

    return step


def _app(db_url: str, clock: FakeClock, raised: type[BaseException]) -> tuple[App, Any, Any, Any]:
    f: Feature[Any] = Feature("bx")
    poisoned = f.workflow(
        "poisoned",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job).wait("PT1M").compute("boom", _raising(raised)).return_(lambda c: ok(1)),
    )
    healthy = f.workflow(
        "healthy", trigger=manual(Job), pipeline=f.workflow_pipeline(Job).wait("PT1M").return_(lambda c: ok(2))
    )
    tries: list[int] = []

    def flaky(c: Any) -> int:
        tries.append(c.payload.n)
        if len(tries) == 1:
            raise asyncio.CancelledError()
        return len(tries)

    retried = f.workflow(
        "retried",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job)
        .retry(times=2, base_delay=timedelta(minutes=1), do=lambda b: b.compute("n", flaky), name="again")
        .return_(lambda c: ok(c.steps["n"])),
    )
    app = App([f], database_url=db_url, clock=clock)
    app.create_all()
    return app, poisoned, healthy, retried


@pytest.mark.parametrize("raised", [asyncio.CancelledError, Halt])
def test_a_step_raising_a_base_exception_fails_its_run_and_the_worker_goes_on(
    db_url: str, raised: type[BaseException]
) -> None:
    clock = FakeClock(T0)
    app, poisoned, healthy, _ = _app(db_url, clock, raised)
    try:
        bad = app.start_workflow(poisoned, Job(1), user=ADA)
        good = app.start_workflow(healthy, Job(2), user=ADA)
        clock.advance(minutes=1)
        assert app.run_worker(once=True)["resumed"] == 2
        info = run_info(app, bad)
        assert info.status == "failed"
        assert info.error["code"] == "internal_error"
        assert info.error["message"].startswith(f'step boom compute "boom" raised {raised.__name__} (error id ')
        assert run_info(app, good).status == "completed"
        result = app.result(poisoned, bad, user=ADA)
        assert isinstance(result, Failure) and result.code == "status_conflict"
    finally:
        app.dispose()


def test_a_cancelled_error_in_a_retry_is_a_failed_attempt(db_url: str) -> None:
    clock = FakeClock(T0)
    app, _, _, retried = _app(db_url, clock, Halt)
    try:
        run_id = app.start_workflow(retried, Job(7), user=ADA)
        info = run_info(app, run_id)
        assert (info.status, info.path) == ("suspended", "again/#2")  # attempt 1 failed
        clock.advance(minutes=1)
        assert app.run_worker(once=True)["resumed"] == 1
        assert app.result(retried, run_id, user=ADA).data == 2  # type: ignore[union-attr]
    finally:
        app.dispose()


def test_stopping_the_process_in_a_step_ends_the_pass_and_leaves_the_run_for_the_next(db_url: str) -> None:
    clock = FakeClock(T0)
    app, poisoned, _, _ = _app(db_url, clock, KeyboardInterrupt)
    try:
        run_id = app.start_workflow(poisoned, Job(1), user=ADA)
        clock.advance(minutes=1)
        with pytest.raises(KeyboardInterrupt):
            app.run_worker(once=True)
        info = run_info(app, run_id)
        assert (info.status, info.path, info.error) == ("suspended", "@wait", None)
    finally:
        app.dispose()


@pytest.mark.parametrize("raised", [ValueError, asyncio.CancelledError])
def test_an_event_key_that_raises_passes_its_event_by_and_the_feed_goes_on(
    db_url: str, raised: type[BaseException]
) -> None:
    """``event_key=`` raising for one event (``n == 0``) is logged and that event wakes no
    run; the next event, of another key, wakes its run in the same pass."""
    clock = FakeClock(T0)

    def key_of(e: Paid) -> int:
        if e.n == 0:
            raise raised()
        return e.n

    f: Feature[Any] = Feature("bxe")
    f.entity(BxBox)
    f.event(Paid)
    pay = f.write_handler(
        "pay",
        f.pipeline(Job)
        .create("box", BxBox, data=lambda c: BxBox(note="x"))
        .append_event(BxBox, id=lambda c: c.steps["box"].id, event=lambda c: Paid(c.payload.n))
        .return_(lambda c: ok(None)),
    )
    waiter = f.workflow(
        "waiter",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job)
        .wait_for_event("got", Paid, key=lambda c: c.payload.n, event_key=key_of, timeout="PT1H")
        .return_(lambda c: ok(None if c.steps["got"] is None else c.steps["got"].n)),
    )
    app = App([f], database_url=db_url, clock=clock)
    app.create_all()
    try:
        run_id = app.start_workflow(waiter, Job(5), user=ADA)
        assert app.dispatch(pay, Job(0), user=ADA) == Ok(None)
        assert app.dispatch(pay, Job(5), user=ADA) == Ok(None)
        assert app.run_worker(once=True)["resumed"] == 1
        assert app.result(waiter, run_id, user=ADA) == Ok(5)
    finally:
        app.dispose()


def test_a_handler_step_raising_a_base_exception_is_internal_error(db_url: str) -> None:
    f: Feature[Any] = Feature("bxh")
    handler = f.write_handler(
        "boom", f.pipeline(Job).compute("x", _raising(asyncio.CancelledError)).return_(lambda c: ok(None))
    )
    app = App([f], database_url=db_url, clock=FakeClock(T0))
    app.create_all()
    try:
        result = app.dispatch(handler, Job(1), user=ADA)
        assert isinstance(result, Failure) and result.code == "internal_error"
        assert result.message.startswith('step 0 compute "x" raised CancelledError (error id ')
    finally:
        app.dispose()
