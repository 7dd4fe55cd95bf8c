"""Operations on runs and deliveries (issue 14 item 5, issue 18 item 1), on SQLite and
PostgreSQL: ``cancel_run``, ``result`` and ``requeue`` act as a user, see only that
user's tenant (another tenant's run or row is ``not_found``, exactly as an unknown id)
unless the user is a ``sysadmin``, and a cancellation never interleaves with a running
segment."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import Gate, Hook, failure_of, short_lock_wait
from sqlalchemy.orm import Mapped

from kumiko_typed import App, CronTick, Entity, Feature, Ok, RetryPolicy, User, cron, manual, ok
from kumiko_typed._tables import workflow_runs, workflow_waits
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TENANT_A, TENANT_B = uuid.uuid4(), uuid.uuid4()
ADA = User(id=uuid.uuid4(), tenant_id=TENANT_A)
BOB = User(id=uuid.uuid4(), tenant_id=TENANT_B)
ROOT = User(id=uuid.uuid4(), tenant_id=TENANT_B, roles={"sysadmin"})


@attrs.frozen
class Job:
    n: int


@attrs.frozen
class Bell:
    ref: int


@attrs.frozen
class Ring:
    ref: int


class OpsBell(Entity):
    __tablename__ = "ops_bell"
    label: Mapped[str]


#: Holds a worker in the blocking step of ``slow``.
gate = Gate()


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("ops", requires=["webhook.send"])
    f.entity(OpsBell)
    f.event(Bell)
    doubled = f.workflow(
        "doubled",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job).wait("PT1H").return_(lambda c: ok(c.payload.n * 2)),
    )
    plain = f.workflow("plain", trigger=manual(Job), pipeline=f.workflow_pipeline(Job).compute("x", lambda c: 1))
    waits = f.workflow(
        "waits",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job).wait_for_event(
            "bell", Bell, key=lambda c: c.payload.n, event_key=lambda e: e.ref, timeout="P1D"
        ),
    )
    slow = f.workflow(
        "slow",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job)
        .wait("PT1H")
        .compute("blocked", lambda c: gate.block(c.payload.n))
        .wait("PT1H")
        .return_(lambda c: ok(c.steps["blocked"])),
    )
    slow_end = f.workflow(
        "slow-end",
        trigger=manual(Job),
        pipeline=f.workflow_pipeline(Job)
        .wait("PT1H")
        .compute("blocked", lambda c: gate.block(c.payload.n))
        .return_(lambda c: ok(c.steps["blocked"])),
    )
    hourly = f.workflow("hourly", trigger=cron("0 * * * *"), pipeline=f.workflow_pipeline(CronTick).wait("PT1H"))
    ring = f.write_handler(
        "ring",
        f.pipeline(Ring)
        .create("bell", OpsBell, data=lambda c: OpsBell(label="b"))
        .append_event(OpsBell, id=lambda c: c.steps["bell"].id, event=lambda c: Bell(c.payload.ref))
        .return_(lambda c: ok(None)),
    )
    hook = f.write_handler(
        "hook",
        f.pipeline(Hook)
        .send_webhook(url=lambda c: c.payload.url, body=lambda c: {}, retry=RetryPolicy(times=1))
        .return_(lambda c: ok(None)),
    )
    parts = {"doubled": doubled, "plain": plain, "waits": waits, "slow": slow, "slow_end": slow_end}
    return f, {**parts, "hourly": hourly, "ring": ring, "hook": hook}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def ops(app_on: AppOn, clock: FakeClock) -> tuple[App, dict[str, Any]]:
    f, parts = _feature()
    return app_on([f], clock=clock), parts


# --- result -----------------------------------------------------------------------------------


def test_result_is_the_return_value_once_the_run_completes(ops: tuple[App, dict[str, Any]], clock: FakeClock) -> None:
    app, w = ops
    run_id = app.start_workflow(w["doubled"], Job(21), user=ADA)
    pending = failure_of(app.result(w["doubled"], run_id, user=ADA), "status_conflict")
    assert pending.details == {"status": "suspended"} and pending.http_status == 409
    clock.advance(hours=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(w["doubled"], run_id, user=ADA) == Ok(42)
    assert app.result(w["plain"], app.start_workflow(w["plain"], Job(1), user=ADA), user=ADA) == Ok(None)


def test_result_of_another_tenant_is_not_found_like_an_unknown_run(
    ops: tuple[App, dict[str, Any]], clock: FakeClock
) -> None:
    app, w = ops
    run_id = app.start_workflow(w["doubled"], Job(21), user=ADA)
    clock.advance(hours=1)
    app.run_worker(once=True)
    unknown = uuid.uuid4()
    theirs = failure_of(app.result(w["doubled"], run_id, user=BOB), "not_found")
    assert theirs.message == f"no workflow run {run_id}" and theirs.details is None
    assert failure_of(app.result(w["doubled"], unknown, user=BOB), "not_found").message == f"no workflow run {unknown}"
    assert app.result(w["doubled"], run_id, user=ROOT) == Ok(42)  # a sysadmin crosses tenants
    # A run of another workflow: its result would not be of the type asked for.
    failure_of(app.result(w["plain"], run_id, user=ADA), "not_found")


def test_a_result_the_codec_cannot_store_fails_the_run(app_on: AppOn) -> None:
    f: Feature[Any] = Feature("nan")
    nan = f.workflow("nan", trigger=manual(Job), pipeline=f.workflow_pipeline(Job).return_(lambda c: ok(float("nan"))))
    app = app_on([f])
    run_id = app.start_workflow(nan, Job(1), user=ADA)
    info = app.get_run(run_id)
    assert info is not None and info.status == "failed" and info.error is not None
    assert info.error["code"] == "unstorable_state" and "return_" in info.error["message"]
    failed = failure_of(app.result(nan, run_id, user=ADA), "status_conflict")
    assert failed.details == {"status": "failed", "error": info.error}


def test_a_result_missing_or_unreadable_in_the_stored_run_is_unstorable_state(
    ops: tuple[App, dict[str, Any]],
) -> None:
    """A run completed by an older version (no result stored) or a damaged row is told
    as such, not mistaken for a result of None or raised."""
    app, w = ops
    run_id = app.start_workflow(w["plain"], Job(1), user=ADA)
    where = workflow_runs.c.run_id == run_id
    for state, words in (
        ({"values": {}}, "completed before its result was stored"),
        (
            {"values": {}, "result": {"$t": "attrs", "c": "gone.Class", "v": {}}},
            "cannot be read",
        ),
    ):
        with app.engine.begin() as conn:
            conn.execute(sa.update(workflow_runs).where(where).values(state=state))
        told = failure_of(app.result(w["plain"], run_id, user=ADA), "unstorable_state")
        assert words in told.message, told


# --- cancel_run ---------------------------------------------------------------------------------


def test_a_cancelled_run_never_resumes(ops: tuple[App, dict[str, Any]], clock: FakeClock) -> None:
    app, w = ops
    run_id = app.start_workflow(w["doubled"], Job(21), user=ADA)
    cancelled = app.cancel_run(run_id, user=ADA, reason="customer left")
    assert isinstance(cancelled, Ok), cancelled
    info = cancelled.data
    assert info.status == "cancelled" and info.wake_at is None
    assert info.error == {"code": "cancelled", "message": "customer left", "by": str(ADA.id)}
    assert app.get_run(run_id) == info
    clock.advance(days=2)
    assert app.run_worker(once=True)["resumed"] == 0
    assert app.get_run(run_id) == info
    later = failure_of(app.result(w["doubled"], run_id, user=ADA), "status_conflict")
    assert later.details == {"status": "cancelled", "error": info.error}
    # Again: nothing changes, the first reason stands.
    assert app.cancel_run(run_id, user=ADA, reason="twice") == Ok(info)


def test_a_finished_run_cannot_be_cancelled(ops: tuple[App, dict[str, Any]]) -> None:
    app, w = ops
    run_id = app.start_workflow(w["plain"], Job(1), user=ADA)
    conflict = failure_of(app.cancel_run(run_id, user=ADA), "status_conflict")
    assert conflict.details == {"status": "completed"}
    assert app.result(w["plain"], run_id, user=ADA) == Ok(None)


def test_cancel_of_another_tenants_run_is_not_found_and_changes_nothing(
    ops: tuple[App, dict[str, Any]], clock: FakeClock
) -> None:
    app, w = ops
    run_id = app.start_workflow(w["doubled"], Job(21), user=ADA)
    before = app.get_run(run_id)
    theirs = failure_of(app.cancel_run(run_id, user=BOB, reason="mine now"), "not_found")
    assert theirs.message == f"no workflow run {run_id}"
    assert app.get_run(run_id) == before
    by_root = app.cancel_run(run_id, user=ROOT, reason="support ticket 7")
    assert isinstance(by_root, Ok) and by_root.data.error is not None
    assert by_root.data.error["by"] == str(ROOT.id)


def test_a_cancelled_event_wait_is_gone_and_the_event_wakes_nothing(ops: tuple[App, dict[str, Any]]) -> None:
    app, w = ops
    run_id = app.start_workflow(w["waits"], Job(7), user=ADA)
    app.run_worker(once=True)  # the feed arms the wait
    assert isinstance(app.cancel_run(run_id, user=ADA), Ok)
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(workflow_waits)).scalar_one() == 0
    assert isinstance(app.dispatch(w["ring"], Ring(7), user=ADA), Ok)
    assert app.run_worker(once=True)["resumed"] == 0
    info = app.get_run(run_id)
    assert info is not None and info.status == "cancelled"


def _cancel_during_segment(app: App, workflow: Any, clock: FakeClock) -> tuple[uuid.UUID, object]:
    """Cancel a run while a worker runs its second segment (blocked in a step): the
    cancel must still be waiting when the step is let go."""
    run_id = app.start_workflow(workflow, Job(5), user=ADA)
    clock.advance(hours=1)
    outcome: list[object] = []
    cancel = threading.Thread(target=lambda: outcome.append(app.cancel_run(run_id, user=ADA, reason="stop")))
    try:
        with gate.holding(lambda: app.run_worker(once=True)):
            cancel.start()
            time.sleep(0.5)
            assert cancel.is_alive() and not outcome, "the cancel did not wait for the running segment"
    finally:
        if cancel.ident is not None:  # started
            cancel.join(60)
    (cancelled,) = outcome
    return run_id, cancelled


@pytest.mark.slow
def test_a_cancel_during_a_segment_waits_for_it_then_stops_the_run(
    ops: tuple[App, dict[str, Any]], clock: FakeClock
) -> None:
    """The segment's transaction commits (it suspends at its second wait); the cancel,
    which waited for the run's row meanwhile, then cancels the suspended run."""
    app, w = ops
    _run_id, cancelled = _cancel_during_segment(app, w["slow"], clock)
    assert isinstance(cancelled, Ok), cancelled
    # Cancelled where the segment left it: suspended at the second wait, its work kept.
    assert cancelled.data.status == "cancelled" and cancelled.data.path == "@wait~2"
    assert cancelled.data.steps == {"blocked": 5}
    clock.advance(hours=2)
    assert app.run_worker(once=True)["resumed"] == 0


