"""The Temporal/DBOS order saga, ported (examples/ports/order_saga.py), on SQLite and
PostgreSQL: the charge is a webhook to a real HTTP receiver on 127.0.0.1, the provider's
and the warehouse's answers are events the run waits for, a missing answer times out and
the saga undoes what it did; a worker that dies in the middle of a segment loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa
from _receiver import Receiver

from examples.ports.order_saga import (
    PAYMENT_TIMEOUT,
    SHIPMENT_TIMEOUT,
    AddStock,
    ConfirmShipment,
    OrderStatus,
    PlaceOrder,
    SettlePayment,
    Stock,
    StockReleased,
    StockReserved,
    add_stock,
    confirm_shipment,
    order_saga,
    order_status,
    place_order,
    settle_payment,
    shop,
)
from kumiko_typed import App, Failure, Ok, User
from kumiko_typed._tables import events
from kumiko_typed.testing import FakeClock

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "_saga_worker.py"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> App:
    monkeypatch.setenv("SHOP_PAYMENTS_URL", receiver.base)
    return app_on([shop], clock=clock)


@pytest.fixture
def shopkeeper() -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles={"PaymentProvider", "Warehouse"})


def stocked(app: App, user: User, available: int = 5) -> uuid.UUID:
    result = app.dispatch(add_stock, AddStock("tea", available), user=user)
    assert isinstance(result, Ok), result
    stock: uuid.UUID = result.data
    return stock


def ordered(app: App, user: User, qty: int = 2) -> uuid.UUID:
    result = app.dispatch(place_order, PlaceOrder("tea", qty, Decimal("9.90")), user=user)
    assert isinstance(result, Ok), result
    order: uuid.UUID = result.data
    return order


def available(app: App, user: User, stock: uuid.UUID) -> int:
    stream = app.read_stream(Stock, stock, user=user)
    assert isinstance(stream, Ok)
    with app.engine.connect() as conn:
        row = conn.execute(sa.select(Stock.__table__.c.available).where(Stock.__table__.c.id == stock)).scalar_one()
    return int(row)


def saga_of(app: App) -> uuid.UUID:
    (run,) = app.runs(workflow="shop:order-saga")
    return run.run_id


def stock_events(app: App, user: User, stock: uuid.UUID) -> list[object]:
    stream = app.read_stream(Stock, stock, user=user)
    assert isinstance(stream, Ok)
    return [e.event for e in stream.data[1:]]


def charges(receiver: Receiver, path: str = "/charge") -> list[dict[str, str]]:
    return [json.loads(r.body) for r in receiver.to(path)]


def test_the_happy_path_charges_once_and_ships(app: App, shopkeeper: User, receiver: Receiver) -> None:
    stock = stocked(app, shopkeeper)
    order = ordered(app, shopkeeper)
    counts = app.run_worker(once=True)  # the event starts the saga; the charge goes out in the same pass
    assert (counts["started"], counts["sent"]) == (1, 1)
    assert charges(receiver) == [{"order_id": str(order), "amount": "9.90"}]
    assert receiver.to("/charge")[0].headers["idempotency-key"] == str(app.outbox()[0].id)
    run = app.get_run(saga_of(app))
    assert run is not None and (run.status, run.path) == ("suspended", "charge/on_true/payment")
    assert available(app, shopkeeper, stock) == 3

    # The provider calls back; the warehouse confirms.
    assert app.dispatch(settle_payment, SettlePayment(order, True), user=shopkeeper) == Ok("paid")
    assert app.run_worker(once=True)["resumed"] == 1
    run = app.get_run(saga_of(app))
    assert run is not None and (run.status, run.path) == ("suspended", "ship/on_true/await/on_true/shipment")
    assert app.dispatch(confirm_shipment, ConfirmShipment(order, "TRK-1"), user=shopkeeper) == Ok("shipped")
    app.run_worker(once=True)

    assert app.result(order_saga, saga_of(app), user=shopkeeper) == Ok("shipped")
    assert app.query(order_status, OrderStatus(order), user=shopkeeper) == Ok("shipped")
    assert stock_events(app, shopkeeper, stock) == [StockReserved(order, 2)]
    assert available(app, shopkeeper, stock) == 3
    assert len(receiver.requests) == 1  # no refund


def test_a_declined_payment_releases_the_stock(app: App, shopkeeper: User, receiver: Receiver) -> None:
    stock = stocked(app, shopkeeper)
    order = ordered(app, shopkeeper)
    app.run_worker(once=True)
    app.dispatch(settle_payment, SettlePayment(order, False), user=shopkeeper)
    app.run_worker(once=True)
    assert app.result(order_saga, saga_of(app), user=shopkeeper) == Ok("payment declined")
    assert stock_events(app, shopkeeper, stock) == [StockReserved(order, 2), StockReleased(order, 2)]
    assert available(app, shopkeeper, stock) == 5
    assert app.query(order_status, OrderStatus(order), user=shopkeeper) == Ok("payment declined")
    assert receiver.to("/refund") == []
    late = app.dispatch(confirm_shipment, ConfirmShipment(order, "TRK-1"), user=shopkeeper)
    assert late == Failure("unprocessable", "the order is payment declined, not paid")


def test_a_provider_that_never_accepts_the_charge_times_out_and_compensates(
    app: App, clock: FakeClock, shopkeeper: User, receiver: Receiver
) -> None:
    """The charge webhook fails three times (500) and is dead; the hour for the payment runs
    out; the reservation is released."""
    receiver.respond = lambda _index, _path: (500, {})
    stock = stocked(app, shopkeeper)
    ordered(app, shopkeeper)
    assert app.run_worker(once=True)["retried"] == 1
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["retried"] == 1
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["dead"] == 1
    assert len(receiver.to("/charge")) == 3
    assert len({r.headers["idempotency-key"] for r in receiver.to("/charge")}) == 1
    clock.advance(PAYMENT_TIMEOUT)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(order_saga, saga_of(app), user=shopkeeper) == Ok("payment timed out")
    assert available(app, shopkeeper, stock) == 5


def test_no_shipment_in_time_refunds_and_releases(
    app: App, clock: FakeClock, shopkeeper: User, receiver: Receiver
) -> None:
    stock = stocked(app, shopkeeper)
    order = ordered(app, shopkeeper)
    app.run_worker(once=True)
    app.dispatch(settle_payment, SettlePayment(order, True), user=shopkeeper)
    app.run_worker(once=True)
    clock.advance(SHIPMENT_TIMEOUT - timedelta(seconds=1))
    assert app.run_worker(once=True)["resumed"] == 0
    clock.advance(seconds=1)
    counts = app.run_worker(once=True)
    assert (counts["resumed"], counts["sent"]) == (1, 1)  # the refund goes out in the same pass
    assert app.result(order_saga, saga_of(app), user=shopkeeper) == Ok("not shipped")
    assert charges(receiver, "/refund") == [{"order_id": str(order), "amount": "9.90"}]
    assert stock_events(app, shopkeeper, stock) == [StockReserved(order, 2), StockReleased(order, 2)]
    # A shipment confirmed after the saga gave up is refused: the order is closed.
    late = app.dispatch(confirm_shipment, ConfirmShipment(order, "TRK-1"), user=shopkeeper)
    assert isinstance(late, Failure) and late.code == "unprocessable"


def test_out_of_stock_charges_nothing(app: App, shopkeeper: User, receiver: Receiver) -> None:
    stock = stocked(app, shopkeeper, available=1)
    order = ordered(app, shopkeeper, qty=2)
    app.run_worker(once=True)
    assert app.result(order_saga, saga_of(app), user=shopkeeper) == Ok("out of stock")
    assert receiver.requests == []
    assert stock_events(app, shopkeeper, stock) == []
    assert app.query(order_status, OrderStatus(order), user=shopkeeper) == Ok("out of stock")


def test_a_shipment_for_another_order_does_not_wake_the_saga(app: App, shopkeeper: User) -> None:
    stocked(app, shopkeeper)
    first, second = ordered(app, shopkeeper, qty=1), ordered(app, shopkeeper, qty=1)
    app.run_worker(once=True)
    for order in (first, second):
        app.dispatch(settle_payment, SettlePayment(order, True), user=shopkeeper)
    app.run_worker(once=True)
    app.dispatch(confirm_shipment, ConfirmShipment(second, "TRK-2"), user=shopkeeper)
    app.run_worker(once=True)
    outcomes = {}
    for run in app.runs(workflow="shop:order-saga"):
        outcomes[run.steps["outcome"] if run.status == "completed" else None] = run.status
    assert outcomes == {"shipped": "completed", None: "suspended"}


# --- a worker that dies in the middle of a segment -------------------------------------------------


@pytest.mark.slow
def test_a_worker_killed_after_reserving_loses_nothing_and_reserves_once(
    app: App, db_url: str, shopkeeper: User, receiver: Receiver
) -> None:
    """A worker process appends the reservation and dies before its commit (``os._exit``,
    no clean-up); a fresh worker starts the saga again from the event and charges once."""
    stock = stocked(app, shopkeeper)
    order = ordered(app, shopkeeper)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SHOP_PAYMENTS_URL": receiver.base}
    died = subprocess.run(
        [sys.executable, str(WORKER), db_url, "crash"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert died.returncode == 137, died.stderr
    assert app.runs() == [] and receiver.requests == []
    assert stock_events(app, shopkeeper, stock) == []

    again = subprocess.run(
        [sys.executable, str(WORKER), db_url, "once"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["started"] == 1
    run = app.get_run(saga_of(app))
    assert run is not None and run.status == "suspended"
    assert stock_events(app, shopkeeper, stock) == [StockReserved(order, 2)]
    assert charges(receiver) == [{"order_id": str(order), "amount": "9.90"}]
    with app.engine.connect() as conn:
        kinds = conn.scalars(sa.select(events.c.type).order_by(events.c.position)).all()
    assert kinds.count("stock-reserved") == 1


def test_a_warehouse_faster_than_the_worker_still_ships(
    app: App, clock: FakeClock, shopkeeper: User, receiver: Receiver
) -> None:
    """The warehouse confirms before the saga has resumed from the payment: its event
    came before the saga waited for it."""
    stock = stocked(app, shopkeeper)
    order = ordered(app, shopkeeper)
    app.run_worker(once=True)
    app.dispatch(settle_payment, SettlePayment(order, True), user=shopkeeper)
    assert app.dispatch(confirm_shipment, ConfirmShipment(order, "TRK-1"), user=shopkeeper) == Ok("shipped")
    app.run_worker(once=True)
    clock.advance(SHIPMENT_TIMEOUT)
    app.run_worker(once=True)
    assert app.result(order_saga, saga_of(app), user=shopkeeper) == Ok("shipped")
    assert receiver.to("/refund") == []
    assert stock_events(app, shopkeeper, stock) == [StockReserved(order, 2)]


# --- many sagas, several workers --------------------------------------------------------------------


@pytest.mark.slow
def test_many_sagas_with_racing_workers_reserve_charge_and_ship_each_once(
    db_url: str, app_on: Callable[..., App], shopkeeper: User, receiver: Receiver, racers: list[subprocess.Popen[str]]
) -> None:
    """Twelve orders for eight units; worker processes (two on PostgreSQL, SQLite's one)
    on the real clock, while the provider and the warehouse answer as soon as they can.
    Eight orders ship, four are out of stock; each order is charged once; nothing is left
    reserved."""
    app = app_on([shop])  # the real clock, as the workers'
    stock = stocked(app, shopkeeper, available=8)
    orders = {ordered(app, shopkeeper, qty=1) for _ in range(12)}
    env = {**os.environ, "PYTHONPATH": str(REPO), "SHOP_PAYMENTS_URL": receiver.base}
    for _ in range(2 if db_url.startswith("postgresql") else 1):
        racers.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), db_url, "loop"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=REPO,
            )
        )
    for proc in racers:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    settled: set[uuid.UUID] = set()
    shipped: set[uuid.UUID] = set()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        runs = app.runs(workflow="shop:order-saga")
        if len(runs) == 12 and all(r.status == "completed" for r in runs):
            break
        for charge in charges(receiver):
            order = uuid.UUID(charge["order_id"])
            if order not in settled:
                assert isinstance(app.dispatch(settle_payment, SettlePayment(order, True), user=shopkeeper), Ok)
                settled.add(order)
        for order in settled - shipped:
            if app.query(order_status, OrderStatus(order), user=shopkeeper) == Ok("paid"):
                assert isinstance(app.dispatch(confirm_shipment, ConfirmShipment(order, "T"), user=shopkeeper), Ok)
                shipped.add(order)
        time.sleep(0.1)
    for proc in racers:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    runs = app.runs(workflow="shop:order-saga")
    assert [r.status for r in runs] == ["completed"] * 12, [(r.status, r.path, r.error) for r in runs]
    outcomes = sorted(str(app.result(order_saga, r.run_id, user=shopkeeper)) for r in runs)
    assert outcomes == sorted(["Ok(data='shipped')"] * 8 + ["Ok(data='out of stock')"] * 4)
    charged = [uuid.UUID(c["order_id"]) for c in charges(receiver)]
    assert len(charged) == len(set(charged)) == 8 and set(charged) <= orders
    assert available(app, shopkeeper, stock) == 0
    reserved = [e for e in stock_events(app, shopkeeper, stock) if isinstance(e, StockReserved)]
    assert len(reserved) == 8 and {e.order_id for e in reserved} == set(charged)
