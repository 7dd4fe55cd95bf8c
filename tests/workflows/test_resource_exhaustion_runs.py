"""A looping worker resuming runs on a database out of disk (SQLite's ``max_page_count``,
PostgreSQL's 53100 from a trigger): the worker keeps running, the run is not failed and
writes nothing while the database is full, and completes — each step's writes once —
when there is space again.  The run waits for an event, then loops over long items
(stored as parts) with a wait in each iteration.

A segment whose step met a full database was an ``internal_error`` that failed the run
for good (on PostgreSQL; on SQLite its savepoint was gone: "no such savepoint")."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _exhaustion import Full, close_connections, limited_role
from _support import ok_data
from _worker_thread import Worker
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, manual, ok
from kumiko_typed._transient import transient

AppOn = Callable[..., App]
USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
#: Longer than a SQLite page: a row holding it needs new pages, which a full file has not.
BIG = "x" * 20_000


class RxrNote(Entity):
    __tablename__ = "rxr_note"
    text: Mapped[str] = mapped_column(default="")


@attrs.frozen
class RxrSaid:
    tag: str


@attrs.frozen
class Go:
    tag: str


def _feature() -> tuple[Feature[str], Any, Any]:
    f: Feature[str] = Feature("rxr")
    f.entity(RxrNote)
    f.event(RxrSaid, name="rxr-said")

    @f.projector(RxrNote, RxrSaid)
    def said(row: RxrNote, event: RxrSaid) -> None:
        row.text = event.tag

    say = f.write_handler(
        "say",
        f.pipeline(Go)
        .create("n", RxrNote, data=lambda c: RxrNote())
        .append_event(RxrNote, id=lambda c: c.steps["n"].id, event=lambda c: RxrSaid(c.payload.tag))
        .return_(lambda c: ok(None)),
    )
    flow = f.workflow(
        "notes",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .wait_for_event("said", RxrSaid, key=lambda c: c.payload.tag, event_key=lambda e: e.tag, timeout="PT1H")
        .for_each(
            "text",
            over=lambda c: [f"{k}{BIG}" for k in range(3)],
            do=lambda b: b.wait("PT0S").create("n", RxrNote, data=lambda c: RxrNote(text=c.scope["text"])),
        ),
    )
    return f, say, flow


def _long_notes(app: App) -> list[str]:
    with app.engine.connect() as conn:
        texts = conn.scalars(sa.text("SELECT text FROM rxr_note WHERE length(text) > 100 ORDER BY text")).all()
    return [t[:1] for t in texts]


def _status(app: App, run_id: uuid.UUID) -> str:
    info = app.get_run(run_id)
    assert info is not None
    return info.status


def _resumed_on_a_full_database(app_on: AppOn, tables: tuple[str, ...]) -> None:
    f, say, flow = _feature()
    ahead = [timedelta(0)]
    # Moved on by the test: a segment refused for now is tried again after a wait that
    # doubles with each try.
    app = app_on([f], clock=lambda: datetime.now(UTC) + ahead[0])
    full = Full(app, tables=tables)
    run_id = app.start_workflow(flow, Go("t1"), user=USER)
    ok_data(app.dispatch(say, Go("t1"), user=USER))  # the event it waits for
    full.on()
    worker = Worker(app)
    try:
        time.sleep(1.5)  # passes on the full database
        assert worker.thread.is_alive(), worker.raised
        assert _status(app, run_id) == "suspended"
        assert _long_notes(app) == []
        full.off()
        deadline = time.monotonic() + 30
        while _status(app, run_id) != "completed" and time.monotonic() < deadline:
            ahead[0] += timedelta(seconds=10)
            time.sleep(0.05)
        assert _status(app, run_id) == "completed", app.get_run(run_id)
    finally:
        worker.stop()
    assert worker.raised == []
    assert _long_notes(app) == ["0", "1", "2"]


def test_a_worker_resumes_runs_on_a_full_database_once_there_is_space(app_on: AppOn) -> None:
    _resumed_on_a_full_database(app_on, ("rxr_note",))


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)  # a trigger on some tables: PostgreSQL's
@pytest.mark.parametrize(
    "tables", [("kumiko_workflow_runs",), ("kumiko_workflow_parts", "kumiko_workflow_waits"), ("kumiko_events",)]
)
def test_a_worker_whose_run_cannot_be_stored_tries_again(app_on: AppOn, tables: tuple[str, ...]) -> None:
    """Full where the worker stores the run itself (its row, its parts and waits), or
    where the step's event goes: the pass fails, the worker goes on."""
    _resumed_on_a_full_database(app_on, tables)


# --- Too many connections (53300): the worker's role at its CONNECTION LIMIT ---


@attrs.frozen
class Later:
    n: int