@pytest.mark.slow
def test_a_cancel_during_the_last_segment_finds_the_run_completed(
    ops: tuple[App, dict[str, Any]], clock: FakeClock
) -> None:
    """The cancel decides on the run as the segment left it (the row lock), so it does
    not turn a run that has just completed into a cancelled one."""
    app, w = ops
    run_id, cancelled = _cancel_during_segment(app, w["slow_end"], clock)
    assert failure_of(cancelled, "status_conflict").details == {"status": "completed"}
    assert app.result(w["slow_end"], run_id, user=ADA) == Ok(5)


def test_a_cancel_behind_a_segment_past_the_databases_wait_is_unavailable_and_changes_nothing(
    ops: tuple[App, dict[str, Any]], clock: FakeClock
) -> None:
    """The worker holds the run (SQLite: the write lock) longer than the database waits for
    it: the cancel is ``unavailable`` ("try again"), not the driver's exception with its
    SQL, and the run goes on as if it had not been asked; asked again, it is cancelled."""
    app, w = ops
    short_lock_wait(app)
    run_id = app.start_workflow(w["slow"], Job(5), user=ADA)
    clock.advance(hours=1)
    with gate.holding(lambda: app.run_worker(once=True)):
        busy = failure_of(app.cancel_run(run_id, user=ADA, reason="stop"), "unavailable")
        assert busy.http_status == 503 and "try again" in busy.message
        assert "SELECT" not in busy.message and "BEGIN" not in busy.message
    info = app.get_run(run_id)
    assert info is not None and (info.status, info.path, info.error) == ("suspended", "@wait~2", None)
    cancelled = app.cancel_run(run_id, user=ADA, reason="stop")
    assert isinstance(cancelled, Ok) and cancelled.data.status == "cancelled"


