"""After a PostgreSQL restart (here: every backend of the database terminated while the
App's pool is idle) the first dispatch met its pooled connection dead and answered
``unavailable``.  A transaction whose connection is lost before its COMMIT was sent has
committed nothing, so it is run once more on a fresh connection: the dispatch succeeds
and writes once.  A connection lost at the COMMIT itself leaves the outcome unknown: that
is ``unavailable`` as before, never run again."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, run_info
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed.testing import FakeClock

pytestmark = pytest.mark.postgres


class RcNote(Entity):
    __tablename__ = "rc_note"
    text: Mapped[str] = mapped_column(sa.String(40))


@attrs.frozen
class Say:
    text: str


def _feature(ran: list[str]) -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("reconnect")
    f.entity(RcNote)

    def noted(c: Any) -> RcNote:
        ran.append(c.payload.text)
        return RcNote(text=c.payload.text)

    h = {
        "note": f.write_handler(
            "note",
            f.pipeline(Say).create("n", RcNote, data=noted).return_(lambda c: ok(c.steps["n"].version)),
        ),
        "count": f.query_handler(
            "count",
            f.query_pipeline(Say)
            .compute("n", lambda c: c.db.execute(sa.select(sa.func.count()).select_from(RcNote)).scalar_one())
            .return_(lambda c: ok(c.steps["n"])),
        ),
        "flow": f.workflow(
            "flow", trigger=manual(Say), pipeline=f.workflow_pipeline(Say).create("n", RcNote, data=noted)
        ),
    }
    return f, h


@pytest.fixture
def admin(fresh_postgres_url: str) -> Iterator[sa.Engine]:
    """A connection of the test's own, outside the App's pool, to kill the App's."""
    engine = sa.create_engine(fresh_postgres_url, poolclass=sa.pool.NullPool)
    yield engine
    engine.dispose()


def _terminate_all(admin: sa.Engine) -> int:
    """Terminate every other backend of the database, waiting until each has gone: how many."""
    stmt = sa.text(
        "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    with admin.connect() as conn:
        return int(conn.execute(stmt).scalar_one())


def _texts(app: App) -> list[str]:
    with app.engine.connect() as conn:
        return list(conn.scalars(sa.select(RcNote.text).order_by(RcNote.text)))


def test_a_dispatch_after_the_pools_connections_died_runs_once_more_and_writes_once(
    fresh_postgres_url: str, admin: sa.Engine, user: User
) -> None:
    ran: list[str] = []
    f, h = _feature(ran)
    app = App([f], database_url=fresh_postgres_url)
    try:
        app.create_all()
        assert app.dispatch(h["note"], Say("before"), user=user) == Ok(1)  # the pool holds a connection now
        assert _terminate_all(admin) >= 1
        assert app.dispatch(h["note"], Say("after"), user=user) == Ok(1)
        assert _texts(app) == ["after", "before"]
        assert ran == ["before", "after", "after"]  # the pipeline ran again, its write committed once
        # With an idempotency key (its claim in the same transaction), a query, a manual start.
        assert _terminate_all(admin) >= 1
        assert app.dispatch(h["note"], Say("keyed"), user=user, idempotency_key="k") == Ok(1)
        assert app.dispatch(h["note"], Say("keyed"), user=user, idempotency_key="k") == Ok(1)
        assert _terminate_all(admin) >= 1
        assert app.query(h["count"], Say(""), user=user) == Ok(3)
        assert _terminate_all(admin) >= 1
        run_id = app.start_workflow(h["flow"], Say("started"), user=user)
        assert run_info(app, run_id).status == "completed"
        assert _texts(app) == ["after", "before", "keyed", "started"]
    finally:
        app.dispose()


def test_a_connection_lost_at_commit_is_unavailable_and_not_run_again(
    fresh_postgres_url: str, admin: sa.Engine, user: User
) -> None:
    """The backend is terminated just before the COMMIT is sent (a ``commit`` listener):
    whether it committed cannot be known, so the dispatch is not tried again."""
    ran: list[str] = []
    f, h = _feature(ran)
    app = App([f], database_url=fresh_postgres_url)
    kill = {"on": False}

    def before_commit(conn: sa.Connection) -> None:
        if kill["on"]:
            kill["on"] = False
            pid = conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
            with admin.connect() as killer:
                assert killer.execute(sa.text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid}).scalar()

    sa.event.listen(app.engine, "commit", before_commit)
    try:
        app.create_all()
        kill["on"] = True
        failure = failure_of(app.dispatch(h["note"], Say("lost"), user=user), "unavailable")
        assert "try again" in failure.message
        assert ran == ["lost"]
        assert _texts(app) == []
        kill["on"] = True
        failure_of(app.dispatch(h["note"], Say("keyed"), user=user, idempotency_key="k"), "unavailable")
        assert ran == ["lost", "keyed"]
        assert app.dispatch(h["note"], Say("keyed"), user=user, idempotency_key="k") == Ok(1)  # the key was free
        assert _texts(app) == ["keyed"]
    finally:
        app.dispose()


