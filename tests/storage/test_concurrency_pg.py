"""Concurrent writers on PostgreSQL (DESIGN §6): optimistic locking under contention, the
commit-order-safe event positions that tailing consumers rely on, unique violations under a
race, and no deadlock between multi-aggregate writes.

Every test gets its own empty database (``fresh_postgres_url``) and its own App.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, Session, mapped_column

import kumiko_typed._eventstore as eventstore_module
import kumiko_typed._steps.aggregates as data_module
from examples.inventory.handlers import adjust_stock, bulk_adjust, create_product, inventory
from examples.inventory.model import Adjustment, AdjustStock, BulkAdjust, CreateProduct, Product, StockAdjusted
from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok
from kumiko_typed._eventstore import Cursor, read_after
from kumiko_typed._notify import CHANNEL
from kumiko_typed._tables import events

pytestmark = pytest.mark.postgres

THREADS = 8
#: Bounds a hang only.
BOUND = 30


# --- a counter aggregate for the optimistic-locking test ------------------------------------


class Counter(Entity):
    __tablename__ = "test_concurrency_pg_counter"
    count: Mapped[int] = mapped_column(default=0)


@attrs.frozen
class NewCounter:
    count: int = 0


@attrs.frozen
class Bump:
    """Set ``count`` to what the caller read plus one, if nobody wrote since ``version``."""

    id: uuid.UUID
    version: int
    count: int


counters = Feature("concurrency_counters")
counters.entity(Counter)

new_counter = counters.write_handler(
    "counter:create",
    counters.pipeline(NewCounter)
    .create("counter", Counter, data=lambda c: Counter(count=c.payload.count))
    .return_(lambda c: ok(c.steps["counter"].id)),
)

bump = counters.write_handler(
    "counter:bump",
    counters.pipeline(Bump)
    .update(
        "bumped",
        Counter,
        id=lambda c: c.payload.id,
        changes=lambda c: {"count": c.payload.count + 1},
        version=lambda c: c.payload.version,
    )
    .return_(lambda c: ok(c.steps["bumped"].version)),
)


# --- helpers --------------------------------------------------------------------------------


@pytest.fixture
def pg_app(fresh_postgres_url: str) -> Iterator[Callable[..., App]]:
    apps: list[App] = []

    def build(*features: Feature[Any]) -> App:
        app = App(list(features), database_url=fresh_postgres_url)
        app.create_all()
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.dispose()


def admin_of(tenant: uuid.UUID | None = None) -> User:
    return User(id=uuid.uuid4(), tenant_id=tenant or uuid.uuid4(), roles={"Admin"})


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Start ``count`` threads on ``target(n)`` together; re-raise the first exception."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(n: int) -> None:
        try:
            barrier.wait()
            target(n)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread hangs"
    if errors:
        raise errors[0]


def event_rows(app: App) -> list[sa.Row[Any]]:
    with app.engine.connect() as conn:
        return list(conn.execute(sa.select(events).order_by(events.c.position)))


def code_of(result: Ok[object] | Failure) -> str:
    return "ok" if isinstance(result, Ok) else result.code


# --- (a) optimistic locking under contention ------------------------------------------------


def test_contended_updates_lose_nothing(pg_app: Callable[..., App]) -> None:
    app = pg_app(counters)
    admin = admin_of()
    created = app.dispatch(new_counter, NewCounter(), user=admin)
    assert isinstance(created, Ok)
    cid = created.data
    results: list[Ok[int] | Failure] = []
    lock = threading.Lock()

    def worker(_n: int) -> None:
        for _ in range(50):
            with Session(app.engine) as s:  # the caller's read, in its own session
                version, count = s.execute(sa.select(Counter.version, Counter.count).where(Counter.id == cid)).one()
            result = app.dispatch(bump, Bump(cid, version, count), user=admin)
            with lock:
                results.append(result)

    run_threads(THREADS, worker)

    assert len(results) == THREADS * 50
    oks = [r for r in results if isinstance(r, Ok)]
    failures = [r for r in results if isinstance(r, Failure)]
    assert oks and failures, "expected both winners and losers under contention"
    assert {f.code for f in failures} == {"version_conflict"}
    for f in failures:
        assert isinstance(f.details, dict)
        assert f.details["entity_id"] == str(cid)
        assert f.details["current_version"] > f.details["expected_version"]
    # every winner got a distinct version: no two updates were based on the same read
    assert sorted(r.data for r in oks) == list(range(2, len(oks) + 2))

    with Session(app.engine) as s:
        version, count = s.execute(sa.select(Counter.version, Counter.count).where(Counter.id == cid)).one()
    assert version == 1 + len(oks)
    assert count == len(oks)  # no lost update: each winner added exactly one to what it read
    stream = [r for r in event_rows(app) if r.stream_id == cid]
    assert len(stream) == version
    assert [r.stream_version for r in stream] == list(range(1, version + 1))
    assert [r.payload["changes"]["count"] for r in stream[1:]] == list(range(1, len(oks) + 1))


# --- (b) commit-order-safe tailing ----------------------------------------------------------


@attrs.define
class TailOutcome:
    seen: set[uuid.UUID]
    stored: set[uuid.UUID]
    codes: Tally[str]
    reads: int

    @property
    def skipped(self) -> set[uuid.UUID]:
        return self.stored - self.seen


def slow_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Widen the window between an event's INSERT and its COMMIT by a few milliseconds,
    so that commits overtake each other all the time."""
    for name in ("_create", "_append_event"):
        original = getattr(data_module, name)

        def delayed(step: Any, run: Any, _original: Callable[..., Any] = original) -> Any:
            result = _original(step, run)
            time.sleep(random.uniform(0.0005, 0.004))
            return result

        monkeypatch.setattr(data_module, name, delayed)