def test_a_cron_run_is_of_no_tenant_only_a_sysadmin_reaches_it(
    ops: tuple[App, dict[str, Any]], clock: FakeClock
) -> None:
    app, w = ops
    app.run_worker(once=True)  # the cron cursor starts now
    clock.advance(hours=1)
    assert app.run_worker(once=True)["started"] == 1
    (run,) = app.runs(w["hourly"])
    failure_of(app.cancel_run(run.run_id, user=ADA), "not_found")
    # A user of the system user's tenant is refused as such (test_no_tenant_user.py).
    nil_tenant = User(id=uuid.uuid4(), tenant_id=uuid.UUID(int=0))
    failure_of(app.cancel_run(run.run_id, user=nil_tenant), "access_denied")
    cancelled = app.cancel_run(run.run_id, user=ROOT)
    assert isinstance(cancelled, Ok) and cancelled.data.status == "cancelled"


# --- requeue ------------------------------------------------------------------------------------


def test_requeue_delivers_a_dead_row_again(ops: tuple[App, dict[str, Any]], receiver: Receiver) -> None:
    app, w = ops
    receiver.respond = lambda _i, _p: (500, {})
    assert isinstance(app.dispatch(w["hook"], Hook(receiver.url("/h")), user=ADA), Ok)
    assert app.run_worker(once=True)["dead"] == 1
    (dead,) = app.outbox()
    assert dead.status == "dead" and dead.attempts == 1
    unknown = uuid.uuid4()
    assert failure_of(app.requeue(unknown, user=ADA), "not_found").message == f"no outbox row {unknown}"
    assert failure_of(app.requeue(dead.id, user=BOB), "not_found").message == f"no outbox row {dead.id}"
    assert app.outbox() == [dead]
    requeued = app.requeue(dead.id, user=ADA)
    assert isinstance(requeued, Ok), requeued
    assert requeued.data.status == "pending" and requeued.data.attempts == 0
    assert requeued.data.last_error == dead.last_error  # kept until the next attempt
    conflict = failure_of(app.requeue(dead.id, user=ADA), "status_conflict")
    assert conflict.details == {"status": "pending"}
    receiver.respond = lambda _i, _p: (200, {})
    assert app.run_worker(once=True)["sent"] == 1
    (sent,) = app.outbox()
    assert sent.status == "sent" and sent.attempts == 1 and len(receiver.requests) == 2


