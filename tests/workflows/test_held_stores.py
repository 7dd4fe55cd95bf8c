"""A worker's batch of durable steps sends its runs' stores together (``_segment_savepoint``).

A resumed segment that sends nothing before its store writes its run with one UPDATE;
the worker holds those UPDATEs and sends a batch's at its end, before the COMMIT, in one
``executemany``: one execution (one round trip) for the batch, one row of parameters per
run.  A segment that fails has nothing held; one the database refuses at the batch's end
rolls the batch back, and the batch is done again with a savepoint per segment, where
the refused run fails alone.  On both databases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from kumiko_typed import App, Feature, User, fail, manual
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)


@attrs.frozen
class Start:
    n: int


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@contextmanager
def executions(engine: sa.Engine) -> Iterator[list[tuple[str, int]]]:
    """Each statement execution ``engine`` sends while the block runs: its first words
    and how many rows of parameters it carries (an ``executemany``: more than one)."""
    seen: list[tuple[str, int]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append((" ".join(statement.split()[:2]).upper(), len(parameters) if many else 1))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def _writes(seen: list[tuple[str, int]]) -> list[tuple[str, int]]:
    # A transaction's begin is no write of its runs: on SQLite it also turns off the
    # query_only a read-only view (``app.get_run``) left on the pooled connection.
    return [s for s in seen if not s[0].startswith(("SELECT", "BEGIN", "PRAGMA QUERY_ONLY"))]


def _flow(f: Feature[str]) -> Any:
    """Two durable steps: ``a``, committed at the first wait; ``b``, after the second."""
    return f.workflow(
        "steps",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start)
        .wait("PT1M")
        .compute("a", lambda c: c.payload.n + 1)
        .guard(lambda c: c.payload.n != 13, otherwise=lambda c: fail("refused", "n is 13"))
        .wait("PT1M")
        .compute("b", lambda c: c.steps["a"] * 10),
    )


def test_a_batch_of_durable_steps_sends_one_update_for_all_its_runs(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    f = Feature("held")
    flow = _flow(f)
    app = app_on([f], clock=clock)
    runs = [app.start_workflow(flow, Start(n), user=user) for n in (1, 2, 3)]
    app.run_worker(once=True)  # the first pass sets up the event feed's cursor
    clock.advance(minutes=1)
    with executions(app.engine) as seen:
        assert app.run_worker(once=True)["resumed"] == 3
    # The three runs' durable step ``a``: one UPDATE, sent once, with a row per run; no
    # savepoint (nothing else was sent), no statement per run.
    assert _writes(seen) == [("UPDATE KUMIKO_WORKFLOW_RUNS", 3)]
    infos = [app.get_run(r) for r in runs]
    assert [(i.status, i.path, i.steps) for i in infos if i is not None] == [
        ("suspended", "@wait~2", {"a": n + 1}) for n in (1, 2, 3)
    ]

    clock.advance(minutes=1)
    with executions(app.engine) as seen:
        assert app.run_worker(once=True)["resumed"] == 3
    assert _writes(seen) == [("UPDATE KUMIKO_WORKFLOW_RUNS", 3)]
    infos = [app.get_run(r) for r in runs]
    assert [(i.status, i.steps) for i in infos if i is not None] == [
        ("completed", {"a": n + 1, "b": (n + 1) * 10}) for n in (1, 2, 3)
    ]


def test_a_batch_that_suspends_completes_and_fails_runs_stores_each_once(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """A suspension and a completion set different columns: one execution each.  A run
    whose segment fails is stored at once, alone; nothing of it is held."""
    f = Feature("held")
    flow = _flow(f)
    app = app_on([f], clock=clock)
    ahead = app.start_workflow(flow, Start(1), user=user)
    app.run_worker(once=True)
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1  # ahead waits at its second wait
    behind = [app.start_workflow(flow, Start(n), user=user) for n in (2, 13)]
    clock.advance(minutes=1)
    with executions(app.engine) as seen:
        assert app.run_worker(once=True)["resumed"] == 3
    # The completed and the suspended run set the same columns (a completed one's path is
    # cleared): one UPDATE with a row each; the failed run's, another.
    assert sorted(_writes(seen)) == [("UPDATE KUMIKO_WORKFLOW_RUNS", 1), ("UPDATE KUMIKO_WORKFLOW_RUNS", 2)]
    done, waiting, refused = (app.get_run(r) for r in (ahead, *behind))
    assert done is not None and (done.status, done.steps) == ("completed", {"a": 2, "b": 20})
    assert waiting is not None and (waiting.status, waiting.path) == ("suspended", "@wait~2")
    assert refused is not None and refused.error is not None
    assert (refused.status, refused.error["code"]) == ("failed", "refused")


def _refuse_poison(app: App, db_url: str) -> None:
    """The database refuses a run's state holding "poison" (a refusal only it makes)."""
    with app.engine.begin() as conn:
        if db_url.startswith("sqlite"):
            conn.execute(
                sa.text(
                    "CREATE TRIGGER test_no_poison BEFORE UPDATE ON kumiko_workflow_runs"
                    " WHEN NEW.state LIKE '%poison%' BEGIN SELECT RAISE(ABORT, 'poison'); END"
                )
            )
        else:
            conn.execute(
                sa.text(
                    "ALTER TABLE kumiko_workflow_runs ADD CONSTRAINT test_no_poison"
                    " CHECK (state::text NOT LIKE '%poison%')"
                )
            )


def test_a_held_store_the_database_refuses_fails_its_run_alone(
    app_on: Callable[..., App], db_url: str, clock: FakeClock, user: User
) -> None:
    computed: list[int] = []

    def value(c: Any) -> object:
        computed.append(c.payload.n)
        return "poison" if c.payload.n == 1 else c.payload.n

    f = Feature("held")
    flow = f.workflow(
        "flow",
        trigger=manual(Start),
        pipeline=f.workflow_pipeline(Start).wait("PT1M").compute("value", value).wait("PT1M"),
    )
    app = app_on([f], clock=clock)
    _refuse_poison(app, db_url)
    runs = [app.start_workflow(flow, Start(n), user=user) for n in (0, 1, 2)]
    app.run_worker(once=True)
    clock.advance(minutes=2)
    with executions(app.engine) as seen:
        assert app.run_worker(once=True)["resumed"] == 3
    infos = [app.get_run(r) for r in runs]
    assert [(i.status, i.steps) for i in (infos[0], infos[2]) if i is not None] == [
        ("suspended", {"value": 0}),
        ("suspended", {"value": 2}),
    ]
    bad = infos[1]
    assert bad is not None and bad.error is not None
    assert (bad.status, bad.error["code"]) == ("failed", "unstorable_state")
    assert "the database refused the run's state" in bad.error["message"]
    assert "UPDATE" not in bad.error["message"]  # the database's reason, never the SQL
    # Held, all three were refused together at the batch's end; done again, each was
    # stored in its segment's savepoint, and every run's state is stored once.
    assert sorted(computed) == [0, 0, 1, 1, 2, 2]
    assert _writes(seen)[0] == ("UPDATE KUMIKO_WORKFLOW_RUNS", 3)
