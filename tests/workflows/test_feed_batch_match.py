"""The feed matches a transaction's events against the waits in a few statements, not one
per event, on SQLite and PostgreSQL: it asks once which of their groups of waits (type,
workflow, path, tenant, key) hold an armed wait (``_waits_probe``), and reads the waits
of those only.  Before, each event of a waited type read its key's waits in a statement
of its own: 200 a batch of payments no run waits for (bench/event_feed.py).

What the batching must not change: each run woken by its own tenant's event only, every
group an event is for matched, and two events of a key in one batch each waking the
wait that had not seen it, in event order."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from _sql_log import statements
from _support import run_info
from sqlalchemy.orm import Session

from kumiko_typed import App, Feature, User, manual, on_event
from kumiko_typed._eventstore import append
from kumiko_typed._waits_probe import _statement
from kumiko_typed._workflow_feed import EventFeed
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))
BOB = User(id=uuid.UUID(int=2), tenant_id=uuid.UUID(int=0xB))
CAROL = User(id=uuid.UUID(int=3), tenant_id=uuid.UUID(int=0xC))

side = sa.MetaData()
#: One row per committed wake-up: the run, the wait, the note of the event that woke it.
woken = sa.Table(
    "fbm_woken",
    side,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Uuid, nullable=False),
    sa.Column("wait", sa.String(20), nullable=False),
    sa.Column("note", sa.String(20), nullable=False),
)


@attrs.frozen
class Job:
    group: int


@attrs.frozen
class Rung:
    group: int
    note: str


@attrs.frozen
class Opened:
    """Starts a run that waits for its group's ``Rung`` from the place of this event: a
    ``Rung`` after it is one that run has not seen."""

    group: int


f: Feature[Any] = Feature("fbm")
f.event(Rung, name="rung")
f.event(Opened, name="opened")


def _waits(pipeline: Any, *names: str) -> Any:
    """``pipeline`` waiting for its group's ``Rung`` at each of ``names`` in turn, each
    wake-up noted."""
    for name in names:
        pipeline = pipeline.wait_for_event(
            name, Rung, key=lambda c: c.payload.group, event_key=lambda e: e.group, timeout=timedelta(days=1)
        ).compute(f"{name}_noted", lambda c, name=name: _note(c, name))
    return pipeline


def _note(c: Any, wait: str) -> bool:
    c.db.execute(sa.insert(woken).values(run_id=c.workflow.run_id, wait=wait, note=c.steps[wait].note))
    return True


once = f.workflow("once", trigger=manual(Job), pipeline=_waits(f.workflow_pipeline(Job), "rung"))
also = f.workflow("also", trigger=manual(Job), pipeline=_waits(f.workflow_pipeline(Job), "rung"))
twice = f.workflow("twice", trigger=manual(Job), pipeline=_waits(f.workflow_pipeline(Job), "first", "second"))
opened = f.workflow("opened", trigger=on_event(Opened), pipeline=_waits(f.workflow_pipeline(Opened), "rung"))


def _app(app_on: Callable[..., App]) -> App:
    app = app_on([f], clock=FakeClock(T0))
    side.create_all(app.engine)
    return app


def _start(app: App, workflow: Any, user: User, group: int) -> uuid.UUID:
    return app.start_workflow(workflow, Job(group), user=user)


def _ring(app: App, *rungs: tuple[User, int, str | None]) -> None:
    """Append a ``Rung`` per (user, group, note), in one transaction: one feed batch;
    note ``None``: an ``Opened`` of the group."""
    with Session(app.engine) as session, session.begin():
        for user, group, note in rungs:
            append(
                session,
                stream_id=uuid.uuid4(),
                aggregate_type="bell",
                stream_version=1,
                type="rung" if note else "opened",
                payload={"group": group, "note": note} if note else {"group": group},
                tenant_id=user.tenant_id,
                user_id=user.id,
                correlation_id=None,
                occurred_at=T0,
            )


def _wakes(app: App) -> list[tuple[uuid.UUID, str, str]]:
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(woken.c.run_id, woken.c.wait, woken.c.note).order_by(woken.c.id)).all()
    return [(r.run_id, r.wait, r.note) for r in rows]


def _reads_of_waits(sent: Iterable[str]) -> list[str]:
    return [s for s in sent if s.startswith("SELECT") and "kumiko_workflow_waits" in s]


def test_a_batch_of_events_no_run_waits_for_reads_the_waits_in_a_few_statements(app_on: Callable[..., App]) -> None:
    """200 events of keys no run waits for, in one feed transaction: a read of their
    type's groups and a probe per window of their keys (32, 32, 64 and 72 events; before,
    200 reads of waits, one an event); then a batch with one event of a waited key among
    them wakes its run."""
    app = _app(app_on)
    runs = [_start(app, once, ADA, group) for group in (1, 2, 3)]
    app.run_worker(once=True)  # the runs reach their wait; the feed arms them
    _ring(app, *((ADA, 100 + i, "other") for i in range(200)))
    feed = EventFeed(app._workflow_engine)
    with statements(app.engine) as sent:
        assert feed.consume(lambda: False) == (0, 0)
    assert len(_reads_of_waits(sent)) <= 9, _reads_of_waits(sent)
    assert len(sent) <= 24, sent

    _ring(
        app, *((ADA, 300 + i, "other") for i in range(100)), (ADA, 2, "two"), *((ADA, 400 + i, "x") for i in range(99))
    )
    with statements(app.engine) as sent:
        assert feed.consume(lambda: False) == (0, 1)
    assert len(_reads_of_waits(sent)) <= 10, _reads_of_waits(sent)
    assert _wakes(app) == [(runs[1], "rung", "two")]


def test_a_batch_waking_runs_of_two_tenants_of_one_key_wakes_each_by_its_own_tenants_event(
    app_on: Callable[..., App],
) -> None:
    """One batch: Bob's event of key 7, Ada's of key 7, Ada's of key 8.  Ada's runs of key 7
    (two workflows: one event, two groups) take Ada's event, Bob's run Bob's; Carol's run
    of key 7 and Ada's of key 9 are not woken."""
    app = _app(app_on)
    ada_once, ada_also = _start(app, once, ADA, 7), _start(app, also, ADA, 7)
    bob_once = _start(app, once, BOB, 7)
    carol_once, ada_nine = _start(app, once, CAROL, 7), _start(app, once, ADA, 9)
    app.run_worker(once=True)
    _ring(app, (BOB, 7, "bob"), (ADA, 7, "ada"), (ADA, 8, "ada8"))
    assert EventFeed(app._workflow_engine).consume(lambda: False) == (0, 3)
    assert sorted(_wakes(app)) == sorted(
        [(ada_once, "rung", "ada"), (ada_also, "rung", "ada"), (bob_once, "rung", "bob")]
    )
    assert {run_info(app, r).status for r in (carol_once, ada_nine)} == {"suspended"}


