"""Workflow segments get the isolation write handlers get (DESIGN §5): a read-decide-append
based on a row another run changed meanwhile is refused (``version_conflict``: a manual
start's first segment fails its run, a resumed segment is tried again shortly, one
resumed by an event with that event).  N concurrent runs against a stock
of K < N: the stock never goes below zero, and every unit gone is one run's reservation."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy import select
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
RUNS = 6
STOCK = 2


class WfiItem(Entity):
    __tablename__ = "wfi_item"
    stock: Mapped[int]


@attrs.frozen
class NewItem:
    stock: int


@attrs.frozen
class Reserve:
    item: uuid.UUID


@attrs.frozen
class Reserved:
    qty: int


@attrs.frozen
class Released:
    """The go-ahead a waiting reservation waits for (appended to the item)."""

    note: str


shop = Feature("wfi")
shop.entity(WfiItem)
shop.event(Reserved)
shop.event(Released)


@shop.projector(WfiItem, Reserved)
def _take(row: WfiItem, event: Reserved) -> None:
    row.stock -= event.qty


new_item = shop.write_handler(
    "new-item",
    shop.pipeline(NewItem)
    .create("item", WfiItem, data=lambda c: WfiItem(stock=c.payload.stock))
    .return_(lambda c: ok(c.steps["item"].id)),
)


def _reserve_meanwhile(app: App, user: User) -> Callable[[Any], None]:
    """A hook between a segment's read and its write: a handler in another connection
    reserves the run's item, and commits, before the segment goes on."""

    def take_one(c: Any) -> None:
        item = c.payload.item
        racer = threading.Thread(target=lambda: app.dispatch(take, Reserve(item), user=user))
        racer.start()
        racer.join(30)

    return take_one


def _decide(c: Any) -> bool:
    time.sleep(0.02)  # the other runs read the same stock meanwhile, unless they wait
    return bool(c.steps["item"].stock > 0)


def _reserving(pipeline: Any) -> Any:
    """Read the item, decide, reserve one if there is stock."""
    return (
        pipeline.get_one("item", lambda c: select(WfiItem).where(WfiItem.id == c.payload.item))
        .compute("available", _decide)
        .branch(
            when=lambda c: c.steps["available"],
            on_true=lambda b: b.append_event(WfiItem, id=lambda c: c.payload.item, event=lambda c: Reserved(1)),
        )
    )


reserve = shop.workflow("reserve", trigger=manual(Reserve), pipeline=_reserving(shop.workflow_pipeline(Reserve)))

take = shop.write_handler(
    "take",
    shop.pipeline(Reserve)
    .append_event(WfiItem, id=lambda c: c.payload.item, event=lambda c: Reserved(1))
    .return_(lambda c: ok(None)),
)

release = shop.write_handler(
    "release",
    shop.pipeline(Reserve)
    .append_event(WfiItem, id=lambda c: c.payload.item, event=lambda c: Released("go"))
    .return_(lambda c: ok(None)),
)

#: Called by ``peek`` with its context after its read (the test that runs it sets it).
after_peek: list[Callable[[Any], None]] = []


@contextmanager
def _peeking(hook: Callable[[Any], None]) -> Iterator[None]:
    """``hook`` called by every ``peek`` inside the block (to race it)."""
    after_peek.append(hook)
    try:
        yield
    finally:
        after_peek.clear()


def _lost_once(run: Any) -> None:
    """A run tried again after a lost race says so: its error, the first try."""
    assert run.error is not None and (run.error["code"], run.error["tries"]) == ("version_conflict", "1"), run


def _stocked(app: App, user: User, stock: int) -> Any:
    """The tables created and a new item of ``stock``: its id."""
    app.create_all()
    created = app.dispatch(new_item, NewItem(stock), user=user)
    assert isinstance(created, Ok)
    return created.data


def _peek(c: Any) -> int:
    for hook in after_peek:
        hook(c)
    return int(c.steps["item"].stock)


peeker = shop.workflow(
    "peek",
    trigger=manual(Reserve),
    pipeline=shop.workflow_pipeline(Reserve)
    .wait("PT1M")
    .get_one("item", lambda c: select(WfiItem).where(WfiItem.id == c.payload.item))
    .compute("seen", _peek),
)
reserve_later = shop.workflow(
    "reserve-later", trigger=manual(Reserve), pipeline=_reserving(shop.workflow_pipeline(Reserve).wait("PT2M"))
)
#: A reservation after a wait whose decision calls ``after_peek`` (to race it).
reserve_racy = shop.workflow(
    "reserve-racy",
    trigger=manual(Reserve),
    pipeline=shop.workflow_pipeline(Reserve)
    .wait("PT1M")
    .get_one("item", lambda c: select(WfiItem).where(WfiItem.id == c.payload.item))
    .compute("seen", _peek)
    .branch(
        when=lambda c: c.steps["seen"] > 0,
        on_true=lambda b: b.append_event(WfiItem, id=lambda c: c.payload.item, event=lambda c: Reserved(1)),
    ),
)


