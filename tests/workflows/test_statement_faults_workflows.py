"""Fault injection at every statement of the workflow engine's, the outbox worker's and
the answering calls' operations (DESIGN §6-§8): a manual start, a worker pass resuming a
run after its wait (and delivering the webhook it queued), a pass delivering an awaited
event (and starting the run it triggers), a retry attempt, a cron tick, a delivery pass,
``cancel_run``, ``requeue``, ``rebuild_projection``, ``read_stream`` and a query — each
failed at its k-th statement, for every k, by the driver's own error (``_faults``): the
database busy, another error, and on PostgreSQL the backend killed under the statement
or just before a COMMIT.  Then the operation runs again without the fault.  Whatever k:
exactly one effect (one run per key, per event, per tick; one row per segment; every
message received at least once and its row ``sent``), no run left waiting for an event
that came, no run of another tenant woken, a run failed only by a non-transient error in
its own segment, and no SQL in any message.  Both databases; a hand-moved clock."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _faults import counting, failing_at, killed_at_commit, no_leak
from _receiver import Receiver
from _support import ok_data, run_info
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

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
    manual,
    ok,
    on_event,
)
from kumiko_typed._outbox import CLAIM_LEASE
from kumiko_typed._tables import outbox as outbox_table
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
A = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset({"admin"}))
B = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset({"admin"}))


class SfwMark(Entity):
    __tablename__ = "sfw_mark"
    n: Mapped[int]
    what: Mapped[str] = mapped_column(sa.String(20))


class _ReadModels(MappedAsDataclass, DeclarativeBase):
    pass


class SfwSeen(_ReadModels):
    """A row a step writes through ``c.db``, beside the framework's writes."""

    __tablename__ = "sfw_seen"
    id: Mapped[int] = mapped_column(primary_key=True, init=False)
    n: Mapped[int]


def _seen(c: Any) -> int:
    """A resolver's own statements: an ORM object flushed, then a read."""
    c.db.add(SfwSeen(n=c.payload.n))
    c.db.flush()
    return int(c.db.scalar(sa.select(sa.func.count()).select_from(SfwSeen).where(SfwSeen.n == c.payload.n)))


@attrs.frozen
class Go:
    n: int
    url: str = ""


@attrs.frozen
class Ping:
    n: int


@attrs.frozen
class Seed:
    n: int


def _flaky() -> Callable[[Any], int]:
    """A step that fails the first time it runs for a payload, then succeeds (its own
    count per feature: the two databases' tests may run in one process)."""
    calls: dict[int, int] = {}

    def step(c: Any) -> int:
        n = c.payload.n
        calls[n] = calls.get(n, 0) + 1
        if calls[n] == 1:
            raise RuntimeError("first attempt fails")
        return int(n)

    return step


def _mark(what: str) -> Callable[[Any], SfwMark]:
    return lambda c: SfwMark(n=getattr(c.payload, "n", 0), what=what)


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("sfw", requires=["webhook.send"], projections=[SfwSeen])
    f.entity(SfwMark)
    f.event(Ping, name="sfw-ping")
    made: dict[str, Any] = {}
    flaky = _flaky()
    made["seed"] = f.write_handler(
        "seed",
        f.pipeline(Seed).create("m", SfwMark, data=_mark("seed")).return_(lambda c: ok(c.steps["m"].id)),
    )
    made["ping"] = f.write_handler(
        "ping",
        f.pipeline(Go)
        .append_event(SfwMark, id=lambda c: uuid.UUID(c.payload.url), event=lambda c: Ping(c.payload.n))
        .return_(lambda c: ok(None)),
    )
    made["hook"] = f.write_handler(
        "hook",
        f.pipeline(Go)
        .send_webhook(url=lambda c: c.payload.url, retry=RetryPolicy(times=1))
        .return_(lambda c: ok(None)),
    )
    made["count"] = f.query_handler(
        "count",
        f.query_pipeline(Seed).find_many("r", lambda c: sa.select(SfwMark)).return_(lambda c: ok(len(c.steps["r"]))),
    )
    made["waiting"] = f.workflow(
        "waiting",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .create("before", SfwMark, data=_mark("before"))
        .wait("PT1M")
        .create("after", SfwMark, data=_mark("after"))
        .compute("seen", _seen)
        .send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": c.payload.n})
        .compute("done", lambda c: c.payload.n),
    )
    made["listening"] = f.workflow(
        "listening",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .wait_for_event("got", Ping, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout="P1D")
        .create("after", SfwMark, data=_mark("woken")),
    )
    f.workflow(
        "triggered",
        trigger=on_event(Ping),
        pipeline=f.workflow_pipeline(Ping).create("m", SfwMark, data=_mark("triggered")),
    )
    made["retrying"] = f.workflow(
        "retrying",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .retry(times=3, base_delay=timedelta(minutes=1), do=lambda b: b.compute("v", flaky), name="again")
        .create("after", SfwMark, data=_mark("retried")),
    )
    return f, made