def tail_while_writing(app: App, *, prefix: str, with_bulk: bool) -> TailOutcome:
    """6 writer threads x 40 dispatches of the inventory handlers, while a tailer reads
    ``read_after(cursor)`` in a loop and moves its cursor to the last event it got."""
    admin = admin_of()
    shared = []
    for i in range(4):
        r = app.dispatch(create_product, CreateProduct(f"{prefix}-shared-{i}", "shared", 10_000), user=admin)
        assert isinstance(r, Ok)
        shared.append(r.data.id)
    codes: Tally[str] = Tally()
    codes_lock = threading.Lock()
    done = threading.Event()
    seen: set[uuid.UUID] = set()
    reads = 0

    def tail_once(cursor: Cursor) -> Cursor:
        nonlocal reads
        with Session(app.engine) as s:
            batch = read_after(s, cursor)
        reads += 1
        for e in batch:
            seen.add(e.event_id)
        return batch[-1].cursor if batch else cursor

    def tailer() -> None:
        cursor: Cursor = (0, 0)
        while not done.is_set():
            cursor = tail_once(cursor)
        # the writers are done: drain what is left
        while (moved := tail_once(cursor)) != cursor:
            cursor = moved

    def writer(n: int) -> None:
        rng = random.Random(n)
        mine: list[uuid.UUID] = []
        for i in range(40):
            if i % 8 == 0:
                result: Ok[Any] | Failure = app.dispatch(
                    create_product, CreateProduct(f"{prefix}-{n}-{i}", "p", rng.randint(0, 10)), user=admin
                )
                if isinstance(result, Ok):
                    mine.append(result.data.id)
            elif with_bulk and i % 4 == 1:
                items = [Adjustment(pid, rng.randint(-2, 3)) for pid in rng.sample(shared, 3)]
                result = app.dispatch(bulk_adjust, BulkAdjust(items, "bulk"), user=admin)
            else:
                pid = rng.choice(mine + shared)
                result = app.dispatch(adjust_stock, AdjustStock(pid, rng.randint(-4, 4), "tick"), user=admin)
            with codes_lock:
                codes[code_of(result)] += 1

    tail = threading.Thread(target=tailer)
    tail.start()
    try:
        run_threads(6, writer)
    finally:
        done.set()
        tail.join(timeout=120)
    assert not tail.is_alive()
    stored = {r.event_id for r in event_rows(app)}
    return TailOutcome(seen, stored, codes, reads)


