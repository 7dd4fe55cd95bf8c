"""One poisonous value never halts background work (DESIGN §6), on SQLite and PostgreSQL.

A run whose state holds a value the database refuses (NaN, which PostgreSQL's JSON
refuses; an integer the JSON encoder refuses; on PostgreSQL a NUL in a string) fails
alone with ``unstorable_state``; everything else in the same worker pass goes on: other
runs, event triggers, event waits, cron, the outbox.  ``start_workflow`` with such a
payload raises a clear error instead of the driver's.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import (
    App,
    CronTick,
    Entity,
    Failure,
    Feature,
    MaildirTransport,
    Ok,
    RetryPolicy,
    User,
    cron,
    fail,
    manual,
    ok,
    on_event,
)
from kumiko_typed._tables import outbox, workflow_runs
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)
NAN = float("nan")
HUGE = 10**5000  # more digits than Python's JSON encoder writes


@attrs.frozen
class Start:
    ref: uuid.UUID
    value: float | int = 0


@attrs.frozen
class Ping:
    ref: uuid.UUID


@attrs.frozen
class Emit:
    ref: uuid.UUID
    value: float = 0.0


class WfpThing(Entity):
    __tablename__ = "wfp_thing"
    label: Mapped[str]


def _feature() -> Feature[Any]:
    f = Feature("wfp", requires=["mail.send", "webhook.send"])
    f.entity(WfpThing)
    f.event(Ping)
    return f


def _emit(f: Feature[Any]) -> Any:
    return f.write_handler(
        "emit",
        f.pipeline(Emit)
        .create("thing", WfpThing, data=lambda c: WfpThing(label="emit"))
        .append_event(WfpThing, id=lambda c: c.steps["thing"].id, event=lambda c: Ping(c.payload.ref))
        .return_(lambda c: ok(None)),
    )


def _poisoned(f: Feature[Any], name: str, trigger: Any, payload: type[Any], value: object) -> Any:
    """A run that creates a thing, then suspends holding ``value``: the thing must go
    with the failed segment."""
    return f.workflow(
        name,
        trigger=trigger,
        pipeline=f.workflow_pipeline(payload)
        .create("thing", WfpThing, data=lambda c: WfpThing(label=f"poisoned:{name}"))
        .compute("value", lambda c: value)
        .wait("PT1M"),
    )


def _runs(app: App, workflow: Any) -> list[Any]:
    return app.runs(workflow)


def _things(app: App, label: str) -> int:
    table = WfpThing.__table__
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(table).where(table.c.label == label)) or 0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def test_a_run_holding_nan_fails_alone_and_the_pass_goes_on(
    app_on: Callable[..., App], clock: FakeClock, user: User, tmp_path: Path
) -> None:
    f = _feature()
    emit = _emit(f)
    later = f.workflow(
        "nan-later",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start).wait("PT1M").compute("value", lambda c: NAN).wait("PT1M"),
    )
    on_ping = _poisoned(f, "nan-on-event", on_event(Ping), Ping, NAN)
    ticking = _poisoned(f, "nan-cron", cron("* * * * *"), CronTick, NAN)
    healthy = f.workflow(
        "healthy",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start).wait("PT1M").send_mail(to="ops@example.com", subject="s", body="b"),
    )
    greeted = f.workflow("greet", trigger=on_event(Ping), pipeline=f.workflow_pipeline(Ping).compute("hi", lambda c: 1))
    waiter = f.workflow(
        "waiter",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start).wait_for_event(
            "got", Ping, key=lambda c: c.payload.ref, event_key=lambda e: e.ref, timeout="PT1H"
        ),
    )
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    app.run_worker(once=True)  # the cron schedule counts from here
    ref = uuid.uuid4()
    poisoned = app.start_workflow(later, Start(uuid.uuid4()), user=user)
    fine = app.start_workflow(healthy, Start(uuid.uuid4()), user=user)
    waiting = app.start_workflow(waiter, Start(ref), user=user)
    assert app.dispatch(emit, Emit(ref), user=user) == Ok(None)
    clock.advance(minutes=2)

    app.run_worker(once=True)  # must not raise
    app.run_worker(once=True)

    info = app.get_run(poisoned)
    assert info is not None and info.status == "failed" and info.error is not None
    assert info.error["code"] == "unstorable_state"
    assert "NaN" in info.error["message"] and info.error["message"].startswith("at step @wait~2: ")
    assert Failure(info.error["code"], info.error["message"]).http_status == 422
    for workflow, count in ((on_ping, 1), (ticking, 2)):  # the ticks of 9:01 and 9:02
        runs = _runs(app, workflow)
        assert [(r.status, r.error["code"] if r.error else None) for r in runs] == [
            ("failed", "unstorable_state")
        ] * count
        assert _things(app, f"poisoned:{workflow.name}") == 0  # the failed segment left nothing
    assert [r.status for r in _runs(app, greeted)] == ["completed"]
    for run_id in (fine, waiting):
        done = app.get_run(run_id)
        assert done is not None and done.status == "completed"
    assert app.get_run(waiting).steps["got"] == Ping(ref)  # type: ignore[union-attr]
    assert [item.status for item in app.outbox()] == ["sent"]


@pytest.mark.parametrize("value", ["huge-int", "nul-in-text"])
def test_a_state_the_database_refuses_fails_the_run_alone(
    app_on: Callable[..., App], db_url: str, clock: FakeClock, user: User, value: str
) -> None:
    """What the state codec lets through but a store refuses: an integer Python's JSON
    encoder will not write (both databases); a NUL in a string, which PostgreSQL refuses and
    SQLite would store. Both are refused before the database, alike on both, naming why."""
    refused = HUGE if value == "huge-int" else "a\x00b"
    f = _feature()
    bad = _poisoned(f, "refused", manual(Start), Start, refused)
    good = f.workflow(
        "good", trigger=manual(Start), pipeline=f.workflow_pipeline(Start).wait("PT1M").compute("n", lambda c: 1)
    )
    app = app_on([f], clock=clock)
    good_id = app.start_workflow(good, Start(uuid.uuid4()), user=user)
    bad_id = app.start_workflow(bad, Start(uuid.uuid4()), user=user)
    info = app.get_run(bad_id)
    assert info is not None
    assert info.status == "failed" and info.error is not None
    assert info.error["code"] == "unstorable_state"
    why = "must not contain NUL characters (U+0000)" if value == "nul-in-text" else "must have at most 4300 digits"
    assert info.error["message"] == f"at step @wait: a value cannot be stored: it {why}"
    assert "SELECT" not in info.error["message"] and "UPDATE" not in info.error["message"]
    assert _things(app, "poisoned:refused") == 0
    clock.advance(minutes=2)
    app.run_worker(once=True)
    assert app.get_run(good_id).status == "completed"  # type: ignore[union-attr]


def test_a_resumed_run_the_database_refuses_fails_alone_in_the_worker(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    flows = [
        f.workflow(
            name,
            trigger=manual(Start),
            pipeline=f.workflow_pipeline(Start)
            .wait("PT1M")
            .compute("value", lambda c: HUGE if c.payload.value == 1 else 7)
            .wait("PT1M"),
        )
        for name in ("first", "second")
    ]
    app = app_on([f], clock=clock)
    bad = app.start_workflow(flows[0], Start(uuid.uuid4(), 1), user=user)
    good = app.start_workflow(flows[1], Start(uuid.uuid4(), 2), user=user)
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["resumed"] == 2
    bad_info, good_info = app.get_run(bad), app.get_run(good)
    assert bad_info is not None and bad_info.error is not None
    assert (bad_info.status, bad_info.error["code"]) == ("failed", "unstorable_state")
    assert good_info is not None and (good_info.status, good_info.path) == ("suspended", "@wait~2")


def test_a_failure_message_the_database_cannot_store_is_escaped(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = _feature()
    flow = f.workflow(
        "refuses",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start).return_(lambda c: fail("refused", "bad\x00byte \udc80")),
    )
    app = app_on([f], clock=clock)
    info = app.get_run(app.start_workflow(flow, Start(uuid.uuid4()), user=user))
    assert info is not None and info.status == "failed"
    assert info.error == {"code": "refused", "message": "bad\\x00byte \\udc80"}


@pytest.mark.parametrize("damage", ["user", "state"])
def test_a_damaged_run_row_fails_alone(app_on: Callable[..., App], clock: FakeClock, user: User, damage: str) -> None:
    f = _feature()
    flow = f.workflow(
        "timer", trigger=manual(Start), pipeline=f.workflow_pipeline(Start).wait("PT1M").compute("n", lambda c: 1)
    )
    app = app_on([f], clock=clock)
    damaged = app.start_workflow(flow, Start(uuid.uuid4()), user=user)
    fine = app.start_workflow(flow, Start(uuid.uuid4()), user=user)
    state = {"values": {}, "retries": 3, "addressing": "name", "kind": "workflow.wait"}  # its step is there
    broken = {"user": {}} if damage == "user" else {"state": state}
    with app.engine.begin() as conn:
        conn.execute(sa.update(workflow_runs).where(workflow_runs.c.run_id == damaged).values(**broken))
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["resumed"] == 2
    info = app.get_run(damaged)
    assert info is not None and info.error is not None
    assert (info.status, info.error["code"]) == ("failed", "unstorable_state")
    assert "cannot be read" in info.error["message"]
    assert app.get_run(fine).status == "completed"  # type: ignore[union-attr]


@pytest.mark.parametrize(("path", "first"), [("7", "7"), ("0/do/#1/0", "0"), ("x", "x"), ("1/#2", "1")])
def test_a_stored_path_with_no_step_behind_it_strands_the_run_alone(
    app_on: Callable[..., App], clock: FakeClock, user: User, path: str, first: str
) -> None:
    """A path this definition has no step at (a damaged row, a step removed since) strands
    that run, intact, before any step runs (docs/workflows.md); the pass goes on."""
    f = _feature()
    flow = f.workflow(
        "timer", trigger=manual(Start), pipeline=f.workflow_pipeline(Start).wait("PT1M").compute("n", lambda c: 1)
    )
    app = app_on([f], clock=clock)
    damaged = app.start_workflow(flow, Start(uuid.uuid4()), user=user)
    fine = app.start_workflow(flow, Start(uuid.uuid4()), user=user)
    with app.engine.begin() as conn:
        conn.execute(sa.update(workflow_runs).where(workflow_runs.c.run_id == damaged).values(path=path))
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["resumed"] == 1
    info = app.get_run(damaged)
    assert info is not None and (info.status, info.path) == ("suspended", path)
    assert info.error == {"code": "stranded", "message": f'step "{first}" at {path} no longer exists'}
    assert app.get_run(fine).status == "completed"  # type: ignore[union-attr]


# --- start_workflow -----------------------------------------------------------------------------


REASONS = {
    "nan": "the payload cannot be stored: the float nan cannot be stored: JSON has no NaN or Infinity",
    "huge-int": "the payload cannot be stored: a value cannot be stored: it must have at most 4300 digits",
}


@pytest.mark.parametrize("kind", list(REASONS))
def test_start_workflow_with_an_unstorable_payload_raises_a_clear_error(
    app_on: Callable[..., App], clock: FakeClock, user: User, kind: str
) -> None:
    value, reason = (NAN if kind == "nan" else HUGE), REASONS[kind]
    f = _feature()
    flow = _poisoned(f, "payload", manual(Start), Start, 1)
    app = app_on([f], clock=clock)
    with pytest.raises(TypeError) as raised:
        app.start_workflow(flow, Start(uuid.uuid4(), value), user=user)  # type: ignore[arg-type]
    assert str(raised.value).startswith(f"workflow wfp:payload: {reason}")
    assert "INSERT" not in str(raised.value)
    assert app.runs() == [] and _things(app, "poisoned:payload") == 0


def test_an_event_whose_value_cannot_be_stored_starts_no_run_and_the_feed_goes_on(
    make_app: Callable[..., App], user: User
) -> None:
    """An event whose JSON holds a NaN (dispatch refuses one before the database, so it is
    written here as an older version or another writer could have on SQLite): the run it
    would start could not store its payload, so none starts; the next event does."""

    @attrs.frozen
    class Measured:
        value: float

    f = _feature()
    f.event(Measured)
    measure = f.write_handler(
        "measure",
        f.pipeline(Emit)
        .create("thing", WfpThing, data=lambda c: WfpThing(label="m"))
        .append_event(WfpThing, id=lambda c: c.steps["thing"].id, event=lambda c: Measured(c.payload.value))
        .return_(lambda c: ok(None)),
    )
    flow = f.workflow("on-measured", trigger=on_event(Measured), pipeline=f.workflow_pipeline(Measured))
    app = make_app([f])
    refused = app.dispatch(measure, Emit(uuid.uuid4(), NAN), user=user)
    assert isinstance(refused, Failure) and refused.code == "validation_error"
    assert app.dispatch(measure, Emit(uuid.uuid4(), 2.5), user=user) == Ok(None)
    with app.engine.begin() as conn:
        poisoned = conn.execute(
            sa.text("UPDATE kumiko_events SET payload = replace(payload, '2.5', 'NaN') WHERE payload LIKE '%2.5%'")
        )
        assert poisoned.rowcount == 1
    assert app.dispatch(measure, Emit(uuid.uuid4(), 1.5), user=user) == Ok(None)
    assert app.run_worker(once=True)["started"] == 1
    assert [(r.status, r.steps) for r in app.runs(flow)] == [("completed", {})]


# --- the outbox ---------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens there any more: connecting is refused


def test_an_outbox_row_whose_next_attempt_cannot_be_scheduled_is_set_aside(
    app_on: Callable[..., App], clock: FakeClock, user: User, tmp_path: Path
) -> None:
    f = _feature()
    url = f"http://127.0.0.1:{_closed_port()}/hook"
    beyond = RetryPolicy(times=3, base_delay=timedelta(days=4_000_000))  # past the year 9999
    hook = f.write_handler("hook", f.pipeline(Start).send_webhook(url=url, retry=beyond).return_(lambda c: ok(None)))
    mail = f.write_handler(
        "mail", f.pipeline(Start).send_mail(to="ops@example.com", subject="s", body="b").return_(lambda c: ok(None))
    )
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    assert app.dispatch(hook, Start(uuid.uuid4()), user=user) == Ok(None)
    assert app.dispatch(mail, Start(uuid.uuid4()), user=user) == Ok(None)
    counts = app.run_worker(once=True)
    assert (counts["sent"], counts["dead"]) == (1, 1)
    with app.engine.connect() as conn:
        rows = {r.kind: r for r in conn.execute(sa.select(outbox))}
    assert (rows["mail"].status, rows["webhook"].status, rows["webhook"].attempts) == ("sent", "dead", 1)
    assert "the next attempt cannot be scheduled: OverflowError" in rows["webhook"].last_error
    assert rows["webhook"].last_error.startswith("ConnectError")


def test_a_bug_outside_the_steps_fails_only_that_run(
    app_on: Callable[..., App], clock: FakeClock, user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: starting the steps of one run raises (a framework bug); that run
    fails with internal_error and the worker goes on with the next."""
    import kumiko_typed._workflow_engine as workflows_module

    f = _feature()
    flows = [
        f.workflow(
            name, trigger=manual(Start), pipeline=f.workflow_pipeline(Start).wait("PT1M").compute("n", lambda c: 1)
        )
        for name in ("unlucky", "lucky")
    ]
    app = app_on([f], clock=clock)
    unlucky = app.start_workflow(flows[0], Start(uuid.uuid4()), user=user)
    lucky = app.start_workflow(flows[1], Start(uuid.uuid4()), user=user)
    real_start_run = workflows_module.start_run

    def start_run(program: Any, *args: Any, **kwargs: Any) -> Any:
        if args[2][0] == "wfp:unlucky":  # the call's handler (workflow) name
            raise RuntimeError("a bug")
        return real_start_run(program, *args, **kwargs)

    monkeypatch.setattr(workflows_module, "start_run", start_run)
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["resumed"] == 2
    info = app.get_run(unlucky)
    assert info is not None and info.error is not None
    assert info.status == "failed"
    assert info.error == {
        "code": "internal_error",
        "message": "in the segment from step @wait: RuntimeError (see the worker's log)",
    }
    assert app.get_run(lucky).status == "completed"  # type: ignore[union-attr]