def _cron_feature() -> Feature[Any]:
    f: Feature[Any] = Feature("sfc")
    f.entity(SfwMark)
    f.workflow(
        "ticking",
        trigger=cron("* * * * *"),
        pipeline=f.workflow_pipeline(CronTick).create(
            "m", SfwMark, data=lambda c: SfwMark(n=c.payload.scheduled_at.minute, what="tick")
        ),
    )
    return f


def _marks(app: App, what: str) -> list[int]:
    with app.engine.connect() as conn:
        return sorted(conn.scalars(sa.select(SfwMark.n).where(SfwMark.what == what)))


def _seen_rows(app: App, n: int) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(SfwSeen).where(SfwSeen.n == n)) or 0)


def _kinds(app: App) -> list[str]:
    """The faults: the database busy (SQLite still locked, PostgreSQL's lock_timeout),
    which a worker outlives and a run is never failed for; on PostgreSQL also the
    connection killed under the statement.  Another error in a segment's statement fails
    its run, as any exception a step raises does (docs/workflows.md)."""
    return ["busy", "kill"] if app.engine.dialect.name == "postgresql" else ["busy"]


def _faulty_pass(app: App, at: int, kind: str) -> tuple[bool, list[str]]:
    """One worker pass failed at its ``at``-th statement: whether the fault was reached."""
    with failing_at(app.engine, at, kind) as fault:
        try:
            app.run_worker(once=True)
        except Exception as exc:  # a pass that stops the worker: its supervisor restarts it
            assert fault.fired, exc
    return fault.fired, fault.sent


def _settle(app: App, clock: FakeClock, seconds: float = CLAIM_LEASE.total_seconds() + 1) -> None:
    """Clean passes, ``seconds`` apart (past a segment's try again after ``unavailable``;
    by default past the outbox's claim lease), until nothing is left to do."""
    for _ in range(4):
        clock.advance(seconds=seconds)
        app.run_worker(once=True)


def _statements(app: App, operation: Callable[[], object]) -> int:
    with counting(app.engine) as clean:
        operation()
    return len(clean.sent)


@pytest.fixture
def made(db_url: str) -> Any:
    f, handlers = _feature()
    clock = FakeClock(T0)
    app = App([f], database_url=db_url, clock=clock)
    app.create_all()
    yield app, clock, handlers
    app.dispose()


def test_a_worker_pass_resuming_after_a_wait_failed_at_any_statement_loses_and_doubles_nothing(
    made: Any, receiver: Receiver
) -> None:
    """Two runs resumed in each pass (one batch: their stores held and sent together); the
    resumed segment writes and reads through ``c.db`` too."""
    app, clock, h = made
    n = 0

    def started() -> list[uuid.UUID]:
        nonlocal n
        runs = []
        for user in (A, B):
            n += 1
            runs.append(app.start_workflow(h["waiting"], Go(n, receiver.url(f"/{n}")), user=user))
        return runs

    started()
    clock.advance(minutes=2)
    total = _statements(app, lambda: app.run_worker(once=True))
    for kind in ["error", *_kinds(app)]:
        for at in range(1, total + 1):
            runs = started()
            clock.advance(minutes=2)
            fired, sent = _faulty_pass(app, at, kind)
            _settle(app, clock)
            where = (kind, at, sent[at - 1] if fired else None)
            for i, run_id in enumerate(reversed(runs)):
                run = run_info(app, run_id)
                if run.status == "failed":  # the error in its segment's statement, as a step's
                    assert kind == "error", (where, run)
                    no_leak(run.error["message"], driver_reason=run.error["code"] == "unstorable_state")
                    assert _marks(app, "after").count(n - i) == _seen_rows(app, n - i) == 0, where
                    continue
                assert run.status == "completed", (where, run)
                assert _marks(app, "after").count(n - i) == _seen_rows(app, n - i) == 1, where
                assert run.steps["seen"] == 1, where
                assert receiver.to(f"/{n - i}"), where  # delivered: at least once
    with app.engine.connect() as conn:
        assert set(conn.scalars(sa.select(outbox_table.c.status))) == {"sent"}
    assert _marks(app, "before") == list(range(1, n + 1))