#: A reservation once the item is released, whose decision calls ``after_peek``.
reserve_on_release = shop.workflow(
    "reserve-on-release",
    trigger=manual(Reserve),
    pipeline=shop.workflow_pipeline(Reserve)
    .wait_for_event("go", Released, key=lambda c: "go", event_key=lambda e: e.note, timeout="PT1H")
    .get_one("item", lambda c: select(WfiItem).where(WfiItem.id == c.payload.item))
    .compute("seen", _peek)
    .branch(
        when=lambda c: c.steps["seen"] > 0,
        on_true=lambda b: b.append_event(WfiItem, id=lambda c: c.payload.item, event=lambda c: Reserved(1)),
    ),
)


def test_concurrent_runs_reserve_exactly_the_stock(app_on: Callable[..., App], make_user: Callable[..., User]) -> None:
    app = app_on([shop])
    user = make_user()
    created = app.dispatch(new_item, NewItem(STOCK), user=user)
    assert isinstance(created, Ok)
    item: uuid.UUID = created.data
    barrier = threading.Barrier(RUNS)
    runs: list[uuid.UUID] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            barrier.wait()
            runs.append(app.start_workflow(reserve, Reserve(item), user=user))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(RUNS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    infos = [i for r in runs if (i := app.get_run(r)) is not None]
    assert len(infos) == RUNS
    lost = [i for i in infos if i.status != "completed"]
    assert all(i.status == "failed" and i.error and i.error["code"] == "version_conflict" for i in lost), lost
    if app.engine.dialect.name == "sqlite":
        assert lost == []  # one writer at a time: every run read the current stock
    reserved = sum(bool(i.steps["available"]) for i in infos if i.status == "completed")
    with app.engine.connect() as conn:
        stock = conn.scalar(sa.select(WfiItem.__table__.c.stock))
    assert stock is not None and stock >= 0
    assert reserved == STOCK - stock > 0


# --- segments of one worker transaction -------------------------------------------------------


@pytest.mark.postgres
def test_a_segment_does_not_decide_on_a_row_an_earlier_segment_of_the_pass_read(
    fresh_postgres_url: str, make_user: Callable[..., User]
) -> None:
    """A worker resumes due runs in batches, one transaction per batch.  The first run
    only reads the item; a handler takes the last one before the second run (which
    reserves) reads it: the second run must see the stock as it is now, not as the
    first one loaded it."""
    user = make_user()
    clock = FakeClock(T0)
    app = App([shop], database_url=fresh_postgres_url, clock=clock)
    racers: list[threading.Thread] = []
    kept: list[object] = []

    def take_the_last(c: Any) -> None:
        kept.append(c.steps["item"])  # still referenced (by a cache, say) when the next run reads it
        item = c.payload.item
        racers.append(threading.Thread(target=lambda: app.dispatch(take, Reserve(item), user=user)))
        racers[-1].start()
        racers[-1].join(30)  # nothing locks the row: the handler commits now

    after_peek.append(take_the_last)
    try:
        item = _stocked(app, user, 1)
        first = app.start_workflow(peeker, Reserve(item), user=user)
        second = app.start_workflow(reserve_later, Reserve(item), user=user)
        clock.advance(minutes=5)
        assert app.run_worker(once=True)["resumed"] == 2
        assert len(racers) == 1 and not racers[0].is_alive()
        peeked, reserved = app.get_run(first), app.get_run(second)
        assert peeked is not None and reserved is not None
        assert (peeked.status, peeked.steps["seen"]) == ("completed", 1)
        assert (reserved.status, reserved.steps["available"]) == ("completed", False)
        with app.engine.connect() as conn:
            assert conn.scalar(sa.select(WfiItem.__table__.c.stock)) == 0
    finally:
        after_peek.clear()
        app.dispose()


@pytest.mark.postgres
def test_a_resumed_segment_that_loses_a_race_is_tried_again_not_failed(
    fresh_postgres_url: str, make_user: Callable[..., User]
) -> None:
    """Writers take no global lock, so a segment can lose a race on an aggregate: a
    handler reserves between the segment's read and its write.  The segment rolls back
    and the run stays suspended at its wait, due again shortly; the next pass re-reads
    the stock and reserves."""
    user = make_user()
    clock = FakeClock(T0)
    app = App([shop], database_url=fresh_postgres_url, clock=clock)

    take_one = _reserve_meanwhile(app, user)

    try:
        item = _stocked(app, user, 2)
        run = app.start_workflow(reserve_racy, Reserve(item), user=user)
        clock.advance(minutes=2)
        with _peeking(take_one):
            app.run_worker(once=True)
        lost = app.get_run(run)
        assert lost is not None
        assert (lost.status, lost.path) == ("suspended", "@wait")
        _lost_once(lost)
        assert lost.wake_at is not None and T0 + timedelta(minutes=2) < lost.wake_at <= T0 + timedelta(minutes=3)
        with app.engine.connect() as conn:
            assert conn.scalar(sa.select(WfiItem.__table__.c.stock)) == 1  # the handler's reservation only
        clock.advance(minutes=1)
        assert app.run_worker(once=True)["resumed"] == 1
        done = app.get_run(run)
        assert done is not None and (done.status, done.steps["seen"]) == ("completed", 1)
        with app.engine.connect() as conn:
            assert conn.scalar(sa.select(WfiItem.__table__.c.stock)) == 0
    finally:
        app.dispose()


@pytest.mark.postgres
def test_a_run_another_deploy_stranded_that_loses_a_race_here_is_no_longer_listed_stranded(
    fresh_postgres_url: str, make_user: Callable[..., User]
) -> None:
    """This deploy read the run and ran its segment, which lost a race: the run is due
    again here, so another deploy's strand mark goes with the rolled-back segment's
    retry (kept, ``runs(stranded=True)`` listed a run this deploy is resuming)."""
    user = make_user()
    clock = FakeClock(T0)
    app = App([shop], database_url=fresh_postgres_url, clock=clock)

    take_one = _reserve_meanwhile(app, user)

    try:
        item = _stocked(app, user, 2)
        run = app.start_workflow(reserve_racy, Reserve(item), user=user)
        mark = {"code": "stranded", "message": "another deploy lacked a class", "stranded_by": " v0/digest "}
        with app.engine.begin() as conn:
            conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run).values(error=mark))
        assert [r.run_id for r in app.runs(stranded=True)] == [run]
        clock.advance(minutes=2)
        with _peeking(take_one):
            assert app.run_worker(once=True)["resumed"] == 1
        lost = app.get_run(run)
        assert lost is not None and (lost.status, lost.path) == ("suspended", "@wait")
        _lost_once(lost)  # not the strand mark
        assert app.runs(stranded=True) == []
        clock.advance(minutes=1)
        assert app.run_worker(once=True)["resumed"] == 1
        done = app.get_run(run)
        assert done is not None and (done.status, done.error) == ("completed", None)
    finally:
        app.dispose()


