"""A worker's segment takes its savepoint only when it sends a statement (``_segment_savepoint``).

Resuming a segment that only computes sends its store alone (no SAVEPOINT, no RELEASE),
held with the batch's other such stores and sent with them at the batch's end; one that
writes takes the savepoint before its first statement, and a failure after that write
undoes the write alone.  A store the database refuses outside a savepoint (PostgreSQL: the
transaction is aborted) rolls back the worker's batch, which is done again with a
savepoint per segment: the refused run fails alone, every other run of the batch is
stored once.  On both databases.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _sql_log import statements
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, fail, manual, ok, on_event
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)


@attrs.frozen
class Start:
    n: int


@attrs.frozen
class Made:
    label: str


class SspThing(Entity):
    __tablename__ = "ssp_thing"
    label: Mapped[str]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def _savepoints(seen: list[str]) -> list[str]:
    return [s.split()[0] for s in seen if "SAVEPOINT" in s.upper()]


def _things(app: App) -> list[str]:
    table = SspThing.__table__
    with app.engine.connect() as conn:
        return sorted(conn.scalars(sa.select(table.c.label)))


def test_a_segment_that_sends_nothing_stores_without_a_savepoint_one_that_writes_takes_it(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = Feature("ssp")
    f.entity(SspThing)
    quiet = f.workflow(
        "quiet", trigger=manual(Start), pipeline=f.workflow_pipeline(Start).wait("PT1M").compute("x", lambda c: 1)
    )
    writes = f.workflow(
        "writes",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start)
        .wait("PT1M")
        .create("thing", SspThing, data=lambda c: SspThing(label=f"thing {c.payload.n}"))
        .guard(lambda c: c.payload.n > 0, otherwise=lambda c: fail("refused", "n is 0")),
    )
    app = app_on([f], clock=clock)
    runs = []
    for n, flow in ((0, writes), (1, writes), (2, quiet)):
        runs.append(app.start_workflow(flow, Start(n), user=user))
        clock.advance(seconds=1)  # resumed in this order
    clock.advance(minutes=2)
    with statements(app.engine) as seen:
        assert app.run_worker(once=True)["resumed"] == 3
    statuses = [getattr(app.get_run(r), "status", None) for r in runs]
    assert statuses == ["failed", "completed", "completed"]
    assert _things(app) == ["thing 1"]  # the failed segment's write was undone alone
    # The segment's SAVEPOINT goes on the driver's cursor (not logged), its ends are: the
    # two writing segments took one each (the failed one rolled back to it), the quiet one none.
    ours = [s for s in seen if "kumiko_segment" in s]
    assert ours == [
        "ROLLBACK TO SAVEPOINT kumiko_segment",
        "RELEASE SAVEPOINT kumiko_segment",
        "RELEASE SAVEPOINT kumiko_segment",
    ]


def _refuse_poison(app: App, db_url: str) -> App:
    """On PostgreSQL, a check that refuses a run's state holding "poison": a refusal only
    the database makes (the framework refuses a NUL itself, on both databases)."""
    if not db_url.startswith("sqlite"):
        with app.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "ALTER TABLE kumiko_workflow_runs ADD CONSTRAINT test_no_poison"
                    " CHECK (state::text NOT LIKE '%poison%')"
                )
            )
    return app


def test_a_store_refused_outside_a_savepoint_fails_that_run_alone(
    app_on: Callable[..., App], db_url: str, clock: FakeClock, user: User
) -> None:
    """PostgreSQL refuses a run's state (the check ``_refuse_poison`` adds; SQLite has
    none): the batch is rolled back and done again, the refused run's segment in a
    savepoint from its start."""
    computed: list[int] = []

    def value(c: Any) -> object:
        computed.append(c.payload.n)
        return "poison" if c.payload.n == 1 else c.payload.n

    f = Feature("ssp")
    flow = f.workflow(
        "flow",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start).wait("PT1M").compute("value", value).wait("PT1M"),
    )
    app = _refuse_poison(app_on([f], clock=clock), db_url)
    runs = []
    for n in (0, 1, 2):
        runs.append(app.start_workflow(flow, Start(n), user=user))
        clock.advance(seconds=1)  # resumed in this order
    clock.advance(minutes=2)
    with statements(app.engine) as seen:
        assert app.run_worker(once=True)["resumed"] == 3
    infos = [app.get_run(r) for r in runs]
    assert [(i.status, i.path) for i in (infos[0], infos[2]) if i is not None] == [("suspended", "@wait~2")] * 2
    bad = infos[1]
    assert bad is not None
    if db_url.startswith("sqlite"):
        assert bad.status == "suspended" and bad.steps["value"] == "poison"
        assert sorted(computed) == [0, 1, 2] and _savepoints(seen) == []
        return
    assert bad.error is not None
    assert (bad.status, bad.error["code"]) == ("failed", "unstorable_state")
    assert "the database refused the run's state" in bad.error["message"]
    # The first try ran all three, their stores held for the batch's end, where the
    # refused one rolled the batch back; the second ran all three in savepoints.
    assert sorted(computed) == [0, 0, 1, 1, 2, 2]
    assert _savepoints(seen) == ["SAVEPOINT", "RELEASE", "SAVEPOINT", "ROLLBACK", "SAVEPOINT", "RELEASE"]


def test_the_feed_redoes_a_batch_whose_refused_store_aborted_it(
    app_on: Callable[..., App], db_url: str, clock: FakeClock, user: User
) -> None:
    """The same in the event feed: an event-started run whose first store is refused."""
    f = Feature("ssp")
    f.entity(SspThing)
    f.event(Made)
    emit = f.write_handler(
        "emit",
        f.pipeline(Start)
        .create("thing", SspThing, data=lambda c: SspThing(label=f"emit {c.payload.n}"))
        .append_event(SspThing, id=lambda c: c.steps["thing"].id, event=lambda c: Made(f"m{c.payload.n}"))
        .return_(lambda c: ok(None)),
    )
    f.workflow(
        "on_made",
        trigger=on_event(Made),
        pipeline=f.workflow_pipeline(Made)
        .compute("value", lambda c: "poison" if c.payload.label == "m1" else c.payload.label)
        .wait("PT1M"),
    )
    app = _refuse_poison(app_on([f], clock=clock), db_url)
    for n in (0, 1, 2):
        assert app.dispatch(emit, Start(n), user=user) == Ok(None)
    app.run_worker(once=True)
    runs = sorted((r.status, r.steps.get("value"), r.error and r.error["code"]) for r in app.runs())
    bad = ("suspended", "poison", None) if db_url.startswith("sqlite") else ("failed", None, "unstorable_state")
    assert runs == sorted([("suspended", "m0", None), bad, ("suspended", "m2", None)])
    assert app.run_worker(once=True)["started"] == 0  # the feed's cursor moved past the three once
    assert len(app.runs()) == 3


def _add_by_hand(c: Any) -> None:
    thing = SspThing(label=f"added {c.payload.n}")
    thing.tenant_id, thing.created_at, thing.updated_at = c.user.tenant_id, c.now, c.now
    c.db.add(thing)


def test_what_a_failed_segment_added_without_sending_it_never_lands(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """A resolver's ``c.db.add`` sends nothing until a flush: the segment took no
    savepoint, and the failure's store must not flush the object into the transaction."""
    f = Feature("ssp")
    f.entity(SspThing)
    flow = f.workflow(
        "adds",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start)
        .wait("PT1M")
        .compute("added", _add_by_hand)
        .guard(lambda c: c.payload.n > 0, otherwise=lambda c: fail("refused", "n is 0")),
    )
    app = app_on([f], clock=clock)
    runs = []
    for n in (0, 1):
        runs.append(app.start_workflow(flow, Start(n), user=user))
        clock.advance(seconds=1)
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["resumed"] == 2
    assert [getattr(app.get_run(r), "status", None) for r in runs] == ["failed", "completed"]
    assert _things(app) == ["added 1"]