def test_a_manual_start_failed_at_any_statement_starts_one_run_per_key(made: Any, receiver: Receiver) -> None:
    app, _clock, h = made
    total = _statements(app, lambda: app.start_workflow(h["waiting"], Go(0, receiver.url()), user=A, key="k0"))
    n = 0
    for kind in ["error", *_kinds(app)]:
        for at in range(1, total + 1):
            n += 1
            # Raised (a DBAPIError) or a run failed ``unavailable``: the caller's to retry, with its key.
            with failing_at(app.engine, at, kind) as fault, contextlib.suppress(sa.exc.DBAPIError):
                app.start_workflow(h["waiting"], Go(n, receiver.url()), user=A, key=f"k{n}")
            assert fault.fired, (kind, at)
            where = (kind, at, fault.sent[at - 1])
            run_id = app.start_workflow(h["waiting"], Go(n, receiver.url()), user=A, key=f"k{n}")
            assert app.start_workflow(h["waiting"], Go(n, receiver.url()), user=A, key=f"k{n}") == run_id
            run = run_info(app, run_id)
            if run.status == "failed":  # documented: a manual start's first segment fails its run
                # Another error: a step's is internal_error; the run's store's, unstorable_state.
                codes = {"internal_error", "unstorable_state"} if kind == "error" else {"unavailable"}
                assert run.error["code"] in codes, (where, run.error)
                no_leak(run.error["message"], driver_reason=run.error["code"] == "unstorable_state")
                assert _marks(app, "before").count(n) == 0, where
            else:
                assert run.status == "suspended", (where, run)
                assert _marks(app, "before").count(n) == 1, where
    assert len(app.runs()) == n + 1


def test_an_event_delivered_by_a_pass_failed_at_any_statement_wakes_its_run_once_and_no_other_tenants(
    made: Any,
) -> None:
    app, clock, h = made
    stream = ok_data(app.dispatch(h["seed"], Seed(0), user=A))
    n = 0

    def round_() -> tuple[uuid.UUID, uuid.UUID]:
        nonlocal n
        n += 1
        mine = app.start_workflow(h["listening"], Go(n), user=A)
        theirs = app.start_workflow(h["listening"], Go(n), user=B)
        app.run_worker(once=True)
        assert app.dispatch(h["ping"], Go(n, str(stream)), user=A) == Ok(None)
        return mine, theirs

    mine, theirs = round_()
    total = _statements(app, lambda: app.run_worker(once=True))
    assert run_info(app, mine).status == "completed"
    for kind in ["error", *_kinds(app)]:
        for at in range(1, total + 1):
            mine, theirs = round_()
            fired, sent = _faulty_pass(app, at, kind)
            _settle(app, clock, seconds=2)
            where = (kind, at, sent[at - 1] if fired else None)
            got = run_info(app, mine)
            # Never left waiting (a lost wake-up): woken by its event, or failed by the
            # error in its segment's statement (as by any exception of a step).
            if got.status == "failed":
                assert kind == "error", (where, got)
                no_leak(got.error["message"], driver_reason=got.error["code"] == "unstorable_state")
            else:
                assert (got.status, got.steps.get("got")) == ("completed", Ping(n)), (where, got)
                assert _marks(app, "woken").count(n) == 1, where
            assert (run_info(app, theirs).status, run_info(app, theirs).path) == ("suspended", "got"), where
            assert len(app.runs("sfw:triggered")) == n, where  # one per event
            assert _marks(app, "triggered").count(n) <= 1, where
            if kind != "error":
                assert _marks(app, "triggered").count(n) == 1, where
            assert isinstance(app.cancel_run(theirs, user=B), Ok)


