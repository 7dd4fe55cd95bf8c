"""The first segment of a run a trigger starts (an appended event, a cron tick) that loses
a race on an aggregate (``version_conflict``) does not fail the run: like a resumed
segment it is rolled back and tried again shortly, the run kept suspended at its start;
the try again re-reads and decides anew.  A manual start's first segment still fails its
run: its caller is waiting and is told (docs/workflows.md).

The race: another writer changes the item between the segment's read and its write.  On
both databases it is written inside the segment's own transaction (a SQLite worker holds
the write lock, so no other connection could), through ``c.db``, as a committed writer's
change would look; on PostgreSQL also by a real handler in another thread."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy import select
from sqlalchemy.orm import Mapped

from kumiko_typed import App, CronTick, Entity, Feature, Ok, User, cron, manual, ok, on_event
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)


class WfrItem(Entity):
    __tablename__ = "wfr_item"
    stock: Mapped[int]


@attrs.frozen
class NewItem:
    stock: int


@attrs.frozen
class Take:
    item: uuid.UUID


@attrs.frozen
class Requested:
    """Appended to an item: a workflow run reserves one for it."""

    item: uuid.UUID


@attrs.frozen
class Reserved:
    qty: int


shop = Feature("wfr")
shop.entity(WfrItem)
shop.event(Requested)
shop.event(Reserved)


@shop.projector(WfrItem, Reserved)
def _take(row: WfrItem, event: Reserved) -> None:
    row.stock -= event.qty


new_item = shop.write_handler(
    "new-item",
    shop.pipeline(NewItem)
    .create("item", WfrItem, data=lambda c: WfrItem(stock=c.payload.stock))
    .return_(lambda c: ok(c.steps["item"].id)),
)
request = shop.write_handler(
    "request",
    shop.pipeline(Take)
    .append_event(WfrItem, id=lambda c: c.payload.item, event=lambda c: Requested(c.payload.item))
    .return_(lambda c: ok(None)),
)
take = shop.write_handler(
    "take",
    shop.pipeline(Take)
    .append_event(WfrItem, id=lambda c: c.payload.item, event=lambda c: Reserved(1))
    .return_(lambda c: ok(None)),
)

#: Called once, by the next ``_peek``, between the segment's read and its write.
racer: list[Callable[[Any], None]] = []


def _peek(c: Any) -> int:
    while racer:
        racer.pop()(c)
    return int(c.steps["item"].stock)


def _reserving(pipeline: Any, query: Callable[[Any], Any]) -> Any:
    """Read the item, decide, reserve one if there is stock."""
    return (
        pipeline.get_one("item", query)
        .compute("seen", _peek)
        .branch(
            when=lambda c: c.steps["seen"] > 0,
            on_true=lambda b: b.append_event(WfrItem, id=lambda c: c.steps["item"].id, event=lambda c: Reserved(1)),
        )
    )


on_request = shop.workflow(
    "on-request",
    trigger=on_event(Requested),
    pipeline=_reserving(
        shop.workflow_pipeline(Requested), lambda c: select(WfrItem).where(WfrItem.id == c.payload.item)
    ),
)
by_hand = shop.workflow(
    "by-hand",
    trigger=manual(Take),
    pipeline=_reserving(shop.workflow_pipeline(Take), lambda c: select(WfrItem).where(WfrItem.id == c.payload.item)),
)
#: A cron run's user is the system user, of the nil tenant: it reserves from that tenant's
#: item (the tests of other triggers never pass a minute: it does not fire for them).
every_minute = shop.workflow(
    "every-minute",
    trigger=cron("* * * * *"),
    pipeline=_reserving(shop.workflow_pipeline(CronTick), lambda c: select(WfrItem)),
)
SYSTEM_TENANT = uuid.UUID(int=0)


@pytest.fixture(autouse=True)
def no_racer() -> Any:
    yield
    racer.clear()


def _write_behind_its_back(c: Any) -> None:
    """Another writer's change to the item the segment has read: its version moves on."""
    table = WfrItem.__table__
    item = c.steps["item"]
    bump = sa.update(table).where(table.c.id == item.id).values(version=table.c.version + 1, stock=table.c.stock)
    c.db.execute(bump)


def _stock(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(WfrItem.__table__.c.stock)) or 0)


def _runs(app: App, workflow: Any) -> list[Any]:
    return [r for r in app.runs(workflow.name)]


def _lost_once(run: Any) -> None:
    """The run's error while it is tried again: the lost race, the first try."""
    assert run.error is not None and (run.error["code"], run.error["tries"]) == ("version_conflict", "1"), run


