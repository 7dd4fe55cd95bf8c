"""What a failed ``retry`` attempt leaves in the stored run: the safe message the run would
fail with (the step, the exception's class, an error id), never the exception's text,
which for a database error quotes the SQL and its bound values.  Both databases."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, manual
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SECRET = "s3cr3t-token-4711"


class RteSlot(Entity):
    __tablename__ = "rte_slot"
    code: Mapped[str] = mapped_column(sa.String(64), unique=True)


@attrs.frozen
class Go:
    n: int


def _insert_taken(c: Any) -> int:
    """A compute's own write through ``c.db`` that clashes with a unique code."""
    c.db.execute(sa.insert(RteSlot.__table__).values(**_row(c.user.tenant_id)))
    return 1


def _row(tenant_id: uuid.UUID) -> dict[str, Any]:
    stamps = {"created_at": T0, "updated_at": T0}
    return {"id": uuid.uuid4(), "tenant_id": tenant_id, "version": 1, "code": SECRET, **stamps}


def _raise_with_secret(c: Any) -> int:
    raise RuntimeError(f"password={SECRET}")


def _stored_retry(app: App, run_id: uuid.UUID) -> dict[str, Any]:
    with app.engine.connect() as conn:
        state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()
    record: dict[str, Any] = state["retries"]["@retry"]
    return record


@pytest.mark.parametrize("body", ["unique clash", "exception"])
def test_a_failed_attempt_stores_the_safe_message_not_the_sql_or_the_exception_text(
    app_on: AppOn, user: User, body: str, caplog: pytest.LogCaptureFixture
) -> None:
    f: Feature[Any] = Feature("rte")
    f.entity(RteSlot)
    step = _insert_taken if body == "unique clash" else _raise_with_secret
    flow = f.workflow(
        "flow",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).retry(
            times=2, base_delay=timedelta(seconds=10), do=lambda b: b.compute("taken", step)
        ),
    )
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    if body == "unique clash":
        with app.engine.begin() as conn:
            conn.execute(sa.insert(RteSlot.__table__).values(**_row(user.tenant_id)))
    with caplog.at_level(logging.INFO, logger="kumiko_typed"):
        run_id = app.start_workflow(flow, Go(1), user=user)
    record = _stored_retry(app, run_id)
    error = record["last_error"]
    assert record["attempts"] == 1
    for leak in (SECRET, "INSERT", "SQL", "password", "sqlite3", "psycopg"):
        assert leak not in error, error
    clock.advance(seconds=10)
    app.run_worker(once=True)  # the second and last attempt fails the run as the first did
    info = app.get_run(run_id)
    assert info is not None and info.status == "failed" and info.error is not None
    final = info.error["message"]
    assert SECRET not in final and "INSERT" not in final
    if body == "unique clash":  # a constraint names the entity and the column, as the failed run does
        assert info.error["code"] == "unique_violation"
        # The step by the run's path, each attempt its own; what to do; no value.
        tail = 'compute "taken": RteSlot violates a unique constraint on code: another row holds that value; '
        tail += "pass another value, or update that row instead"
        assert (error, final) == (f"step @retry/do/#1/taken {tail}", f"step @retry/do/#2/taken {tail}")
    else:  # the step inside the retry body, the class and an error id; each attempt its own id
        assert info.error["code"] == "internal_error"
        # The step by the path the run is stored with (its path was "@retry/#2"), whole and
        # with the attempt: the first attempt's message named "do/0", its body's part alone.
        assert error.startswith('step @retry/do/#1/taken compute "taken" raised RuntimeError (error id ')
        assert final.startswith('step @retry/do/#2/taken compute "taken" raised RuntimeError (error id ')
        (listed,) = app.runs(flow)
        assert listed.error == info.error
        # The exception's text is in the log, under the id the stored message names.
        assert SECRET in caplog.text and error.split("error id ")[1][:32] in caplog.text


@pytest.mark.parametrize("body", ["unique clash", "exception"])
def test_a_run_waiting_to_retry_reports_its_last_attempts_error_until_one_succeeds(
    app_on: AppOn, user: User, body: str
) -> None:
    """While a run waits for its next attempt, ``RunInfo.error`` (``get_run``, ``runs``, the
    command line's listing) says why: the failed attempt's code and safe message, how many
    attempts failed and of how many.  Before, it was ``None`` until the last attempt failed
    the run: only the retry's record in the stored state held the error.  An attempt that
    succeeds clears it."""
    failing = [True]

    def step(c: Any) -> int:
        if body == "unique clash":
            return _insert_taken(c)
        return _raise_with_secret(c) if failing[0] else 1

    f: Feature[Any] = Feature("rte")
    f.entity(RteSlot)
    flow = f.workflow(
        "flow",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .retry(times=3, base_delay=timedelta(seconds=10), do=lambda b: b.compute("taken", step))
        .wait("PT1H", name="after"),
    )
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    if body == "unique clash":
        with app.engine.begin() as conn:
            conn.execute(sa.insert(RteSlot.__table__).values(**_row(user.tenant_id)))
    run_id = app.start_workflow(flow, Go(1), user=user)
    info = app.get_run(run_id)
    assert info is not None and (info.status, info.wake_at) == ("suspended", T0 + timedelta(seconds=10))
    code = "unique_violation" if body == "unique clash" else "internal_error"
    message = f"{_stored_retry(app, run_id)['last_error']} (attempt 1 of 3 failed; the next at wake_at)"
    assert info.error == {"code": code, "message": message, "attempts": "1", "times": "3"}
    for leak in (SECRET, "INSERT", "SQL", "password", "Traceback", "sqlite3", "psycopg"):
        assert leak not in message, message
    assert [r.error for r in app.runs(flow)] == [info.error]

    clock.advance(seconds=10)
    app.run_worker(once=True)  # the second attempt fails too: its own error now
    info = app.get_run(run_id)
    assert info is not None and info.error is not None and info.status == "suspended"
    assert (info.error["attempts"], info.error["code"]) == ("2", code)
    assert info.error["message"].startswith("step @retry/do/#2/taken ")

    failing[0] = False
    with app.engine.begin() as conn:
        conn.execute(sa.delete(RteSlot.__table__))
    clock.advance(seconds=20)
    app.run_worker(once=True)  # the third attempt succeeds: waiting at "after", no error
    info = app.get_run(run_id)
    assert info is not None and (info.status, info.path, info.error) == ("suspended", "after", None)
