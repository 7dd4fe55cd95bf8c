"""The event feed survives a stored event that no longer fits its class."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import attrs
from sqlalchemy.orm import Session

from kumiko_typed import App, Feature, on_event
from kumiko_typed._eventstore import append


@attrs.frozen
class Pinged:
    n: int


def test_an_unfit_event_is_skipped_and_the_feed_goes_on(app_on: Callable[..., App]) -> None:
    f = Feature("feed")
    f.event(Pinged, name="pinged")
    workflow = f.workflow(
        "on-ping", trigger=on_event(Pinged), pipeline=f.workflow_pipeline(Pinged).compute("n", lambda c: c.payload.n)
    )
    app = app_on([f])
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with Session(app.engine) as session, session.begin():
        for payload in ({"n": "not a number"}, {"n": 7}):
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
                occurred_at=now,
            )
    counts = app.run_worker(once=True)
    assert counts["started"] == 1
    runs = app.runs(workflow)
    assert [(r.status, r.steps["n"]) for r in runs] == [("completed", 7)]
    assert app.run_worker(once=True)["started"] == 0


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
    with Session(app.engine) as session, session.begin():
        append(
            session,
            stream_id=uuid.uuid4(),
            aggregate_type="thing",
            stream_version=1,
            type="pinged",
            payload={"n": 1},
            tenant_id=uuid.uuid4(),
            user_id=None,
            correlation_id=None,
            occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
    app.run_worker(once=True)
    app.run_worker(once=True)
    [run] = app.runs(workflow)
    assert (run.status, run.steps["outer"]) == ("completed", "$missing")
