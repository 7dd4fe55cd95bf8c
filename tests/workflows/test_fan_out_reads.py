"""One event waking many runs (a fan-out), a hundred to a transaction, on SQLite and
PostgreSQL: each wait is read about once, and each run is woken exactly once whatever
comes between the transactions (a run that starts waiting, another tenant's runs of the
same key, a worker that dies, a second worker).

Before, every transaction of a fan-out read all the waits still left: 10,000 runs of one
event read about 505,000 wait rows (n²/200 for n runs, 100 to a transaction)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _sql_log import rows_read
from _support import run_info, together
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, User, _workflow_feed, manual, ok, on_event
from kumiko_typed._workflow_feed import EventFeed
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))
BOB = User(id=uuid.UUID(int=2), tenant_id=uuid.UUID(int=0xB))
#: Runs a feed transaction resumes at most here: fan-outs of many transactions stay small.
FEW = 5

side = sa.MetaData()
#: One row per committed wake-up (no unique constraint: a doubled one shows).
woken = sa.Table(
    "fo_woken",
    side,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Uuid, nullable=False),
)


@attrs.frozen
class Job:
    group: int


@attrs.frozen
class Ring:
    group: int


@attrs.frozen
class Rung:
    group: int


@attrs.frozen
class Opened:
    """Starts a run that waits for its group's ``Rung`` from its own place in the event
    order: a ``Rung`` after it is one that run has not seen, wherever the feed is."""

    group: int


class FoBell(Entity):
    __tablename__ = "fo_bell"
    group: Mapped[int]


def _woken(c: Any) -> bool:
    c.db.execute(sa.insert(woken).values(run_id=c.workflow.run_id))
    return True


f: Feature[Any] = Feature("fo")
f.entity(FoBell)
f.event(Rung)
f.event(Opened)


def _waiting(payload: type[Any]) -> Any:
    return (
        f.workflow_pipeline(payload)
        .wait_for_event(
            "rung", Rung, key=lambda c: c.payload.group, event_key=lambda e: e.group, timeout=timedelta(days=1)
        )
        .compute("woken", _woken)
    )


fanned = f.workflow("fanned", trigger=manual(Job), pipeline=_waiting(Job))
opened = f.workflow("opened", trigger=on_event(Opened), pipeline=_waiting(Opened))


def _appending(name: str, event: Callable[[Any], object]) -> Any:
    return f.write_handler(
        name,
        f.pipeline(Ring)
        .create("bell", FoBell, data=lambda c: FoBell(group=c.payload.group))
        .append_event(FoBell, id=lambda c: c.steps["bell"].id, event=event)
        .return_(lambda c: ok(None)),
    )


ring = _appending("ring", lambda c: Rung(c.payload.group))
open_ = _appending("open", lambda c: Opened(c.payload.group))


def _app(app_on: Callable[..., App], monkeypatch: pytest.MonkeyPatch) -> App:
    monkeypatch.setattr(_workflow_feed, "RUNS_PER_TRANSACTION", FEW)
    app = app_on([f], clock=FakeClock(T0))
    side.create_all(app.engine)
    return app


def _wait(app: App, n: int, user: User = ADA, group: int = 7) -> list[uuid.UUID]:
    """``n`` runs of ``user``'s tenant waiting for ``group``'s ``Rung``, armed."""
    runs = [app.start_workflow(fanned, Job(group), user=user) for _ in range(n)]
    app.run_worker(once=True)  # the feed arms their waits
    return runs


def _ring(app: App, user: User = ADA, group: int = 7, handler: Any = ring) -> None:
    assert app.dispatch(handler, Ring(group), user=user).data is None


def _wakes(app: App) -> dict[uuid.UUID, int]:
    """How many times each run's wake-up committed."""
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(woken.c.run_id, sa.func.count()).group_by(woken.c.run_id)).all()
    return {r[0]: r[1] for r in rows}


def _statuses(app: App, runs: list[uuid.UUID]) -> set[str]:
    return {run_info(app, r).status for r in runs}