def test_a_retry_attempt_in_a_pass_failed_at_any_statement_runs_to_one_success(made: Any) -> None:
    app, clock, h = made
    n = 1000

    def started() -> uuid.UUID:
        nonlocal n
        n += 1
        run_id = app.start_workflow(h["retrying"], Go(n), user=A)
        assert run_info(app, run_id).status == "suspended"  # the first attempt failed
        clock.advance(minutes=2)
        return run_id

    run_id = started()
    total = _statements(app, lambda: app.run_worker(once=True))
    assert run_info(app, run_id).status == "completed"
    for kind in ["error", *_kinds(app)]:
        for at in range(1, total + 1):
            run_id = started()
            fired, sent = _faulty_pass(app, at, kind)
            _settle(app, clock)
            where = (kind, at, sent[at - 1] if fired else None)
            run = run_info(app, run_id)
            if run.status == "failed":  # the error in its segment's statement, as a step's
                assert kind == "error", (where, run)
                no_leak(run.error["message"], driver_reason=run.error["code"] == "unstorable_state")
                assert _marks(app, "retried").count(n) == 0, where
            else:
                assert run.status == "completed", (where, run)
                assert _marks(app, "retried").count(n) == 1, where


def _operations(app: App, h: dict[str, Any], receiver: Receiver) -> dict[str, Any]:
    """Each answering call: (make its subject, call it, what it changed of the subject)."""

    def dead_row() -> uuid.UUID:
        receiver.respond = lambda _i, _p: (500, {})
        known = {item.id for item in app.outbox()}
        assert app.dispatch(h["hook"], Go(0, receiver.url("/dead")), user=A) == Ok(None)
        app.run_worker(once=True)  # also the rows requeued before: dead again
        [new] = {item.id for item in app.outbox(status="dead")} - known
        return new

    def run() -> uuid.UUID:
        return app.start_workflow(h["waiting"], Go(0, receiver.url()), user=A)

    def drifted() -> uuid.UUID:
        mark: uuid.UUID = ok_data(app.dispatch(h["seed"], Seed(7), user=A))
        with app.engine.begin() as conn:  # the row no longer what its events say
            conn.execute(sa.update(SfwMark).where(SfwMark.id == mark).values(n=99))
        return mark

    def n_of(mark: uuid.UUID) -> int:
        with app.engine.connect() as conn:
            return int(conn.execute(sa.select(SfwMark.n).where(SfwMark.id == mark)).scalar_one())

    return {
        "rebuild_projection": (drifted, lambda _: app.rebuild_projection(SfwMark, user=A), n_of),
        "read_stream": (
            lambda: ok_data(app.dispatch(h["seed"], Seed(8), user=A)),
            lambda mark: app.read_stream(SfwMark, mark, user=A),
            lambda _: None,
        ),
        "cancel_run": (
            run,
            lambda run_id: app.cancel_run(run_id, user=A, reason="no"),
            lambda run_id: run_info(app, run_id),
        ),
        "requeue": (
            dead_row,
            lambda row: app.requeue(row, user=A),
            lambda row: [(i.status, i.attempts) for i in app.outbox() if i.id == row],
        ),
        "query": (
            lambda: None,
            lambda _: app.query(h["count"], Seed(0), user=A),
            lambda _: None,
        ),
    }


@pytest.mark.parametrize("operation", ["cancel_run", "requeue", "query", "rebuild_projection", "read_stream"])
def test_an_answering_call_failed_at_any_statement_changes_nothing_and_its_repeat_succeeds(
    made: Any, receiver: Receiver, operation: str
) -> None:
    """``cancel_run``, ``requeue``, ``rebuild_projection``, ``read_stream`` and a query
    answer a Failure, never raise: ``unavailable`` for the database busy,
    ``internal_error`` else, neither quoting SQL; nothing changed, and the same call then
    succeeds.  A connection killed under a statement (PostgreSQL) is run once more at
    once, on a new connection (docs/operations.md, "Connections after a restart"):
    ``rebuild_projection`` and ``read_stream`` answered ``unavailable`` instead."""
    app, _clock, h = made
    make, call, state = _operations(app, h, receiver)[operation]
    subject = make()
    total = _statements(app, lambda: call(subject))
    for kind in ["error", *_kinds(app)]:
        for at in range(1, total + 1):
            subject = make()
            before = state(subject)
            with failing_at(app.engine, at, kind) as fault:
                result = call(subject)
            where = (kind, at, fault.sent[at - 1] if fault.fired else None)
            assert fault.fired, where
            if kind != "kill":
                assert isinstance(result, Failure), (where, result)
                assert result.code == ("internal_error" if kind == "error" else "unavailable"), (where, result)
                no_leak(result.message)
                assert state(subject) == before, where
                result = call(subject)
            assert isinstance(result, Ok), (where, result)
            assert state(subject) != before or operation in ("query", "read_stream"), where


