"""The event feed survives a stored event that no longer fits its class, and does not queue
idle workers behind the one reading events."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _sql_log import statements
from sqlalchemy.orm import Session

from kumiko_typed import App, Feature, on_event
from kumiko_typed._eventstore import append
from kumiko_typed._tables import consumers, events
from kumiko_typed._workflow_feed import EVENT_CURSOR


@attrs.frozen
class Pinged:
    n: int


def _ping(app: App, *payloads: dict[str, Any]) -> list[uuid.UUID]:
    """Append one ``pinged`` event per payload, each on a stream of its own, in one
    transaction: their ids."""
    with Session(app.engine) as session, session.begin():
        return [
            append(
                session,
                stream_id=uuid.uuid4(),
                aggregate_type="thing",
                stream_version=1,
                type="pinged",
                payload=payload,
                tenant_id=uuid.uuid4(),
                user_id=None,
                correlation_id=None,
                occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
            )
            for payload in payloads
        ]


def test_an_unfit_event_is_skipped_and_the_feed_goes_on(app_on: Callable[..., App]) -> None:
    f = Feature("feed")
    f.event(Pinged, name="pinged")
    workflow = f.workflow(
        "on-ping", trigger=on_event(Pinged), pipeline=f.workflow_pipeline(Pinged).compute("n", lambda c: c.payload.n)
    )
    app = app_on([f])
    _ping(app, {"n": "not a number"}, {"n": 7})
    counts = app.run_worker(once=True)
    assert counts["started"] == 1
    runs = app.runs(workflow)
    assert [(r.status, r.steps["n"]) for r in runs] == [("completed", 7)]
    assert app.run_worker(once=True)["started"] == 0


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        ({"payload": {"n": "SECRET"}}, "1) does not load as Pinged: expected an integer at $.n"),
        ({"payload": {}}, "1) does not load as Pinged: required field is missing at $.n"),
        ({"payload": {"n": 1, "m": "SECRET"}}, "1) does not load as Pinged: unknown field at $.m"),
        ({"schema_version": 2}, "2) is newer than Pinged's schema version 1"),
        # No object at all (a row edited by hand): skipped as well, not the feed's pass stopped.
        ({"payload": ["SECRET"]}, "1) does not load as Pinged: expected a JSON object at $"),
    ],
)
def test_an_event_no_run_can_start_with_is_logged_with_the_registrys_reason_never_its_values(
    app_on: Callable[..., App], caplog: pytest.LogCaptureFixture, stored: dict[str, Any], reason: str
) -> None:
    """Was "event … does not fit Pinged; no run started", the field unnamed: the reason is
    the one ``read_stream`` gives (docs/event-store.md), and the run for the next event
    still starts."""
    f = Feature("feed")
    f.event(Pinged, name="pinged")
    workflow = f.workflow(
        "on-ping", trigger=on_event(Pinged), pipeline=f.workflow_pipeline(Pinged).compute("n", lambda c: c.payload.n)
    )
    app = app_on([f])
    unfit, _ = _ping(app, {"n": 1}, {"n": 7})
    with app.engine.begin() as conn:
        conn.execute(sa.update(events).where(events.c.event_id == unfit).values(**stored))
    with caplog.at_level(logging.ERROR, logger="kumiko_typed"):
        assert app.run_worker(once=True)["started"] == 1
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    what = f"the event {unfit} ('pinged', stored at schema version"
    assert logged == [f"workflow feed:on-ping: no run started: {what} {reason}"], logged
    assert "SECRET" not in caplog.text  # nor in a traceback (a cause's message quotes the value)
    assert [(r.status, r.steps["n"]) for r in app.runs(workflow)] == [("completed", 7)]


def _quoting_upcaster(payload: dict[str, Any]) -> dict[str, Any]:
    raise ValueError(f"cannot upcast {payload!r}")  # a user's upcaster, quoting the stored payload


def test_an_unreadable_trigger_event_is_logged_without_the_traceback_that_quotes_its_values(
    app_on: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    """The log record has the reason alone: its cause (an upcaster's exception, cattrs'
    or ``int()``'s) may quote the stored payload, which no log record holds."""
    f = Feature("feed")
    f.event(Pinged, name="pinged", version=2, upcasters={1: _quoting_upcaster})
    f.workflow(
        "on-ping", trigger=on_event(Pinged), pipeline=f.workflow_pipeline(Pinged).compute("n", lambda c: c.payload.n)
    )
    app = app_on([f])
    _ping(app, {"n": 1, "card": "SECRET"})
    with caplog.at_level(logging.ERROR, logger="kumiko_typed"):
        assert app.run_worker(once=True)["started"] == 0
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage().endswith("an upcaster to schema version 2 raised ValueError")
    assert record.exc_info is None and "SECRET" not in caplog.text


def test_an_outer_loop_item_of_any_value_is_restored_after_an_inner_loop(app_on: Callable[..., App]) -> None:
    # A stored sentinel string once stood for "no outer value": an item equal to it was lost.
    f = Feature("shadow")
    pipeline = f.workflow_pipeline(Pinged).for_each(
        "x",
        over=lambda c: ["$missing"],
        do=lambda b: b.for_each("x", over=lambda c: [1], do=lambda b: b.wait("PT0S")).compute(
            "outer", lambda c: c.scope["x"]
        ),
    )
    workflow = f.workflow("shadowing", trigger=on_event(Pinged), pipeline=pipeline)
    f.event(Pinged, name="pinged")
    app = app_on([f])
    _ping(app, {"n": 1})
    app.run_worker(once=True)
    app.run_worker(once=True)
    [run] = app.runs(workflow)
    assert (run.status, run.steps["outer"]) == ("completed", "$missing")


def test_a_worker_finding_the_feed_cursor_held_goes_on_and_misses_nothing(fresh_postgres_url: str) -> None:
    """PostgreSQL: while another transaction holds the feed's cursor row (a worker reading
    events), a pass leaves the events to it (``SKIP LOCKED``) and resumes due runs instead
    of waiting for its commit; the next pass reads each event once."""
    f = Feature("feed")
    f.event(Pinged, name="pinged")
    workflow = f.workflow(
        "on-ping", trigger=on_event(Pinged), pipeline=f.workflow_pipeline(Pinged).compute("n", lambda c: c.payload.n)
    )
    app = App([f], database_url=fresh_postgres_url)
    try:
        app.create_all()
        app.run_worker(once=True)  # makes the cursor row
        _ping(app, {"n": 1}, {"n": 2})
        counts: list[dict[str, int]] = []
        with app.engine.connect() as holder:
            holder.execute(sa.select(consumers).where(consumers.c.name == EVENT_CURSOR).with_for_update())
            worker = threading.Thread(target=lambda: counts.append(app.run_worker(once=True)))
            worker.start()
            worker.join(timeout=60)
            waited = worker.is_alive()
            holder.rollback()  # let a waiting pass go on, to end the test either way
        worker.join(timeout=30)
        assert not waited, "the pass waited for the cursor row's lock"
        assert counts[0]["started"] == 0
        assert app.run_worker(once=True)["started"] == 2
        assert sorted(r.steps["n"] for r in app.runs(workflow)) == [1, 2]
        assert app.run_worker(once=True)["started"] == 0
    finally:
        app.dispose()


def test_the_feed_reads_the_stranded_runs_once_a_transaction_not_once_an_event(app_on: Callable[..., App]) -> None:
    """Before, matching each event read the stranded runs again (one statement per event:
    40 of the 280 statements of a segment of examples/ports/hotel.py's group check-out).
    Once a transaction at most: none since the feed probes a batch's waits first, when no
    wait is for its events' types (a stranded run's neither)."""
    f = Feature("feedmarks")
    f.event(Pinged, name="pinged")
    app = app_on([f])
    _ping(app, *({"n": n} for n in range(30)))
    with statements(app.engine) as sent:
        app.run_worker(once=True)
    marks = [s for s in sent if s.startswith("SELECT kumiko_workflow_runs.run_id FROM") and "stranded_by" in s]
    assert len(marks) <= 1, marks
    with statements(app.engine) as sent:
        app.run_worker(once=True)  # nothing new: nothing to match
    assert [s for s in sent if s.startswith("SELECT kumiko_workflow_runs.run_id FROM") and "stranded_by" in s] == []