@pytest.mark.parametrize("n", [60, 240])
def test_a_fan_out_reads_each_wait_about_once(
    app_on: Callable[..., App], monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """n runs of one key, FEW to a transaction: each transaction reads its page of waits
    (one past its room), its event's group (a row of the match index) and the row of its
    events' probe (``_waits_probe``: whether each group holds an armed wait), n + 3n/FEW
    rows in all; before, each read every wait left, n²/(2·FEW) (60 runs: 390, 240 runs: 5,880).
    Another tenant's runs of the same key are not read (nor woken)."""
    app = _app(app_on, monkeypatch)
    runs = _wait(app, n)
    others = _wait(app, 10, BOB)
    _ring(app)
    with rows_read(app.engine, "kumiko_workflow_waits") as read:
        assert app.run_worker(once=True)["resumed"] == n
    assert read.get("kumiko_workflow_waits", 0) <= n + 3 * (n // FEW + 1), read
    assert _wakes(app) == dict.fromkeys(runs, 1)
    assert _statuses(app, others) == {"suspended"}


def test_a_run_that_starts_waiting_during_a_fan_out_is_woken_once_by_what_it_did_not_see(
    app_on: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the fan-out's transactions (the feed asks ``stopping`` before each): a run
    starts waiting for the same key after the event committed (it saw it: the event does
    not wake it, the next one does), and another tenant's runs of that key wait too
    (woken by their tenant's event only).  And a run an ``Opened`` before the ``Rung``
    starts in the fan-out's first transaction waits from its trigger's place: the ``Rung``
    wakes it once its wait is armed, in a later transaction of the fan-out."""
    app = _app(app_on, monkeypatch)
    runs = _wait(app, 4 * FEW)
    others = _wait(app, FEW, BOB)
    _ring(app, handler=open_)
    _ring(app)
    late: list[uuid.UUID] = []
    asked = 0

    def between() -> bool:
        nonlocal asked
        asked += 1
        if asked == 3:  # two transactions of the fan-out committed
            late.append(app.start_workflow(fanned, Job(7), user=ADA))
            others.append(app.start_workflow(fanned, Job(7), user=BOB))
        return False

    feed = EventFeed(app._workflow_engine)
    started, resumed = feed.consume(between)
    assert asked > 3, "the fan-out took fewer transactions than the test needs"
    (opened_run,) = (r.run_id for r in app.runs(opened))
    assert (started, resumed) == (1, len(runs) + 1)
    assert _wakes(app) == dict.fromkeys([*runs, opened_run], 1)
    assert _statuses(app, [*late, *others]) == {"suspended"}

    _ring(app)
    assert app.run_worker(once=True)["resumed"] == 1
    assert _wakes(app) == dict.fromkeys([*runs, opened_run, *late], 1)
    _ring(app, BOB)
    assert app.run_worker(once=True)["resumed"] == len(others)
    assert _wakes(app) == dict.fromkeys([*runs, opened_run, *late, *others], 1)


def test_a_worker_that_dies_between_the_fan_outs_transactions_leaves_the_rest_to_the_next(
    app_on: Callable[..., App], monkeypatch: pytest.MonkeyPatch, db_url: str
) -> None:
    """A feed that ends after two transactions of a fan-out (a worker killed between
    them: what it committed stays, nothing else of it does); a new worker (its own App)
    wakes the rest, each run once."""
    app = _app(app_on, monkeypatch)
    runs = _wait(app, 4 * FEW)
    _ring(app)
    asked = 0

    def dies() -> bool:
        nonlocal asked
        asked += 1
        return asked > 2

    assert EventFeed(app._workflow_engine).consume(dies) == (0, 2 * FEW)
    assert sorted(_wakes(app).values()) == [1] * (2 * FEW)
    after = app_on([f], clock=FakeClock(T0))
    assert after.run_worker(once=True)["resumed"] == 2 * FEW
    assert _wakes(after) == dict.fromkeys(runs, 1)


def test_workers_sharing_a_fan_out_wake_each_run_once(
    app_on: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three workers (each an App) take the fan-out's transactions as they get the
    feed's cursor: every run is woken exactly once, none by another tenant's event."""
    app = _app(app_on, monkeypatch)
    workers = [app, *(app_on([f], clock=FakeClock(T0)) for _ in range(2))]
    runs = _wait(app, 8 * FEW)
    others = _wait(app, FEW, BOB)
    _ring(app)
    counts = together(*(lambda w=w: w.run_worker(once=True)["resumed"] for w in workers))
    leftover = app.run_worker(once=True)["resumed"]
    assert sum(counts) + leftover == len(runs)  # type: ignore[arg-type]
    assert _wakes(app) == dict.fromkeys(runs, 1)
    assert _statuses(app, others) == {"suspended"}
