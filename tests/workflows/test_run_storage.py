"""How workflow runs reach the database, on SQLite and PostgreSQL: a manual start writes
its row once, when its first segment has ended; a resume updates it once; and the SQLite
set-up lets readers in while a worker writes."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _sql_log import statements

from kumiko_typed import App, Feature, User, manual
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@attrs.frozen
class Go:
    n: int


def _feature() -> tuple[Feature[Any], Any, Any]:
    f: Feature[Any] = Feature("trs")
    straight = f.workflow(
        "straight",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("a", lambda c: c.payload.n + 1)
        .compute("b", lambda c: c.steps["a"] * 2),
    )
    later = f.workflow(
        "later",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("a", lambda c: c.payload.n + 1)
        .wait("PT1M")
        .compute("b", lambda c: c.steps["a"] * 2),
    )
    return f, straight, later


def _writes(seen: list[str]) -> list[str]:
    upper = [s.upper() for s in seen]
    return [s.split(" (")[0].split(" SET ")[0] for s in upper if not s.startswith(("SELECT", "BEGIN"))]


#: In a worker's transaction a segment and the write of its run are one unit: a run
#: whose state the database refuses fails alone (poison-row isolation), through a
#: savepoint taken only once the segment sends a statement (tests/workflows/
#: test_segment_savepoint.py).  A manual start needs none: its transaction is the segment's own.
def test_a_manual_start_writes_its_row_once(app_on: Callable[..., App], user: User) -> None:
    f, straight, _later = _feature()
    app = app_on([f])
    with statements(app.engine) as seen:
        run_id = app.start_workflow(straight, Go(4), user=user)
    assert _writes(seen) == ["INSERT INTO KUMIKO_WORKFLOW_RUNS"]
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.steps) == ("completed", {"a": 5, "b": 10})


def test_a_suspending_start_inserts_and_its_resume_updates_once(app_on: Callable[..., App], user: User) -> None:
    f, _straight, later = _feature()
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    with statements(app.engine) as seen:
        run_id = app.start_workflow(later, Go(4), user=user)
    assert _writes(seen) == ["INSERT INTO KUMIKO_WORKFLOW_RUNS"]
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.path, info.steps) == ("suspended", "@wait", {"a": 5})

    app.run_worker(once=True)  # the first pass sets up the feed's cursor
    clock.advance(minutes=1)
    with statements(app.engine) as seen:
        assert app.run_worker(once=True)["resumed"] == 1
    # no wait_for_event at the suspension: no wait row to delete; a segment that sends
    # nothing before its store takes no savepoint (``_segment_savepoint``)
    assert _writes(seen) == ["UPDATE KUMIKO_WORKFLOW_RUNS"]
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.steps) == ("completed", {"a": 5, "b": 10})


# --- SQLite set-up -------------------------------------------------------------------------


def test_sqlite_files_use_a_synchronous_write_ahead_log(tmp_path: Path, user: User) -> None:
    """A reader in the middle of a transaction (``kumiko-typed runs``, a report) does not
    hold up a commit: with a rollback journal the commit would wait for it, then fail
    with "database is locked"."""
    f, straight, _later = _feature()
    path = tmp_path / "runs.sqlite3"
    app = App([f], database_url=f"sqlite:///{path}")
    try:
        app.create_all()
        with app.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        app.start_workflow(straight, Go(1), user=user)
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            count = "SELECT count(*) FROM kumiko_workflow_runs"
            reader.execute("BEGIN")
            assert reader.execute(count).fetchone() == (1,)
            app.start_workflow(straight, Go(2), user=user)  # commits past the open read
            assert reader.execute(count).fetchone() == (1,)  # the reader's snapshot
            reader.execute("COMMIT")
            assert reader.execute(count).fetchone() == (2,)
        finally:
            reader.close()
    finally:
        app.dispose()


@pytest.fixture
def user(make_user: Callable[..., User]) -> User:
    return make_user()


def test_run_ids_are_new(app_on: Callable[..., App], user: User) -> None:
    """Two starts of one payload are two runs (a manual start has no trigger to share)."""
    f, straight, _later = _feature()
    app = app_on([f])
    first, second = (app.start_workflow(straight, Go(1), user=user) for _ in range(2))
    assert first != second
    assert isinstance(first, uuid.UUID)
    assert {r.run_id for r in app.runs()} == {first, second}


# --- times ----------------------------------------------------------------------------------


def test_times_come_back_aware_in_utc_whatever_the_clocks_zone(app_on: Callable[..., App], user: User) -> None:
    """SQLite has no time-zone type: a time from a clock two hours east of UTC must still
    be stored as the same instant, compare right against the next clock reading, and be
    read back aware — as PostgreSQL's timestamptz does."""
    east = timezone(timedelta(hours=2))
    now = [datetime(2026, 3, 2, 11, 0, tzinfo=east)]  # 09:00 UTC
    f, _straight, later = _feature()  # suspends one minute at its wait
    app = app_on([f], clock=lambda: now[0])
    run_id = app.start_workflow(later, Go(1), user=user)
    info = app.get_run(run_id)
    assert info is not None and info.wake_at is not None
    assert info.wake_at.tzinfo is not None
    assert info.wake_at == datetime(2026, 3, 2, 9, 1, tzinfo=UTC)
    app.run_worker(once=True)

    now[0] = datetime(2026, 3, 2, 11, 0, 59, tzinfo=east)  # 09:00:59 UTC: not due yet
    assert app.run_worker(once=True)["resumed"] == 0
    now[0] = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)  # the same clock, read in UTC: due
    assert app.run_worker(once=True)["resumed"] == 1
    with app.engine.connect() as conn:
        created, updated = conn.execute(sa.select(workflow_runs.c.created_at, workflow_runs.c.updated_at)).one()
    assert (created, updated) == (datetime(2026, 3, 2, 9, 0, tzinfo=UTC), datetime(2026, 3, 2, 9, 1, tzinfo=UTC))
    assert created.tzinfo is not None