@pytest.mark.postgres
def test_a_segment_resumed_by_an_event_that_loses_a_race_is_tried_again_with_that_event(
    fresh_postgres_url: str, make_user: Callable[..., User]
) -> None:
    """As above, for a run woken by an event: the event is not consumed by the lost
    race.  The run stays suspended at its wait, due shortly (not at its timeout), and
    the try again gets the same event, not a timeout's ``None``."""
    user = make_user()
    clock = FakeClock(T0)
    app = App([shop], database_url=fresh_postgres_url, clock=clock)
    races: list[int] = []

    def take_one_once(c: Any) -> None:
        if races:
            return
        races.append(1)
        _reserve_meanwhile(app, user)(c)

    try:
        item = _stocked(app, user, 2)
        run = app.start_workflow(reserve_on_release, Reserve(item), user=user)
        app.run_worker(once=True)  # arms the wait
        assert app.dispatch(release, Reserve(item), user=user) == Ok(None)
        with _peeking(take_one_once):
            app.run_worker(once=True)
        lost = app.get_run(run)
        assert lost is not None
        assert (lost.status, lost.path) == ("suspended", "go")
        _lost_once(lost)
        assert lost.wake_at is not None and T0 < lost.wake_at <= T0 + timedelta(seconds=1)
        with app.engine.connect() as conn:
            assert conn.scalar(sa.select(WfiItem.__table__.c.stock)) == 1  # the handler's reservation only
        clock.advance(seconds=2)
        assert app.run_worker(once=True)["resumed"] == 1
        done = app.get_run(run)
        assert done is not None and done.status == "completed", done
        assert (done.steps["go"], done.steps["seen"]) == (Released("go"), 1)
        with app.engine.connect() as conn:
            assert conn.scalar(sa.select(WfiItem.__table__.c.stock)) == 0
        assert "woken_by" not in str(done.steps)
    finally:
        app.dispose()
