"""How an aggregate write reaches the database, on SQLite and PostgreSQL.

A write based on the row its ``get_one`` loaded uses it as it is (no second, locking
read), without a savepoint of its own: the event's unique (stream, version) refuses it if
another writer got there first.  These tests pin the statements down, and show that
nothing is lost where the shortcut does not apply: a row read in an earlier transaction,
a write that fails without a savepoint of its own, a race.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _crash import said
from _sql_log import statements
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, _dml, manual, ok
from kumiko_typed._tables import events
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class TwpGadget(Entity):
    __tablename__ = "twp_gadget"
    code: Mapped[str] = mapped_column(sa.String(40), unique=True)
    label: Mapped[str] = mapped_column(sa.String(100))
    count: Mapped[int] = mapped_column(default=0)


GADGETS: sa.Table = TwpGadget.__table__  # type: ignore[assignment]


class TwpStock(Entity):
    __tablename__ = "twp_stock"
    __table_args__ = (sa.CheckConstraint("qty >= 0", name="twp_stock_qty_not_negative"),)
    qty: Mapped[int] = mapped_column(default=0)


@attrs.frozen
class Take:
    id: uuid.UUID
    qty: int


@attrs.frozen
class Bumped:
    n: int


@attrs.frozen
class Recoded:
    code: str


@attrs.frozen
class Blanked:
    """Its projector breaks the row's NOT NULL ``label``: the flush fails."""


@attrs.frozen
class NewGadget:
    code: str


@attrs.frozen
class Target:
    id: uuid.UUID
    code: str = ""


def _feature() -> Feature[Any]:
    f: Feature[Any] = Feature("twp", requires=["call_feature"])
    f.entity(TwpGadget)
    f.event(Bumped)
    f.event(Recoded)
    f.event(Blanked)

    @f.projector(TwpGadget, Bumped)
    def bump(row: TwpGadget, event: Bumped) -> None:
        row.count += event.n

    @f.projector(TwpGadget, Recoded)
    def recode(row: TwpGadget, event: Recoded) -> None:
        row.code = event.code

    @f.projector(TwpGadget, Blanked)
    def blank(row: TwpGadget, event: Blanked) -> None:
        row.label = None  # type: ignore[assignment]

    return f


def _handlers(f: Feature[Any]) -> Any:
    """``seed``, ``bump`` (get_one + append_event), ``recode``, ``blank`` and
    ``blank_nested`` (``blank`` through call_feature)."""

    def by_id(c: Any) -> Any:
        return sa.select(TwpGadget).where(TwpGadget.id == c.payload.id)

    seed = f.write_handler(
        "seed",
        f.pipeline(NewGadget)
        .create("g", TwpGadget, data=lambda c: TwpGadget(code=c.payload.code, label="gadget"))
        .return_(lambda c: ok(c.steps["g"].id)),
    )

    def event_handler(name: str, event: Callable[[Any], object]) -> Any:
        return f.write_handler(
            name,
            f.pipeline(Target)
            .get_one("g", by_id)
            .append_event(TwpGadget, id=lambda c: c.payload.id, event=event)
            .return_(lambda c: ok(c.steps["g"].count)),
        )

    bump = event_handler("bump", lambda c: Bumped(1))
    recode = event_handler("recode", lambda c: Recoded(c.payload.code))
    blank = event_handler("blank", lambda c: Blanked())
    blank_nested = f.write_handler(
        "blank-nested",
        f.pipeline(Target).call_feature("inner", blank, payload=lambda c: c.payload).return_(lambda c: ok(0)),
    )
    return seed, bump, recode, blank, blank_nested


def _snapshot(app: App) -> tuple[list[tuple[Any, ...]], ...]:
    with app.engine.connect() as conn:
        evs = conn.execute(
            sa.select(events.c.stream_id, events.c.stream_version, events.c.type).order_by(events.c.position)
        )
        rows = conn.execute(
            sa.select(GADGETS.c.code, GADGETS.c.label, GADGETS.c.count, GADGETS.c.version).order_by(GADGETS.c.code)
        )
        return [tuple(e) for e in evs], [tuple(r) for r in rows]


def _count(seen: list[str], start: str) -> int:
    return sum(1 for s in seen if s.upper().startswith(start))


# --- the statements ---------------------------------------------------------------------------