def test_a_cron_pass_failed_at_any_statement_fires_each_tick_once(db_url: str) -> None:
    """One run per tick whatever statement failed.  An error that is not the database
    busy, in the tick's segment, fails that run (a step's exception does), its message
    quoting no SQL; the schedule goes on."""
    clock = FakeClock(T0)
    app = App([_cron_feature()], database_url=db_url, clock=clock)
    try:
        app.create_all()
        app.run_worker(once=True)  # the schedule starts
        clock.advance(minutes=1)
        total = _statements(app, lambda: app.run_worker(once=True))
        ticks = [1]
        assert _marks(app, "tick") == ticks
        seen_failed: set[uuid.UUID] = set()
        for kind in ["error", *_kinds(app)]:
            for at in range(1, total + 1):
                clock.now = T0 + timedelta(minutes=len(ticks) + 1)  # on the minute, past the settling
                ticks.append(clock.now.minute)
                fired, sent = _faulty_pass(app, at, kind)
                _settle(app, clock, seconds=2)
                where = (kind, at, sent[at - 1] if fired else None)
                runs = app.runs()
                assert len(runs) == len(ticks), where
                failed = [r for r in runs if r.status == "failed"]
                for run in failed:
                    if run.run_id in seen_failed:
                        continue
                    seen_failed.add(run.run_id)
                    assert kind == "error" and run.error is not None, (where, run)
                    no_leak(run.error["message"], driver_reason=run.error["code"] == "unstorable_state")
                assert len(failed) + len(_marks(app, "tick")) == len(ticks), where
                assert all(r.status in ("completed", "failed") for r in runs), (where, runs)
    finally:
        app.dispose()