def test_two_events_of_one_key_in_a_batch_each_wake_the_waits_that_had_not_seen_them_in_order(
    app_on: Callable[..., App],
) -> None:
    """One batch: Ada's ``Rung`` "one" of key 7, an ``Opened`` of key 7 (its run waits
    from there), a ``Rung`` "two" of key 7.  The runs waiting before take "one"; the
    opened run takes "two", not "one".  A run's second wait, stored after both committed,
    had seen them: the next event of the key wakes it, and nothing else."""
    app = _app(app_on)
    two_waits, one_wait = _start(app, twice, ADA, 7), _start(app, once, ADA, 7)
    app.run_worker(once=True)
    _ring(app, (ADA, 7, "one"), (ADA, 7, None), (ADA, 7, "two"))
    for _ in range(3):  # the opened run's wait is armed, and looks back, in a later transaction
        app.run_worker(once=True)
    (opened_run,) = (r.run_id for r in app.runs(opened))
    assert sorted(_wakes(app)) == sorted(
        [(two_waits, "first", "one"), (one_wait, "rung", "one"), (opened_run, "rung", "two")]
    )
    _ring(app, (ADA, 7, "three"))
    assert app.run_worker(once=True)["resumed"] == 1
    assert _wakes(app)[-1] == (two_waits, "second", "three")
    assert run_info(app, two_waits).status == "completed"


def test_the_probe_of_a_batchs_groups_reads_the_match_index_on_sqlite(app_on: Callable[..., App], db_url: str) -> None:
    """Each group of the probe is a search of the match index by its whole prefix (the
    first armed wait in run order): a group of thousands of waits of one key costs a row."""
    if not db_url.startswith("sqlite"):
        return  # PostgreSQL's plan depends on its statistics (checked by hand: index scans)
    app = _app(app_on)
    for keyed in (True, False):
        stmt = _statement(2, keyed)
        values = {"t": "rung", "w": "fbm:once", "p": "rung", "n": ADA.tenant_id, "k": "7"}
        params = {f"{name}{i}": value for i in range(2) for name, value in values.items()}
        sql = str(stmt.params(params).compile(app.engine, compile_kwargs={"literal_binds": True}))
        with app.engine.connect() as conn:
            plan = [str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql)]
        searches = [step for step in plan if "kumiko_workflow_waits" in step]
        prefix = "event_type=? AND workflow=? AND path=? AND tenant_id=?" + (" AND key=?" if keyed else ")")
        assert len(searches) == 2, plan
        assert all("USING INDEX kumiko_workflow_waits_match" in s and prefix in s for s in searches), plan


def test_a_fan_out_transaction_loads_the_keys_of_the_events_it_reaches_not_of_its_whole_batch(
    app_on: Callable[..., App], monkeypatch: Any
) -> None:
    """One event waking 250 runs, then 199 events of other keys, one batch: the feed
    resumes 100 runs a transaction, each transaction reading the batch from that event.
    The two the fan-out fills load the keys of the first window of events (32), not all
    200: 32 + 32 + 200 loads, where one probe of the whole batch made 600.  Every run is
    woken once, by that event."""
    app = _app(app_on)
    runs = {_start(app, once, ADA, 7) for _ in range(250)}
    app.run_worker(once=True)
    _ring(app, (ADA, 7, "fan"), *((ADA, 500 + i, "other") for i in range(199)))
    loads: list[uuid.UUID] = []
    key_of = EventFeed._event_key

    def counted(self: EventFeed, d: Any, path: str, event: Any) -> Any:
        loads.append(event.event_id)
        return key_of(self, d, path, event)

    monkeypatch.setattr(EventFeed, "_event_key", counted)
    assert EventFeed(app._workflow_engine).consume(lambda: False) == (0, 250)
    assert len(loads) <= 32 + 32 + 200, len(loads)
    wakes = _wakes(app)
    assert sorted(r for r, _, _ in wakes) == sorted(runs) and {n for _, _, n in wakes} == {"fan"}