def test_a_workflow_step_after_the_pools_connections_died(
    fresh_postgres_url: str, admin: sa.Engine, user: User
) -> None:
    """A worker's pass is not a dispatch: its transaction is not run again on the spot, the
    pass is cut short (a warning) and the next one does its work; nothing is lost or doubled."""
    ran: list[str] = []
    f: Feature[Any] = Feature("reconnect_wf")
    f.entity(RcNote)

    def noted(c: Any) -> RcNote:
        ran.append(c.payload.text)
        return RcNote(text=c.payload.text)

    flow = f.workflow(
        "later", trigger=manual(Say), pipeline=f.workflow_pipeline(Say).wait("PT1M").create("n", RcNote, data=noted)
    )
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    app = App([f], database_url=fresh_postgres_url, clock=clock)
    try:
        app.create_all()
        run_id = app.start_workflow(flow, Say(str(uuid.uuid4())[:8]), user=user)
        clock.advance(minutes=2)
        assert _terminate_all(admin) >= 1
        if app.run_worker(once=True)["resumed"] == 0:
            app.run_worker(once=True)  # the pass that met the dead connection was cut short as a whole
        assert run_info(app, run_id).status == "completed"
        assert len(_texts(app)) == 1 and len(ran) == 1
    finally:
        app.dispose()


def test_a_connection_lost_after_the_key_was_claimed_runs_once_more_with_the_key(
    fresh_postgres_url: str, admin: sa.Engine, user: User
) -> None:
    """The backend dies in a step, after the claim and inside the step's savepoint: the
    claim was never committed, so the second attempt claims the key afresh and commits
    the work once; the key then answers with that result.  A second loss is not run a
    third time."""
    ran: list[str] = []
    f: Feature[Any] = Feature("reconnect_keyed")
    f.entity(RcNote)
    kill = {"on": 1}

    def noted(c: Any) -> RcNote:
        ran.append(c.payload.text)
        if kill["on"]:
            kill["on"] -= 1
            pid = c.db.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            with admin.connect() as killer:
                assert killer.execute(sa.text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid}).scalar()
        return RcNote(text=c.payload.text)

    note = f.write_handler(
        "note", f.pipeline(Say).create("n", RcNote, data=noted).return_(lambda c: ok(c.steps["n"].version))
    )
    app = App([f], database_url=fresh_postgres_url)
    try:
        app.create_all()
        assert app.dispatch(note, Say("keyed"), user=user, idempotency_key="k") == Ok(1)
        assert ran == ["keyed", "keyed"]
        assert app.dispatch(note, Say("keyed"), user=user, idempotency_key="k") == Ok(1)
        assert ran == ["keyed", "keyed"]  # the key's stored answer
        assert _texts(app) == ["keyed"]
        kill["on"] = 1  # without a key, in the dispatch's own transaction
        assert app.dispatch(note, Say("plain"), user=user) == Ok(1)
        assert _texts(app) == ["keyed", "plain"]
        kill["on"] = 2  # the second attempt loses its connection too: unavailable, no third
        ran.clear()
        failure_of(app.dispatch(note, Say("twice"), user=user, idempotency_key="t"), "unavailable")
        assert ran == ["twice", "twice"]
        assert app.dispatch(note, Say("twice"), user=user, idempotency_key="t") == Ok(1)  # the key was free
        assert _texts(app) == ["keyed", "plain", "twice"]
    finally:
        app.dispose()


def _counter() -> tuple[Feature[Any], Any]:
    """A workflow whose steps send nothing: its start writes one row, sent alone."""
    f: Feature[Any] = Feature("reconnect_alone")
    flow = f.workflow(
        "count", trigger=manual(Say), pipeline=f.workflow_pipeline(Say).compute("n", lambda c: len(c.payload.text))
    )
    return f, flow