def test_a_delivery_pass_failed_at_any_statement_loses_no_message(
    db_url: str, receiver: Receiver, tmp_path: Any
) -> None:
    """At least once, never lost: a pass failed before its POST (or mail) sends it later;
    one failed after it — the row's ``sent`` not recorded — may send it again, with the same
    ``Idempotency-Key``.  Every row ends ``sent``; a fault that stops the worker (not a
    transient one) is its supervisor's to restart, as the next pass here."""
    f: Feature[Any] = Feature("sfd", requires=["mail.send", "webhook.send"])
    send = f.write_handler(
        "send",
        f.pipeline(Go)
        .send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": c.payload.n})
        .send_mail(to="a@example.com", subject=lambda c: f"n {c.payload.n}", body="b")
        .return_(lambda c: ok(None)),
    )
    clock = FakeClock(T0)
    app = App([f], database_url=db_url, clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    try:
        app.create_all()
        assert app.dispatch(send, Go(0, receiver.url("/0")), user=A) == Ok(None)
        total = _statements(app, lambda: app.run_worker(once=True))
        assert total >= 3  # a claim, and the records of the two deliveries after them
        n = 0
        for kind in ["error", *_kinds(app)]:
            for at in range(1, total + 1):
                n += 1
                assert app.dispatch(send, Go(n, receiver.url(f"/{n}")), user=A) == Ok(None)
                fired, sent = _faulty_pass(app, at, kind)
                _settle(app, clock)
                where = (kind, at, sent[at - 1] if fired else None)
                keys = {r.headers["idempotency-key"] for r in receiver.to(f"/{n}")}
                assert len(keys) == 1, (where, keys)  # received, and only this row's
                with app.engine.connect() as conn:
                    rows = conn.execute(sa.select(outbox_table.c.id, outbox_table.c.status)).all()
                assert {status for _, status in rows} == {"sent"}, (where, rows)
        mails = list((tmp_path / "mail").glob("*.eml"))
        assert len(mails) == n + 1  # one file per message id: a mail sent again overwrites its own
    finally:
        app.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("operation", ["dispatch", "start", "resume", "event", "delivery", "cancel_run"])
def test_a_commit_whose_connection_died_loses_nothing_and_its_repeat_does_it_once(
    fresh_postgres_url: str, receiver: Receiver, operation: str
) -> None:
    """The backend killed just before each COMMIT of the operation: nothing of that
    transaction committed.  The caller hears ``unavailable`` (a dispatch, a cancel) or the
    driver's error (a start), never SQL, and its repeat (with its key) does it once; a
    worker's next passes do what the killed one did not, and deliver at least once."""
    f, h = _feature()
    clock = FakeClock(T0)
    app = App([f], database_url=fresh_postgres_url, clock=clock)
    stream: uuid.UUID | None = None
    n = 0
    run: list[uuid.UUID] = []  # the operation's run

    def prepare() -> Callable[[], object]:
        nonlocal n, stream
        n += 1
        url = receiver.url(f"/{n}")
        if operation == "dispatch":
            return lambda: app.dispatch(h["hook"], Go(n, url), user=A, idempotency_key=f"d{n}")
        if operation == "start":
            return lambda: app.start_workflow(h["waiting"], Go(n, url), user=A, key=f"s{n}")
        run.clear()
        if operation == "cancel_run":
            run.append(app.start_workflow(h["waiting"], Go(n, url), user=A))
            return lambda: app.cancel_run(run[0], user=A)
        if operation == "resume":
            run.append(app.start_workflow(h["waiting"], Go(n, url), user=A))
            clock.advance(minutes=2)
        elif operation == "event":
            if stream is None:
                stream = ok_data(app.dispatch(h["seed"], Seed(0), user=A))
            run.append(app.start_workflow(h["listening"], Go(n), user=A))
            app.run_worker(once=True)
            assert app.dispatch(h["ping"], Go(n, str(stream)), user=A) == Ok(None)
        else:
            assert app.dispatch(h["hook"], Go(n, url), user=A) == Ok(None)
        return lambda: app.run_worker(once=True)

    def check(first: object) -> None:
        if operation in ("dispatch", "cancel_run"):
            if isinstance(first, Failure):
                assert first.code == "unavailable", first
                no_leak(first.message)
            again = prepare_call()
            assert isinstance(again, Ok), again
        elif operation == "start":
            run.append(prepare_call())
        _settle(app, clock, seconds=2)
        _settle(app, clock)

    try:
        app.create_all()
        call = prepare()
        with killed_at_commit(app.engine, 0) as clean:
            call()
        _settle(app, clock)
        assert clean.commits >= 1, clean.commits
        tried = 0
        for at in range(1, clean.commits + 1):
            call = prepare()
            prepare_call = call
            with killed_at_commit(app.engine, at) as kill:
                try:
                    first: object = call()
                except sa.exc.DBAPIError as exc:
                    assert operation in ("start", "resume", "event", "delivery"), exc
                    first = exc
            if not kill.fired:  # this pass committed less often than the counted one
                continue
            tried += 1
            check(first)
            where = (at, first)
            runs = [run_info(app, run_id) for run_id in run]
            if operation == "dispatch" or operation == "delivery":
                assert receiver.to(f"/{n}"), where
            if operation in ("start", "resume"):
                assert [r.status for r in runs] == ["completed"], (where, runs)
                assert _marks(app, "before").count(n) == _marks(app, "after").count(n) == 1, where
                assert receiver.to(f"/{n}"), where
            if operation == "event":
                assert [r.status for r in runs] == ["completed"], (where, runs)
                assert _marks(app, "woken").count(n) == _marks(app, "triggered").count(n) == 1, where
            if operation == "cancel_run":
                assert [r.status for r in runs] == ["cancelled"], (where, runs)
        assert tried >= 1
        with app.engine.connect() as conn:
            assert set(conn.scalars(sa.select(outbox_table.c.status))) <= {"sent"}
    finally:
        app.dispose()
