"""Axon's bike rental, ported (examples/ports/bike_rental.py), on SQLite and PostgreSQL: the
payment provider is a real HTTP receiver on 127.0.0.1 that answers through
``payment:settle``; the saga waits for that answer, or gives up after its timeout."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from _receiver import Receiver

from examples.ports.bike_rental import (
    PAYMENT_TIMEOUT,
    Bike,
    BikeInUse,
    BikeRegistered,
    BikeRequested,
    BikeReturned,
    BikeStatus,
    BikeView,
    FindBikes,
    RegisterBike,
    RequestBike,
    RequestRejected,
    ReturnBike,
    SettlePayment,
    bike_status,
    find_bikes,
    payment_saga,
    register_bike,
    rental,
    request_bike,
    return_bike,
    settle_payment,
)
from kumiko_typed import App, Failure, Ok, User
from kumiko_typed.testing import FakeClock

START = datetime(2026, 4, 1, 8, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> App:
    monkeypatch.setenv("RENTAL_PAYMENTS_URL", receiver.base)
    return app_on([rental], clock=clock)


@pytest.fixture
def staff() -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles={"PaymentProvider"})


def registered(app: App, user: User, location: str = "Amsterdam", bike_type: str = "city") -> uuid.UUID:
    result = app.dispatch(register_bike, RegisterBike(bike_type, location), user=user)
    assert isinstance(result, Ok), result
    bike: uuid.UUID = result.data
    return bike


def requested(app: App, user: User, bike: uuid.UUID, renter: str = "alice") -> uuid.UUID:
    result = app.dispatch(request_bike, RequestBike(bike, renter), user=user)
    assert isinstance(result, Ok), result
    reference: uuid.UUID = result.data
    return reference


def status(app: App, user: User, bike: uuid.UUID) -> BikeView:
    result = app.query(bike_status, BikeStatus(bike), user=user)
    assert isinstance(result, Ok), result
    return result.data


def events(app: App, user: User, bike: uuid.UUID) -> list[object]:
    stream = app.read_stream(Bike, bike, user=user)
    assert isinstance(stream, Ok), stream
    return [e.event for e in stream.data]


def saga_result(app: App, user: User) -> object:
    (run,) = app.runs(workflow="rental:payment-saga")
    return app.result(payment_saga, run.run_id, user=user)


def test_a_confirmed_payment_puts_the_bike_in_use_and_it_is_returned_elsewhere(
    app: App, staff: User, receiver: Receiver
) -> None:
    bike = registered(app, staff)
    reference = requested(app, staff, bike)
    assert status(app, staff, bike).status == "requested"
    counts = app.run_worker(once=True)  # the saga starts, prepares the payment, calls the provider
    assert (counts["started"], counts["sent"]) == (1, 1)
    (call,) = receiver.to("/prepare")
    assert json.loads(call.body) == {"reference": str(reference), "amount": "4.50", "renter": "alice"}
    assert call.headers["idempotency-key"] == str(app.outbox()[0].id)

    assert app.dispatch(settle_payment, SettlePayment(reference, True), user=staff) == Ok(True)
    assert app.run_worker(once=True)["resumed"] == 1
    assert saga_result(app, staff) == Ok("in use")
    assert status(app, staff, bike) == BikeView(bike, "city", "Amsterdam", "in_use", "alice")

    assert app.dispatch(return_bike, ReturnBike(bike, "alice", "Utrecht"), user=staff) == Ok("Utrecht")
    assert status(app, staff, bike) == BikeView(bike, "city", "Utrecht", "available", None)
    assert events(app, staff, bike) == [
        BikeRegistered("city", "Amsterdam"),
        BikeRequested(bike, "alice", reference),
        BikeInUse("alice"),
        BikeReturned("Utrecht"),
    ]
    assert app.query(find_bikes, FindBikes("Utrecht"), user=staff) == Ok([status(app, staff, bike)])
    assert app.query(find_bikes, FindBikes("Amsterdam"), user=staff) == Ok([])


def test_a_rejected_payment_frees_the_bike(app: App, staff: User) -> None:
    bike = registered(app, staff)
    reference = requested(app, staff, bike)
    app.run_worker(once=True)
    app.dispatch(settle_payment, SettlePayment(reference, False), user=staff)
    app.run_worker(once=True)
    assert saga_result(app, staff) == Ok("rejected")
    assert status(app, staff, bike).status == "available"
    assert events(app, staff, bike)[-1] == RequestRejected(reference)
    # The provider cannot change its mind: the payment is settled.
    again = app.dispatch(settle_payment, SettlePayment(reference, True), user=staff)
    assert again == Failure("unprocessable", "the payment is rejected already")


def test_no_answer_in_time_rejects_the_request_and_a_late_answer_changes_nothing(
    app: App, clock: FakeClock, staff: User
) -> None:
    bike = registered(app, staff)
    reference = requested(app, staff, bike)
    app.run_worker(once=True)
    clock.advance(PAYMENT_TIMEOUT - timedelta(seconds=1))
    assert app.run_worker(once=True)["resumed"] == 0
    clock.advance(seconds=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert saga_result(app, staff) == Ok("rejected")
    assert status(app, staff, bike).status == "available"

    # The answer arrives after the saga gave up: the payment expired, nothing is charged.
    late = app.dispatch(settle_payment, SettlePayment(reference, True), user=staff)
    assert late == Failure("unprocessable", "the payment is expired already")
    assert app.run_worker(once=True)["resumed"] == 0
    assert status(app, staff, bike).status == "available"


def test_an_answer_committed_as_the_wait_times_out_is_read_not_lost(app: App, clock: FakeClock, staff: User) -> None:
    """The provider's answer commits after the timeout is due but before a worker resumes
    the run: the run reads the confirmed payment and puts the bike in use."""
    bike = registered(app, staff)
    reference = requested(app, staff, bike)
    app.run_worker(once=True)
    clock.advance(PAYMENT_TIMEOUT + timedelta(minutes=1))
    assert app.dispatch(settle_payment, SettlePayment(reference, True), user=staff) == Ok(True)
    assert app.run_worker(once=True)["resumed"] == 1
    assert saga_result(app, staff) == Ok("in use")
    assert status(app, staff, bike).status == "in_use"


def test_a_requested_bike_is_refused_to_a_second_renter(app: App, staff: User) -> None:
    bike = registered(app, staff)
    requested(app, staff, bike, renter="alice")
    second = app.dispatch(request_bike, RequestBike(bike, "bob"), user=staff)
    assert second == Failure(
        "unprocessable", "the bike is not available", [{"path": "$.bike_id", "message": "requested"}]
    )
    app.run_worker(once=True)
    assert len(app.runs(workflow="rental:payment-saga")) == 1


def test_renters_racing_for_one_bike_get_one_request_through(app: App, staff: User) -> None:
    """Eight threads request the same bike at once: one request is taken; each other one is
    refused as not available or as a conflict, and starts no saga."""
    bike = registered(app, staff)
    results: list[object] = []
    barrier = threading.Barrier(8)

    def ask(renter: str) -> None:
        barrier.wait()
        results.append(app.dispatch(request_bike, RequestBike(bike, renter), user=staff))

    threads = [threading.Thread(target=ask, args=(f"renter-{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    taken = [r for r in results if isinstance(r, Ok)]
    refused = [r for r in results if isinstance(r, Failure)]
    assert (len(taken), len(refused)) == (1, 7)
    assert {r.code for r in refused} <= {"unprocessable", "version_conflict"}
    app.run_worker(once=True)
    (run,) = app.runs(workflow="rental:payment-saga")
    assert [e for e in events(app, staff, bike) if isinstance(e, BikeRequested)] == [
        BikeRequested(bike, status(app, staff, bike).renter or "", taken[0].data)
    ]
    assert run.status == "suspended"


def test_only_the_renter_returns_the_bike(app: App, staff: User) -> None:
    bike = registered(app, staff)
    reference = requested(app, staff, bike)
    app.run_worker(once=True)
    app.dispatch(settle_payment, SettlePayment(reference, True), user=staff)
    app.run_worker(once=True)
    refused = app.dispatch(return_bike, ReturnBike(bike, "mallory", "Utrecht"), user=staff)
    assert refused == Failure(
        "unprocessable", "the bike is not in use by this renter", [{"path": "$.renter", "message": "not renting"}]
    )
    assert status(app, staff, bike).location == "Amsterdam"


def test_another_tenant_neither_sees_nor_requests_nor_pays_for_the_bike(app: App, staff: User) -> None:
    bike = registered(app, staff)
    reference = requested(app, staff, bike)
    app.run_worker(once=True)
    other = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles={"PaymentProvider"})
    for result in (
        app.query(bike_status, BikeStatus(bike), user=other),
        app.dispatch(request_bike, RequestBike(bike, "eve"), user=other),
        app.dispatch(settle_payment, SettlePayment(reference, True), user=other),
    ):
        assert isinstance(result, Failure) and result.code == "not_found", result
    assert app.query(find_bikes, FindBikes("Amsterdam"), user=other) == Ok([])
    assert app.run_worker(once=True)["resumed"] == 0
    assert status(app, staff, bike).status == "requested"


def test_a_payment_answer_needs_the_provider_role(app: App, staff: User) -> None:
    bike = registered(app, staff)
    reference = requested(app, staff, bike)
    app.run_worker(once=True)
    renter = User(id=uuid.uuid4(), tenant_id=staff.tenant_id)
    refused = app.dispatch(settle_payment, SettlePayment(reference, True), user=renter)
    assert isinstance(refused, Failure) and refused.code == "access_denied"
    assert app.run_worker(once=True)["resumed"] == 0


def test_empty_text_from_json_is_refused_at_its_field(app: App, staff: User) -> None:
    refused = app.dispatch_json("rental:bike:register", {"bike_type": "city", "location": "  "}, user=staff)
    assert isinstance(refused, Failure) and refused.details == [
        {"path": "$.location", "message": "location must not be empty"}
    ]
    assert app.query(find_bikes, FindBikes("  "), user=staff) == Ok([])