def _kept_at_its_start(app: App, run: Any) -> None:
    assert (run.status, run.path) == ("suspended", None), run
    _lost_once(run)
    assert run.wake_at is not None and T0 < run.wake_at <= T0 + timedelta(seconds=1), run.wake_at


def test_an_event_started_run_that_loses_its_first_race_is_tried_again(
    app_on: Callable[..., App], make_user: Callable[..., User]
) -> None:
    clock = FakeClock(T0)
    app = app_on([shop], clock=clock)
    user = make_user()
    item = app.dispatch(new_item, NewItem(2), user=user)
    assert isinstance(item, Ok)
    assert app.dispatch(request, Take(item.data), user=user) == Ok(None)
    racer.append(_write_behind_its_back)
    assert app.run_worker(once=True)["started"] == 1
    (run,) = _runs(app, on_request)
    _kept_at_its_start(app, run)
    assert _stock(app) == 2  # the lost segment wrote nothing

    assert app.run_worker(once=True)["resumed"] == 0  # not due before its wake time
    clock.advance(seconds=2)
    assert app.run_worker(once=True)["resumed"] == 1
    done = app.get_run(run.run_id)
    assert done is not None and (done.status, done.error, done.steps["seen"]) == ("completed", None, 2), done
    assert _stock(app) == 1
    assert app.run_worker(once=True)["started"] == 0  # the event started its one run


def test_a_cron_run_that_loses_its_first_race_is_tried_again(app_on: Callable[..., App]) -> None:
    clock = FakeClock(T0)
    app = app_on([shop], clock=clock)
    # The cron run's rows are the nil tenant's, which only a sysadmin reaches.
    operator = User(id=uuid.uuid4(), tenant_id=SYSTEM_TENANT, roles={"sysadmin"})
    item = app.dispatch(new_item, NewItem(3), user=operator)
    assert isinstance(item, Ok)
    app.run_worker(once=True)  # the schedule starts: no backfill
    clock.advance(seconds=40)  # 09:01:10, past the 09:01 tick
    racer.append(_write_behind_its_back)
    assert app.run_worker(once=True)["started"] == 1
    (run,) = _runs(app, every_minute)
    assert (run.status, run.path) == ("suspended", None), run
    _lost_once(run)
    assert run.wake_at is not None and clock() < run.wake_at <= clock() + timedelta(seconds=1)
    clock.advance(seconds=2)
    assert app.run_worker(once=True)["resumed"] == 1
    done = app.get_run(run.run_id)
    assert done is not None and (done.status, done.steps["seen"]) == ("completed", 3), done
    assert _stock(app) == 2


def test_a_manual_start_that_loses_its_first_race_still_fails_its_run(
    app_on: Callable[..., App], make_user: Callable[..., User]
) -> None:
    """Its caller waits for the start and learns of the conflict (``app.get_run``)."""
    app = app_on([shop], clock=FakeClock(T0))
    user = make_user()
    item = app.dispatch(new_item, NewItem(2), user=user)
    assert isinstance(item, Ok)
    racer.append(_write_behind_its_back)
    run = app.get_run(app.start_workflow(by_hand, Take(item.data), user=user))
    assert run is not None and run.status == "failed" and run.error is not None, run
    assert run.error["code"] == "version_conflict"
    assert _stock(app) == 2


@pytest.mark.postgres
def test_an_event_started_run_racing_a_real_handler_is_tried_again(
    fresh_postgres_url: str, make_user: Callable[..., User]
) -> None:
    """A handler in another connection reserves (and commits) between the first
    segment's read and its append: the append's version is taken."""
    user = make_user()
    clock = FakeClock(T0)
    app = App([shop], database_url=fresh_postgres_url, clock=clock)

    def take_one(c: Any) -> None:
        thread = threading.Thread(target=lambda: app.dispatch(take, Take(c.payload.item), user=user))
        thread.start()
        thread.join(30)

    try:
        app.create_all()
        item = app.dispatch(new_item, NewItem(2), user=user)
        assert isinstance(item, Ok)
        assert app.dispatch(request, Take(item.data), user=user) == Ok(None)
        racer.append(take_one)
        assert app.run_worker(once=True)["started"] == 1
        (run,) = _runs(app, on_request)
        _kept_at_its_start(app, run)
        assert _stock(app) == 1  # the handler's reservation only
        clock.advance(seconds=2)
        assert app.run_worker(once=True)["resumed"] == 1
        done = app.get_run(run.run_id)
        assert done is not None and (done.status, done.steps["seen"]) == ("completed", 1), done
        assert _stock(app) == 0
    finally:
        app.dispose()