def test_a_start_after_the_pools_connections_died_runs_once_more(
    fresh_postgres_url: str, admin: sa.Engine, user: User
) -> None:
    """The start's one statement is its first: the dead connection is met there, nothing
    was committed, and the start runs once more on a fresh connection."""
    f, flow = _counter()
    app = App([f], database_url=fresh_postgres_url)
    try:
        app.create_all()
        app.start_workflow(flow, Say("warm"), user=user)  # the pool holds a connection now
        assert _terminate_all(admin) >= 1
        run_id = app.start_workflow(flow, Say("after"), user=user)
        assert (run_info(app, run_id).status, run_info(app, run_id).steps) == ("completed", {"n": 5})
        assert len(app.runs()) == 2
    finally:
        app.dispose()


def test_a_start_whose_row_committed_as_its_connection_was_lost_returns_that_run(
    fresh_postgres_url: str, admin: sa.Engine, user: User
) -> None:
    """The run's INSERT reaches the server and commits, then the connection dies before
    the answer (here: the INSERT sent by hand on the App's connection, its backend killed,
    then SQLAlchemy's own INSERT meets the dead connection).  The second attempt finds
    the run's row under its own trigger key: the start returns that run, stored once,
    not an IntegrityError."""
    f, flow = _counter()
    app = App([f], database_url=fresh_postgres_url)
    kill = {"on": False}

    def before_insert(conn: sa.Connection, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if kill["on"] and statement.startswith("INSERT INTO kumiko_workflow_runs"):
            kill["on"] = False
            driver: Any = conn.connection.driver_connection
            autocommit = driver.autocommit
            driver.autocommit = True  # committed whatever the transaction around it
            cursor.execute(statement, parameters)
            driver.autocommit = autocommit
            with admin.connect() as killer:
                stmt = sa.text("SELECT pg_terminate_backend(:pid, 10000)")
                assert killer.execute(stmt, {"pid": driver.info.backend_pid}).scalar()

    try:
        app.create_all()
        app.start_workflow(flow, Say("warm"), user=user)
        sa.event.listen(app.engine, "before_cursor_execute", before_insert)
        kill["on"] = True
        run_id = app.start_workflow(flow, Say("lost"), user=user)
        assert not kill["on"]
        assert (run_info(app, run_id).status, run_info(app, run_id).steps) == ("completed", {"n": 4})
        assert len(app.runs()) == 2
    finally:
        app.dispose()


@pytest.mark.parametrize(
    "view", ["get_run", "runs", "outbox", "check_runs", "purge_outbox", "purge_idempotency_keys", "purge_runs"]
)
def test_an_operators_view_or_purge_after_the_pools_connections_died_runs_once_more(
    fresh_postgres_url: str, admin: sa.Engine, user: User, view: str
) -> None:
    """``get_run``, ``runs``, ``outbox``, ``check_runs`` and the three purges answer by raising a database
    error (they return no ``Failure``): before, the first of them after a restart raised
    the dead connection's ``OperationalError`` (with its SQL), where a dispatch, a
    ``result`` or a ``requeue`` runs once more.  A view reads only, and a purge's batch
    whose connection died committed nothing: each runs once more on a fresh connection."""
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    f, flow = _counter()
    app = App([f], database_url=fresh_postgres_url, clock=clock)
    try:
        app.create_all()
        run_id = app.start_workflow(flow, Say("old"), user=user)
        clock.advance(days=40)
        calls: dict[str, tuple[Callable[[], object], object]] = {
            "get_run": (lambda: app.get_run(run_id).status, "completed"),  # type: ignore[union-attr]
            "runs": (lambda: [r.run_id for r in app.runs()], [run_id]),
            "outbox": (app.outbox, []),
            "check_runs": (app.check_runs, []),  # before: the dead connection's OperationalError
            "purge_outbox": (lambda: app.purge_outbox(older_than=timedelta(days=30)), 0),
            "purge_idempotency_keys": (app.purge_idempotency_keys, 0),
            "purge_runs": (lambda: app.purge_runs(older_than=timedelta(days=30)), 1),
        }
        call, answer = calls[view]
        assert app.outbox() == []  # the pool holds a connection now
        assert _terminate_all(admin) >= 1
        assert call() == answer
    finally:
        app.dispose()