def test_tailing_by_position_never_skips_an_event(pg_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch) -> None:
    app = pg_app(inventory)
    slow_commits(monkeypatch)
    outcome = tail_while_writing(app, prefix="on", with_bulk=True)

    assert outcome.codes["ok"] > 100, outcome.codes
    # a lost race on a shared product is a version_conflict (also when two bulk adjusts
    # crossing each other's products deadlock); no 500
    assert set(outcome.codes) <= {"ok", "unprocessable", "version_conflict"}, outcome.codes
    assert outcome.reads > 10  # the tailer really ran alongside the writers
    assert outcome.skipped == set()
    assert outcome.seen == outcome.stored

    # and the rows are the replay of their streams
    rows = event_rows(app)
    with Session(app.engine) as s:
        products = s.execute(sa.select(Product).execution_options(kumiko_all_tenants=True)).scalars().all()
    assert products
    for p in products:
        stream = [r for r in rows if r.stream_id == p.id]
        assert [r.stream_version for r in stream] == list(range(1, p.version + 1))
        assert stream[0].type == "product.created"
        deltas = [StockAdjusted(**r.payload).delta for r in stream[1:]]
        assert p.stock == stream[0].payload["stock"] + sum(deltas)


def test_tailing_skips_events_without_the_running_transactions_horizon(
    pg_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above can fail: reading in (tx, position) order but past the oldest running
    transaction, a tailer moves its cursor past an event of a younger transaction and
    loses one of an older transaction that commits after it."""
    app = pg_app(inventory)
    slow_commits(monkeypatch)
    monkeypatch.setattr(eventstore_module, "_BELOW_RUNNING", sa.true())
    skipped: set[uuid.UUID] = set()
    for attempt in range(5):
        outcome = tail_while_writing(app, prefix=f"off{attempt}", with_bulk=False)
        assert outcome.seen <= outcome.stored
        skipped = outcome.skipped
        if skipped:
            break
    assert skipped, "no event was skipped without the horizon in 5 runs"


# --- (c) a unique constraint under a race -------------------------------------------------------


def test_concurrent_creates_of_one_sku(pg_app: Callable[..., App]) -> None:
    app = pg_app(inventory)
    admin = admin_of()
    results: list[Ok[Any] | Failure] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        r = app.dispatch(create_product, CreateProduct("same-sku", f"racer {n}", n), user=admin)
        with lock:
            results.append(r)

    run_threads(THREADS, worker)

    assert Tally(code_of(r) for r in results) == {"ok": 1, "unique_violation": THREADS - 1}
    winner = next(r for r in results if isinstance(r, Ok))
    with app.engine.connect() as conn:
        products = list(conn.execute(sa.select(Product.__table__)))
    assert [(p.id, p.sku, p.version) for p in products] == [(winner.data.id, "same-sku", 1)]
    rows = event_rows(app)
    assert [(r.stream_id, r.type, r.stream_version) for r in rows] == [(winner.data.id, "product.created", 1)]


# --- writes of several aggregates in opposite orders --------------------------------------------


def test_bulk_writes_in_opposite_orders_never_hang_nor_half_apply(fresh_postgres_url: str) -> None:
    """Two bulk adjusts naming the same products in opposite orders (and single adjusts
    alongside) each read, then append: the later writer of a product loses the race
    (version_conflict), also when the two wait for each other's appends and PostgreSQL
    breaks the deadlock.  Nothing hangs, and each product's stock is its start plus
    exactly the successful calls' units: a failed bulk adjust wrote none.  (Deadlocks are
    looked for after 50 ms here, not the default 1 s, to keep the test short.)"""
    app = App([inventory], database_url=fresh_postgres_url + "?options=-c%20deadlock_timeout%3D50")
    try:
        app.create_all()
        admin = admin_of()
        ids = []
        for sku in ("a", "b", "c"):
            r = app.dispatch(create_product, CreateProduct(sku, sku, 1000), user=admin)
            assert isinstance(r, Ok)
            ids.append(r.data.id)
        results: list[tuple[int, Ok[Any] | Failure]] = []  # (units asked for, result)
        lock = threading.Lock()

        def worker(n: int) -> None:
            order = ids if n % 2 else ids[::-1]
            for i in range(15):
                if n % 4 == 3:
                    r: Ok[Any] | Failure = app.dispatch(adjust_stock, AdjustStock(order[i % 3], 1, "one"), user=admin)
                    units = 1
                else:
                    r = app.dispatch(bulk_adjust, BulkAdjust([Adjustment(pid, 1) for pid in order], "all"), user=admin)
                    units = len(order)
                with lock:
                    results.append((units, r))

        started = time.monotonic()
        run_threads(THREADS, worker)
        elapsed = time.monotonic() - started

        codes = Tally(code_of(r) for _, r in results)
        assert set(codes) <= {"ok", "version_conflict"}, codes
        assert codes["ok"] > 0, codes
        assert elapsed < 60
        with app.engine.connect() as conn:
            stocks = dict(conn.execute(sa.select(Product.__table__.c.id, Product.__table__.c.stock)).all())
        assert sum(stocks.values()) == 3 * 1000 + sum(units for units, r in results if isinstance(r, Ok))
    finally:
        app.dispose()


# --- the workers' NOTIFY and savepoints -----------------------------------------------------------


class Listening:
    """A LISTEN connection on the workers' channel.  :meth:`heard` counts what it got since
    the last call, up to a marker NOTIFY sent after the transactions under test committed:
    PostgreSQL delivers notifications in commit order, so the count does not depend on how
    soon the server delivers them (a 0.3 s window did, and a late one counted in the next)."""

    MARK = "heard-up-to-here"

    def __init__(self, url: str) -> None:
        self.listener = psycopg.connect(url.replace("+psycopg", ""), autocommit=True)
        self.listener.execute(f"LISTEN {CHANNEL}")
        self.marker = psycopg.connect(url.replace("+psycopg", ""), autocommit=True)

    def heard(self) -> int:
        self.marker.execute("SELECT pg_notify(%s, %s)", (CHANNEL, self.MARK))
        for count, notify in enumerate(self.listener.notifies(timeout=BOUND)):
            if notify.payload == self.MARK:
                return count
        raise AssertionError(f"not within {BOUND} s: the marker NOTIFY")

    def close(self) -> None:
        self.listener.close()
        self.marker.close()


def test_the_notify_survives_a_rolled_back_savepoint(fresh_postgres_url: str) -> None:
    """A NOTIFY first queued inside a savepoint goes away when that savepoint rolls back (a
    failed workflow segment in a worker's batch, a failed retry attempt); the next append in
    the same transaction must queue it again rather than trust that it is queued."""
    engine = sa.create_engine(fresh_postgres_url)
    listening = Listening(fresh_postgres_url)
    heard = listening.heard
    try:
        with Session(engine) as s, s.begin():
            savepoint = s.begin_nested()
            eventstore_module.notify_on_commit(s)
            savepoint.rollback()
        assert heard() == 0  # dropped with its savepoint
        with Session(engine) as s, s.begin():
            savepoint = s.begin_nested()
            eventstore_module.notify_on_commit(s)
            savepoint.rollback()
            eventstore_module.notify_on_commit(s)
        assert heard() == 1
        with Session(engine) as s, s.begin():
            with s.begin_nested():
                eventstore_module.notify_on_commit(s)
            eventstore_module.notify_on_commit(s)  # released, not rolled back: still queued
        assert heard() == 1  # once: PostgreSQL folds repeats within a transaction
    finally:
        listening.close()
        engine.dispose()


def test_an_event_queues_the_notify_with_its_insert(fresh_postgres_url: str) -> None:
    """An append wakes the workers without a round trip of its own: the insert queues the
    NOTIFY (so it is dropped with a rolled-back savepoint like the insert itself), and a
    transaction queues it once however many events it appends."""
    app = App([inventory], database_url=fresh_postgres_url)
    app.create_all()
    listening = Listening(fresh_postgres_url)
    heard = listening.heard
    statements: list[str] = []

    def append(s: Session) -> None:
        eventstore_module.append(
            s,
            stream_id=uuid.uuid4(),
            aggregate_type="product",
            stream_version=1,
            type="product.created",
            payload={},
            tenant_id=uuid.uuid4(),
            user_id=None,
            correlation_id=None,
            occurred_at=app.clock(),
        )

    sa.event.listen(app.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    try:
        with Session(app.engine) as s, s.begin():
            append(s)
            append(s)
        assert heard() == 1
        assert sum("pg_notify" in sql for sql in statements) == 1
        assert not any(sql.lstrip().upper().startswith("SELECT PG_NOTIFY") for sql in statements)
        with Session(app.engine) as s, s.begin():
            savepoint = s.begin_nested()
            append(s)
            savepoint.rollback()
        assert heard() == 0  # dropped with the insert
        with Session(app.engine) as s, s.begin():
            savepoint = s.begin_nested()
            append(s)
            savepoint.rollback()
            append(s)
        assert heard() == 1
        with Session(app.engine) as s:
            s.begin()
            append(s)
            s.rollback()
        assert heard() == 0
    finally:
        listening.close()
        app.dispose()