def test_a_sysadmin_requeues_another_tenants_row(ops: tuple[App, dict[str, Any]], receiver: Receiver) -> None:
    app, w = ops
    receiver.respond = lambda _i, _p: (500, {})
    app.dispatch(w["hook"], Hook(receiver.url("/h")), user=ADA)
    app.run_worker(once=True)
    (dead,) = app.outbox()
    requeued = app.requeue(dead.id, user=ROOT)
    assert isinstance(requeued, Ok) and requeued.data.status == "pending"


# --- bad input ----------------------------------------------------------------------------------


def test_bad_ids_and_users_are_failures_not_tracebacks(ops: tuple[App, dict[str, Any]]) -> None:
    app, w = ops
    wrong: Any = "not-a-uuid"
    for call, field in (
        (lambda: app.cancel_run(wrong, user=ADA), "run_id"),
        (lambda: app.result(w["doubled"], wrong, user=ADA), "run_id"),
        (lambda: app.requeue(wrong, user=ADA), "outbox_id"),
    ):
        refused = failure_of(call(), "validation_error")
        assert refused.details == [{"path": field, "message": f"{field} must be a UUID, not str"}]
    name: Any = w["doubled"].name  # before: AttributeError ('str' object has no attribute 'name')
    refused = failure_of(app.result(name, uuid.uuid4(), user=ADA), "validation_error")
    said = "workflow must be a Workflow (app.workflows[name] by name), not str"
    assert refused.details == [{"path": "workflow", "message": said}]
    nobody: Any = None
    failure_of(app.cancel_run(uuid.uuid4(), user=nobody), "access_denied")
    failure_of(app.result(w["doubled"], uuid.uuid4(), user=nobody), "access_denied")
    failure_of(app.requeue(uuid.uuid4(), user=nobody), "access_denied")
    run_id = app.start_workflow(w["doubled"], Job(1), user=ADA)
    reason: Any = 3
    failure_of(app.cancel_run(run_id, user=ADA, reason=reason), "validation_error")
    long = failure_of(app.cancel_run(run_id, user=ADA, reason="x" * 1001), "validation_error")
    assert long.details == [{"path": "reason", "message": "must be at most 1000 characters long, not 1001"}]
    assert app.get_run(run_id).status == "suspended"  # type: ignore[union-attr]
    assert app.cancel_run(run_id, user=ADA, reason="x" * 1000).data.error["message"] == "x" * 1000  # type: ignore[union-attr]