def test_an_event_reads_its_row_once_and_takes_no_savepoint(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed, bump, *_ = _handlers(f)
    app = app_on([f])
    gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
    with statements(app.engine) as seen:
        assert app.dispatch(bump, Target(gid), user=admin) == Ok(1)
    assert _count(seen, "SELECT TWP_GADGET.") == 1, seen
    assert not [s for s in seen if "FOR UPDATE" in s.upper() or "SAVEPOINT" in s.upper()], seen
    assert _count(seen, "INSERT INTO KUMIKO_EVENTS") == 1
    assert _count(seen, "UPDATE TWP_GADGET") == 1
    # no lock of any kind: a concurrent write of the row is caught by the event's version
    assert not [s for s in seen if "pg_advisory" in s or "LOCK TABLE" in s.upper()], seen
    assert _snapshot(app)[1] == [("a", "gadget", 1, 2)]


def test_a_unique_clash_needs_no_savepoint_and_writes_nothing(app_on: AppOn, admin: User) -> None:
    """The clash ends the pipeline and the whole transaction rolls back: nothing has to
    stay usable after it, directly or through call_feature."""
    f = _feature()
    seed, _bump, recode, *_ = _handlers(f)
    recode_nested = f.write_handler(
        "recode-nested",
        f.pipeline(Target).call_feature("inner", recode, payload=lambda c: c.payload).return_(lambda c: ok(0)),
    )
    app = app_on([f])
    ok_data(app.dispatch(seed, NewGadget("taken"), user=admin))
    gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
    before = _snapshot(app)
    for handler in (recode, recode_nested):
        with statements(app.engine) as seen:
            clash = failure_of(app.dispatch(handler, Target(gid, "taken"), user=admin))
        assert clash.code == "unique_violation"
        assert isinstance(clash.details, dict)
        assert clash.details["entity"] == "TwpGadget"
        assert _count(seen, "SAVEPOINT") == (handler is recode_nested), seen
        assert _snapshot(app) == before

    ok_data(app.dispatch(recode, Target(gid, "b"), user=admin))
    assert _snapshot(app)[1] == [("b", "gadget", 0, 2), ("taken", "gadget", 0, 1)]


def test_sqlite_takes_the_write_lock_at_its_first_statement_seen_or_not(
    make_app: Callable[..., App], admin: User, tmp_path: Any
) -> None:
    """A dispatch's ``BEGIN IMMEDIATE`` goes straight to the driver when no listener would
    see it: the write lock is still held from the read on (another writer is refused
    there), and a statement listener still sees it sent, first."""
    f = _feature()
    seed, *_ = _handlers(f)
    outsider: list[str] = []

    def write_beside(c: Any) -> int:
        other = sqlite3.connect(tmp_path / "app0.sqlite3", isolation_level=None, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            outsider.append("wrote")
        except sqlite3.OperationalError as exc:
            outsider.append(str(exc))
        finally:
            other.close()
        return 0

    peek = f.write_handler(
        "peek",
        f.pipeline(Target)
        .get_one("g", lambda c: sa.select(TwpGadget).where(TwpGadget.id == c.payload.id))
        .compute("beside", write_beside)
        .return_(lambda c: ok(c.steps["g"].count)),
    )
    app = make_app([f])
    gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
    assert app.dispatch(peek, Target(gid), user=admin) == Ok(0)
    with statements(app.engine) as seen:
        assert app.dispatch(peek, Target(gid), user=admin) == Ok(0)
    assert outsider == ["database is locked", "database is locked"]
    assert seen[0] == "BEGIN IMMEDIATE", seen


@pytest.mark.parametrize(
    "watch", ["echo", "before_execute", "after_execute", "before_cursor_execute", "after_cursor_execute", "do_execute"]
)
def test_sqlite_sends_its_begin_and_writes_through_sqlalchemy_when_anything_watches(
    make_app: Callable[..., App], admin: User, watch: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Straight to the driver only when nothing would tell: the engine's echo, a
    ``before_cursor_execute`` or ``after_cursor_execute`` listener (other than the
    framework's own) and a dialect's ``do_execute`` each still see the ``BEGIN
    IMMEDIATE`` (a mutation run found each condition untested) and the event's and the
    row's INSERT and UPDATE; a ``before_execute`` or ``after_execute`` listener, which
    SQLAlchemy never calls for a ``BEGIN``, sees those writes."""
    f = _feature()
    seed, bump, *_ = _handlers(f)
    app = make_app([f])
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(" ".join(str(args[2] if "cursor" in watch else args[1]).split()))

    if watch == "echo":
        caplog.set_level(logging.INFO, logger="sqlalchemy.engine.Engine")
        app.engine.echo = True
    else:
        sa.event.listen(app.engine, watch, record)
    gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
    assert app.dispatch(bump, Target(gid), user=admin) == Ok(1)
    if watch == "echo":
        app.engine.echo = False
        seen = [" ".join(r.getMessage().split()) for r in caplog.records if r.name.startswith("sqlalchemy.engine")]
    assert ("BEGIN IMMEDIATE" in seen) is (watch not in ("before_execute", "after_execute")), seen
    assert _count(seen, "INSERT INTO KUMIKO_EVENTS") == 2, seen
    assert _count(seen, "INSERT INTO TWP_GADGET") == 1, seen
    assert _count(seen, "UPDATE TWP_GADGET") == 1, seen


def test_sqlite_sends_a_writes_rows_on_the_driver_when_nothing_watches(
    make_app: Callable[..., App], admin: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event's INSERT and the row's INSERT and UPDATE skip ``Connection.execute``
    (its execution context and result were a third of a dispatch's SQLAlchemy work) and
    write what it wrote: the driver runs them, in the dispatch's transaction."""
    f = _feature()
    seed, bump, *_ = _handlers(f)
    app = make_app([f])
    driver: list[str] = []
    sa.event.listen(app.engine, "connect", lambda conn, _record: conn.set_trace_callback(driver.append))
    app.engine.dispose()  # the connections from now on are traced
    through: list[str] = []
    execute = sa.Connection.execute

    def counted(self: sa.Connection, statement: Any, *args: Any, **kwargs: Any) -> Any:
        through.append(str(statement))
        return execute(self, statement, *args, **kwargs)

    monkeypatch.setattr(sa.Connection, "execute", counted)
    gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
    assert app.dispatch(bump, Target(gid), user=admin) == Ok(1)
    writes_through = [s for s in through if s.startswith(("INSERT", "UPDATE"))]
    # On a SQLAlchemy release the driver's path was not verified on, all go through it.
    assert len(writes_through) == (0 if _dml.VERIFIED else 4), through
    written = [s.split(" (", 1)[0].split(" SET ", 1)[0] for s in driver if s.startswith(("INSERT", "UPDATE"))]
    assert written == [
        "INSERT INTO kumiko_events",
        "INSERT INTO twp_gadget",
        "INSERT INTO kumiko_events",
        "UPDATE twp_gadget",
    ], driver
    assert _snapshot(app) == ([(gid, 1, "twp-gadget.created"), (gid, 2, "bumped")], [("a", "gadget", 1, 2)])


def test_an_unverified_sqlalchemy_release_writes_through_connection_execute(
    make_app: Callable[..., App], admin: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's path calls SQLAlchemy's private code: on a release it was not verified
    on, every write goes through ``Connection.execute`` and writes the same rows."""
    monkeypatch.setattr(_dml, "VERIFIED", False)
    f = _feature()
    seed, bump, *_ = _handlers(f)
    app = make_app([f])
    through: list[str] = []
    execute = sa.Connection.execute

    def counted(self: sa.Connection, statement: Any, *args: Any, **kwargs: Any) -> Any:
        through.append(str(statement).split(" (", 1)[0].split(" SET ", 1)[0])
        return execute(self, statement, *args, **kwargs)

    monkeypatch.setattr(sa.Connection, "execute", counted)
    gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
    assert app.dispatch(bump, Target(gid), user=admin) == Ok(1)
    assert [s for s in through if s.startswith(("INSERT", "UPDATE"))] == [
        "INSERT INTO kumiko_events",
        "INSERT INTO twp_gadget",
        "INSERT INTO kumiko_events",
        "UPDATE twp_gadget",
    ]
    assert _snapshot(app) == ([(gid, 1, "twp-gadget.created"), (gid, 2, "bumped")], [("a", "gadget", 1, 2)])


def test_a_row_the_database_refuses_names_its_column_and_field(app_on: AppOn, admin: User) -> None:
    """A refused row write is the same ``validation_error`` on the driver's path (SQLite)
    as through ``Connection.execute`` (PostgreSQL): the failure's ``handle_error`` sees
    the statement and its row, which name the column and the payload field."""
    f: Feature[Any] = Feature("twp-stock")
    f.entity(TwpStock)
    stock = f.write_handler(
        "stock",
        f.pipeline(Take)
        .create("s", TwpStock, data=lambda c: TwpStock(qty=c.payload.qty))
        .return_(lambda c: ok(c.steps["s"].id)),
    )
    take = f.write_handler(
        "take",
        f.pipeline(Take)
        .get_one("s", lambda c: sa.select(TwpStock).where(TwpStock.id == c.payload.id))
        .update(
            "saved",
            TwpStock,
            id=lambda c: c.payload.id,
            changes=lambda c: {"qty": c.steps["s"].qty - c.payload.qty},
            version=lambda c: c.steps["s"].version,
        )
        .return_(lambda c: ok(c.steps["saved"].version)),
    )
    app = app_on([f])
    made = ok_data(app.dispatch(stock, Take(uuid.uuid4(), 2), user=admin))
    created = failure_of(app.dispatch(stock, Take(uuid.uuid4(), -1), user=admin))
    updated = failure_of(app.dispatch(take, Take(made, 3), user=admin))
    for failed, path in ((created, "$.qty"), (updated, "$")):
        assert failed.code == "validation_error", failed
        assert isinstance(failed.details, list)
        assert failed.details[0]["column"] == "twp_stock.qty", failed
        assert failed.details[0]["constraint"] == "twp_stock_qty_not_negative", failed
        assert failed.details[0]["path"] == path, failed


# --- failures without a savepoint of their own --------------------------------------------------


def test_a_failing_flush_is_an_internal_error_that_writes_nothing(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed, bump, _recode, blank, blank_nested = _handlers(f)
    app = app_on([f])
    gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
    before = _snapshot(app)
    for handler in (blank, blank_nested):
        failed = failure_of(app.dispatch(handler, Target(gid), user=admin))
        assert failed.code == "internal_error"
        assert "IntegrityError" in failed.message
        assert _snapshot(app) == before
    assert app.dispatch(bump, Target(gid), user=admin) == Ok(1)


def test_a_retry_attempt_whose_flush_failed_rolls_back_and_the_next_one_writes(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed, *_ = _handlers(f)
    attempts: list[int] = []

    def event(c: Any) -> object:
        attempts.append(1)
        return Blanked() if len(attempts) == 1 else Bumped(5)

    pipeline = f.workflow_pipeline(Target).retry(
        times=2, do=lambda b: b.append_event(TwpGadget, id=lambda c: c.payload.id, event=event)
    )
    flow = f.workflow("bump-later", trigger=manual(Target), pipeline=pipeline)
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
    run_id = app.start_workflow(flow, Target(gid), user=admin)
    clock.advance(minutes=5)
    app.run_worker(once=True)
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, len(attempts)) == ("completed", 2)
    assert _snapshot(app)[1] == [("a", "gadget", 5, 2)]
    assert [e[1:] for e in _snapshot(app)[0]] == [(1, "twp-gadget.created"), (2, "bumped")]


# --- concurrency (PostgreSQL) -------------------------------------------------------------------


def _in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


@pytest.mark.postgres
def test_a_write_based_on_a_read_another_writer_overtook_is_a_version_conflict(
    fresh_postgres_url: str, admin: User
) -> None:
    """No lock from the first read: a concurrent writer of the same row goes ahead (it
    does not wait for this transaction), and this one's write, based on the version it
    read, is refused by the event's unique (stream, version): nothing of it is written."""
    f = _feature()
    seed, bump, *_ = _handlers(f)
    raced: list[object] = []
    app: App | None = None

    def race(c: Any) -> bool:
        assert app is not None
        thread, out = _in_thread(lambda: app.dispatch(bump, Target(c.payload.id), user=admin))
        thread.join(timeout=60)
        assert not thread.is_alive(), "the other writer waited for this transaction"
        raced.extend(out)
        return True

    racing = f.write_handler(
        "racing",
        f.pipeline(Target)
        .get_one("g", lambda c: sa.select(TwpGadget).where(TwpGadget.id == c.payload.id))
        .compute("raced", race)
        .append_event(TwpGadget, id=lambda c: c.payload.id, event=lambda c: Bumped(10))
        .return_(lambda c: ok(c.steps["g"].count)),
    )
    app = App([f], database_url=fresh_postgres_url)
    try:
        app.create_all()
        gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
        result = app.dispatch(racing, Target(gid), user=admin)
        assert isinstance(result, Failure) and result.code == "version_conflict", result
        # The version found taken is the stream's (at least): not the one read, as if no
        # writer had come between (the message said version 2 was taken, details 1 and 1).
        assert result.details == {"entity_id": str(gid), "expected_version": 1, "current_version": 2}
        assert result.message == f"TwpGadget {gid}: version 2 of its event stream is taken already"
        assert raced == [Ok(1)]
        assert _snapshot(app)[1] == [("a", "gadget", 1, 2)]  # the other writer's bump only
    finally:
        app.dispose()


@pytest.mark.postgres
def test_a_workflow_segment_overtaken_between_its_read_and_its_write_fails_cleanly(
    fresh_postgres_url: str, admin: User
) -> None:
    """A workflow segment gets a dispatch's isolation (``run_in_scope`` for both): a
    writer racing its read goes ahead, and the segment's write is a version_conflict
    (the run fails with it; a ``retry`` around the steps would try again)."""
    f = _feature()
    seed, bump, *_ = _handlers(f)
    raced: list[object] = []
    app: App | None = None

    def race(c: Any) -> bool:
        assert app is not None
        thread, out = _in_thread(lambda: app.dispatch(bump, Target(c.payload.id), user=admin))
        thread.join(timeout=60)
        assert not thread.is_alive(), "the other writer waited for this transaction"
        raced.extend(out)
        return True

    pipeline = (
        f.workflow_pipeline(Target)
        .get_one("g", lambda c: sa.select(TwpGadget).where(TwpGadget.id == c.payload.id))
        .compute("raced", race)
        .append_event(TwpGadget, id=lambda c: c.payload.id, event=lambda c: Bumped(10))
    )
    flow = f.workflow("racing", trigger=manual(Target), pipeline=pipeline)
    app = App([f], database_url=fresh_postgres_url)
    try:
        app.create_all()
        gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
        run_id = app.start_workflow(flow, Target(gid), user=admin)
        assert raced == [Ok(1)]
        info = app.get_run(run_id)
        assert info is not None and info.status == "failed", info
        assert info.error is not None and info.error["code"] == "version_conflict"
        assert _snapshot(app)[1] == [("a", "gadget", 1, 2)]
    finally:
        app.dispose()


# --- values the columns cannot hold -------------------------------------------------------------


def test_a_refused_value_fails_a_workflow_run_with_validation_error(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed, *_ = _handlers(f)
    flow = f.workflow(
        "overflow",
        trigger=manual(Target),
        pipeline=f.workflow_pipeline(Target).append_event(
            TwpGadget, id=lambda c: c.payload.id, event=lambda c: Bumped(2**70)
        ),
    )
    app = app_on([f])
    gid = ok_data(app.dispatch(seed, NewGadget("a"), user=admin))
    before = _snapshot(app)
    info = app.get_run(app.start_workflow(flow, Target(gid), user=admin))
    assert info is not None
    assert info.status == "failed"
    assert info.error is not None and info.error["code"] == "validation_error"
    assert info.error["message"] == (
        "step @append_event aggregate.append_event: a value does not fit its column: "
        "must be between -2147483648 and 2147483647 (twp_gadget.count)"
    )
    assert _snapshot(app) == before


def test_an_overflow_in_a_computation_is_still_an_internal_error(app_on: AppOn, admin: User) -> None:
    """Only a value a data step hands to the database is the input's fault."""
    f = _feature()
    h = f.write_handler(
        "overflow",
        f.pipeline(NewGadget).compute("n", lambda c: int(float("inf"))).return_(lambda c: ok(c.steps["n"])),
    )
    app = app_on([f])
    failed = failure_of(app.dispatch(h, NewGadget("a"), user=admin))
    assert failed.code == "internal_error"
    assert said(failed) == 'step 0 compute "n" raised OverflowError'
