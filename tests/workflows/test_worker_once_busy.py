"""``run_worker(once=True)`` — a cron job's worker — against a database another connection
holds: SQLite's write lock held past the busy timeout (another process, a long
transaction), PostgreSQL's table lock held past the operator's ``lock_timeout`` (a
migration).  The looping worker logs such a pass and tries it again; the single pass
raised the driver's ``OperationalError`` (``database is locked`` with ``[SQL: BEGIN
IMMEDIATE]``), which failed the cron job with a traceback.  It now ends the pass with a
warning and returns; the next pass does the work."""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from kumiko_typed import App, Feature, User, manual
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))
NONE = dict.fromkeys(("started", "resumed", "sent", "retried", "dead"), 0)


@attrs.frozen
class Later:
    n: int


f = Feature("busy")
later = f.workflow(
    "later",
    trigger=manual(Later),
    pipeline=f.workflow_pipeline(Later).wait(timedelta(minutes=1)).compute("twice", lambda c: c.payload.n * 2),
)


def _lock_timeout(dbapi_connection: Any, _record: object) -> None:
    """What an operator sets for a service's role: give up a lock wait after 200 ms."""
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = 200")
    dbapi_connection.autocommit = autocommit


@pytest.fixture
def app(db_url: str) -> Iterator[tuple[App, FakeClock]]:
    clock = FakeClock(T0)
    app = App([f], database_url=db_url, clock=clock)
    if app.engine.dialect.name == "postgresql":
        sa.event.listen(app.engine, "connect", _lock_timeout)
    app.create_all()
    try:
        yield app, clock
    finally:
        app.dispose()


@contextmanager
def _held(app: App) -> Iterator[None]:
    """Another connection holds what every worker pass needs, until the block ends."""
    url = app.engine.url
    if url.get_backend_name() == "sqlite":
        other = sqlite3.connect(str(url.database), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()
        return
    holder = sa.create_engine(url.render_as_string(hide_password=False), poolclass=sa.pool.NullPool)
    with holder.connect() as conn:
        conn.execute(sa.text("LOCK TABLE kumiko_workflow_runs IN ACCESS EXCLUSIVE MODE"))
        try:
            yield
        finally:
            conn.rollback()
    holder.dispose()


def _status(app: App, run_id: uuid.UUID) -> str | None:
    info = app.get_run(run_id)
    return None if info is None else info.status


def test_a_single_pass_that_finds_the_database_held_returns_and_the_next_one_does_the_work(
    app: tuple[App, FakeClock], caplog: pytest.LogCaptureFixture
) -> None:
    worker, clock = app
    run_id = worker.start_workflow(later, Later(21), user=ADA)
    clock.advance(timedelta(minutes=2))
    with caplog.at_level(logging.WARNING, logger="kumiko_typed"), _held(worker):
        assert worker.run_worker(once=True) == NONE
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("worker pass cut short, the rest is due for the next one: ")
    assert "database is locked" in warnings[0] or "lock timeout" in warnings[0]
    assert _status(worker, run_id) == "suspended"  # nothing of the cut pass was half done

    assert worker.run_worker(once=True) == NONE | {"resumed": 1}
    info = worker.get_run(run_id)
    assert info is not None and (info.status, info.steps["twice"]) == ("completed", 42)


def test_a_single_pass_still_raises_what_no_retry_cures(db_url: str) -> None:
    """No tables (``create_all`` never ran): the same pass fails every time, so it is the
    caller's to see, as the looping worker's first pass raises it."""
    untouched = App([f], database_url=db_url)
    try:
        with pytest.raises(OperationalError if db_url.startswith("sqlite") else sa.exc.ProgrammingError):
            untouched.run_worker(once=True)
    finally:
        untouched.dispose()