def test_the_operators_lookups_refuse_what_is_not_an_id_or_a_workflow(ops: tuple[App, dict[str, Any]]) -> None:
    """Before: ``get_run("...")`` raised SQLAlchemy's StatementError quoting the SQL;
    ``runs(5)`` listed nothing as if no run existed."""
    app, w = ops
    wrong: Any = "not-a-uuid"
    with pytest.raises(TypeError, match=r"^run_id must be a uuid\.UUID, not str$"):
        app.get_run(wrong)
    number: Any = 5
    with pytest.raises(TypeError, match=r"^runs\(\) takes a Workflow, its name or None, not int$"):
        app.runs(number)
    run_id = app.start_workflow(w["doubled"], Job(1), user=ADA)
    found = app.get_run(run_id)
    assert found is not None and found.run_id == run_id
    assert [r.run_id for r in app.runs(w["doubled"].name)] == [run_id]
    assert app.get_run(uuid.uuid4()) is None


def test_start_workflow_refuses_a_name_or_a_missing_user_in_a_sentence(ops: tuple[App, dict[str, Any]]) -> None:
    """Before: AttributeError ('str' object has no attribute 'name'; 'NoneType' ... 'id')."""
    app, w = ops
    name: Any = w["doubled"].name
    with pytest.raises(
        TypeError, match=r"^start_workflow takes a Workflow \(app\.workflows\[name\] by name\), not str$"
    ):
        app.start_workflow(name, Job(1), user=ADA)
    nobody: Any = None
    with pytest.raises(TypeError, match=r"user must be a User, not NoneType$"):
        app.start_workflow(w["doubled"], Job(1), user=nobody)
    assert app.runs() == []
    assert app.start_workflow(app.workflows[name], Job(1), user=ADA) is not None