def _later() -> tuple[Feature[str], Any]:
    f: Feature[str] = Feature("rxl")
    flow = f.workflow(
        "later",
        trigger=manual(Later),
        pipeline=f.workflow_pipeline(Later).wait("PT0S").compute("done", lambda c: c.payload.n),
    )
    return f, flow


def _completes(app: App, run_id: uuid.UUID) -> None:
    deadline = time.monotonic() + 30
    while _status(app, run_id) != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _status(app, run_id) == "completed"


@pytest.mark.postgres
def test_a_worker_started_with_no_connection_slot_left_waits_for_one(fresh_postgres_url: str) -> None:
    """It stopped at its first pass, as for a wrong URL."""
    f, flow = _later()
    with limited_role(fresh_postgres_url) as (url, limit):
        worker_app, client = App([f], database_url=url), App([f], database_url=fresh_postgres_url)
        worker_app.create_all()
        worker_app.engine.dispose()
        run_id = client.start_workflow(flow, Later(1), user=USER)
        limit(0)
        worker = Worker(worker_app)
        try:
            time.sleep(1.0)
            assert worker.thread.is_alive(), worker.raised
            assert _status(client, run_id) == "suspended"
            limit(-1)
            _completes(client, run_id)
        finally:
            worker.stop()
            worker_app.dispose()
            client.dispose()
        assert worker.raised == []


@pytest.mark.postgres
def test_a_worker_whose_connections_are_cut_with_no_slot_left_goes_on_later(fresh_postgres_url: str) -> None:
    f, flow = _later()
    with limited_role(fresh_postgres_url) as (url, limit):
        worker_app, client = App([f], database_url=url), App([f], database_url=fresh_postgres_url)
        worker_app.create_all()
        worker = Worker(worker_app)
        try:
            _completes(client, client.start_workflow(flow, Later(1), user=USER))
            limit(0)
            assert close_connections(fresh_postgres_url, sa.make_url(url).username or "") >= 2  # pool, LISTEN
            run_id = client.start_workflow(flow, Later(2), user=USER)
            time.sleep(1.0)
            assert worker.thread.is_alive(), worker.raised
            assert _status(client, run_id) == "suspended"
            limit(-1)
            _completes(client, run_id)
        finally:
            worker.stop()
            worker_app.dispose()
            client.dispose()
        assert worker.raised == []


@pytest.mark.postgres
def test_a_purge_the_database_refuses_deletes_no_part_of_a_run_and_runs_again(fresh_postgres_url: str) -> None:
    """``purge_runs`` on PostgreSQL out of disk (53100 from deleting a cancelled run's
    parts, which go with their run): the database's error, raised to the operator's job; no run loses
    its parts without its row, and the purge, run again with space, deletes them all."""
    f, say, flow = _feature()
    app = App([f], database_url=fresh_postgres_url)
    try:
        app.create_all()
        runs = [app.start_workflow(flow, Go(f"p{i}"), user=USER) for i in range(2)]
        for i in range(2):
            ok_data(app.dispatch(say, Go(f"p{i}"), user=USER))
        app.run_worker(once=True)  # each resumed into its loop, its items stored as parts
        for run_id in runs:
            ok_data(app.cancel_run(run_id, user=USER))
        with app.engine.begin() as conn:
            assert conn.scalar(sa.text("SELECT count(*) FROM kumiko_workflow_parts")), "long values stored as parts"
            conn.execute(
                sa.text(
                    "CREATE FUNCTION rx_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "RAISE EXCEPTION 'No space left on device' USING ERRCODE = '53100'; END $$"
                )
            )
            conn.execute(
                sa.text(
                    "CREATE TRIGGER rx_no_delete BEFORE DELETE ON kumiko_workflow_parts "
                    "FOR EACH ROW EXECUTE FUNCTION rx_no_delete()"
                )
            )
        with pytest.raises(sa.exc.OperationalError) as raised:
            app.purge_runs(older_than=timedelta(0), batch=1)
        assert transient(raised.value)
        with app.engine.begin() as conn:
            orphans = (
                "SELECT count(*) FROM kumiko_workflow_parts p "
                "WHERE NOT EXISTS (SELECT 1 FROM kumiko_workflow_runs r WHERE r.run_id = p.run_id)"
            )
            assert conn.scalar(sa.text(orphans)) == 0
            assert conn.scalar(sa.text("SELECT count(*) FROM kumiko_workflow_runs")) == 2
            conn.execute(sa.text("DROP TRIGGER rx_no_delete ON kumiko_workflow_parts"))
        assert app.purge_runs(older_than=timedelta(0), batch=1) == 2
        with app.engine.connect() as conn:
            assert conn.scalar(sa.text("SELECT count(*) FROM kumiko_workflow_parts")) == 0
    finally:
        app.dispose()
