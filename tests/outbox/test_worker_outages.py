"""A looping worker against a database that goes away: it outlives lost connections (its
pooled ones and its LISTEN connection, killed on the server) and goes on with the runs,
while a worker that never got through — no tables — stops at once with the error.  A
delivery pass the database cuts short still counts what it had recorded."""

from __future__ import annotations

import logging
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import Hook
from _worker_thread import Worker
from sqlalchemy.pool import NullPool

from kumiko_typed import App, Feature, User, manual, ok

USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


@attrs.frozen
class Go:
    n: int


def _feature() -> tuple[Feature[str], Any]:
    f: Feature[str] = Feature("two")
    flow = f.workflow(
        "later",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).wait("PT0S").compute("done", lambda c: c.payload.n * 2),
    )
    return f, flow


def _eventually(check: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)


def _completed(app: App, run_id: uuid.UUID) -> bool:
    info = app.get_run(run_id)
    return info is not None and info.status == "completed"


@pytest.mark.postgres
def test_a_worker_outlives_its_connections_being_killed(
    fresh_postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kumiko_typed")
    f, flow = _feature()
    worker_app, client = App([f], database_url=fresh_postgres_url), App([f], database_url=fresh_postgres_url)
    worker_app.create_all()
    worker = Worker(worker_app)
    try:
        first = client.start_workflow(flow, Go(1), user=USER)
        _eventually(lambda: _completed(client, first), "the first run completed")

        killer = sa.create_engine(fresh_postgres_url, poolclass=NullPool)
        with killer.connect() as conn:
            killed = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
        killer.dispose()
        assert killed >= 2  # at least the worker's pooled connection and its LISTEN
        client.engine.dispose()  # the client's pooled connections died too

        second = client.start_workflow(flow, Go(2), user=USER)
        _eventually(lambda: _completed(client, second), "the run started after the kill completed")
        # Idle again, the worker waits on its LISTEN connection, finds it dead and opens another.
        _eventually(lambda: any(_lost_listen(r) for r in caplog.records), "the worker noticed its LISTEN was gone")
        third = client.start_workflow(flow, Go(3), user=USER)
        _eventually(lambda: _completed(client, third), "a run started after the LISTEN was reopened completed")
        assert worker.thread.is_alive() and not worker.raised, worker.raised
    finally:
        worker.stop()
        worker_app.dispose()
        client.dispose()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("worker pass failed") for m in warnings), warnings


def _lost_listen(record: logging.LogRecord) -> bool:
    return record.levelno == logging.WARNING and record.getMessage().startswith("lost the LISTEN connection")


def test_a_worker_that_never_got_through_stops_with_the_error(tmp_path: Path) -> None:
    f, _flow = _feature()
    app = App([f], database_url=f"sqlite:///{tmp_path / 'no-tables.sqlite3'}")  # create_all never called
    worker = Worker(app)
    worker.thread.join(timeout=30)
    try:
        assert not worker.thread.is_alive()
        assert len(worker.raised) == 1
        assert isinstance(worker.raised[0], sa.exc.OperationalError)
        assert "no such table" in str(worker.raised[0])
    finally:
        app.dispose()


hooks = Feature("outage-hooks", requires=["webhook.send"])
hook = hooks.write_handler(
    "hook",
    hooks.pipeline(Hook).send_webhook(url=lambda c: c.payload.url).return_(lambda c: ok(None)),
)


def test_a_delivery_pass_the_database_cuts_short_counts_what_it_had_recorded(
    app_on: Callable[..., App], db_url: str, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Three webhooks fail, one at a time; while the third is under way the database cuts
    the pass short (SQLite: another connection holds the write lock past the busy
    timeout; PostgreSQL: the worker's connections are killed), so its outcome cannot be
    recorded.  The first two failures were recorded, each in its own committed
    transaction: the pass counts them.  Before, ``deliver_due`` handed its counts back
    only at its end, and the pass said ``retried=0``."""
    caplog.set_level(logging.INFO, logger="kumiko_typed")
    held: list[sqlite3.Connection] = []

    def cut_short() -> None:
        if db_url.startswith("sqlite"):
            conn = sqlite3.connect(sa.make_url(db_url).database or "", isolation_level=None, check_same_thread=False)
            conn.execute("BEGIN IMMEDIATE")  # held until the test ends
            held.append(conn)
            return
        killer = sa.create_engine(db_url, poolclass=NullPool)
        with killer.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
        killer.dispose()

    def respond(index: int, path: str) -> tuple[int, dict[str, str]]:
        if path == "/2":
            cut_short()
        return (500, {})

    receiver.respond = respond
    app = app_on([hooks], delivery_concurrency=1)
    for n in range(3):
        assert app.dispatch(hook, Hook(receiver.url(f"/{n}")), user=USER) == ok(None)
    try:
        counts = app.run_worker(once=True)
    finally:
        for conn in held:
            conn.rollback()
            conn.close()
    assert [r.path for r in receiver.requests] == ["/0", "/1", "/2"]
    assert counts["retried"] == 2
    lines = [r.getMessage() for r in caplog.records]
    assert "worker pass: started=0 resumed=0 sent=0 retried=2 dead=0" in lines, lines
    assert any(line.startswith("worker pass cut short") for line in lines), lines
    app.engine.dispose()  # PostgreSQL: the pool's killed connections
    assert sorted(item.attempts for item in app.outbox()) == [0, 1, 1]
