"""Eventuous's Booking sample as an example app (examples/ports/booking.py), run end to end
with a FakeClock on SQLite and PostgreSQL: booking, payments (partial, full, overpaid, the
same payment twice), the two read models, the payment webhook to a real HTTP receiver, the
release of unpaid bookings the night before check-in (in the hotel's zone, across the
spring change), the nightly cron report (nothing due, two nights missed), a payment racing
the release on a real second connection, another tenant's ids, hostile JSON and
idempotency keys."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from _receiver import Receiver
from _support import failure_of, ok_data

from examples.ports.booking import (
    VALUE_TYPES,
    Booking,
    BookingCancelled,
    BookingFullyPaid,
    BookingOverpaid,
    BookingView,
    BookRoom,
    CancelBooking,
    MyBookings,
    PaymentRecorded,
    PaymentState,
    RecordPayment,
    RoomBooked,
    RoomNights,
    RoomQuery,
    book_room,
    bookings,
    bookings_by_room,
    cancel_booking,
    my_bookings,
    nightly_release_report,
    record_payment,
    release_time,
    release_unpaid,
)
from kumiko_typed import App, Failure, Ok, User
from kumiko_typed.testing import FakeClock

D = Decimal
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday; Amsterdam is UTC+1


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> App:
    monkeypatch.setenv("BOOKING_NOTIFY_URL", receiver.base)
    return app_on([bookings], clock=clock, value_types=VALUE_TYPES)


def _book(app: App, user: User, room: str, check_in: date, nights: int = 2, price: str = "200.00") -> uuid.UUID:
    booking_id: uuid.UUID = ok_data(
        app.dispatch(book_room, BookRoom(room, check_in, check_in + timedelta(days=nights), D(price)), user=user)
    )
    return booking_id


def _pay(
    app: App, user: User, booking: uuid.UUID, amount: str, payment: str | None = None
) -> Ok[PaymentState] | Failure:
    return app.dispatch(record_payment, RecordPayment(booking, payment or uuid.uuid4().hex, D(amount)), user=user)


def _status(app: App, user: User) -> dict[uuid.UUID, str]:
    return {v.booking_id: v.status for v in ok_data(app.query(my_bookings, MyBookings(), user=user))}


def _bodies(receiver: Receiver, path: str) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in receiver.to(path)]


def test_booking_paying_in_parts_and_overpaying(app: App, user: User, receiver: Receiver) -> None:
    booking = _book(app, user, "101", date(2026, 3, 10))
    assert _pay(app, user, booking, "50.00", "p-1") == Ok(PaymentState(booking, "booked", D(50), D(150), D(0), True))
    assert _pay(app, user, booking, "50.00", "p-1") == Ok(PaymentState(booking, "booked", D(50), D(150), D(0), False))
    assert _pay(app, user, booking, "150.00", "p-2") == Ok(PaymentState(booking, "paid", D(200), D(0), D(0), True))
    assert _pay(app, user, booking, "30.00", "p-3") == Ok(PaymentState(booking, "paid", D(230), D(-30), D(30), True))
    stream = ok_data(app.read_stream(Booking, booking, user=user))
    assert [type(e.event) for e in stream] == [
        RoomBooked,
        PaymentRecorded,
        PaymentRecorded,
        BookingFullyPaid,
        PaymentRecorded,
        BookingOverpaid,
    ]
    assert ok_data(app.rebuild_projection(Booking, user=user, verify=True)).matches
    assert ok_data(app.query(my_bookings, MyBookings(), user=user)) == [
        BookingView(booking, "101", date(2026, 3, 10), date(2026, 3, 12), D(200), D(-30), "paid")
    ]
    # The payment system is told of each recorded payment once, after the commit.
    assert app.run_worker(once=True)["sent"] == 3
    assert sorted((b["payment_id"], b["outstanding"], b["status"]) for b in _bodies(receiver, "/payments")) == [
        ("p-1", "150.00", "booked"),
        ("p-2", "0.00", "paid"),
        ("p-3", "-30.00", "paid"),
    ]
    assert len({r.headers["idempotency-key"] for r in receiver.to("/payments")}) == 3
    # Another booking cannot take that payment id; another currency is refused.
    other = _book(app, user, "102", date(2026, 3, 10))
    assert _pay(app, user, other, "1.00", "p-1") == Failure(
        "unprocessable", "that payment id is recorded for another booking"
    )
    usd = app.dispatch(record_payment, RecordPayment(other, "p-9", D(1), currency="USD"), user=user)
    assert usd == Failure("unprocessable", "the booking is paid in EUR")


def test_a_room_is_booked_once_per_night_until_cancelled(app: App, user: User, make_user: Callable[..., User]) -> None:
    first = _book(app, user, "201", date(2026, 3, 10), nights=3)
    taken = app.dispatch(book_room, BookRoom("201", date(2026, 3, 12), date(2026, 3, 14), D(100)), user=user)
    assert taken == Failure("unprocessable", "room 201 is not available for those nights")
    after = _book(app, user, "201", date(2026, 3, 13), nights=1)  # the check-out day is free
    other_hotel = _book(app, make_user(), "201", date(2026, 3, 10))  # another tenant's room 201
    assert app.dispatch(cancel_booking, CancelBooking(first), user=user) == Ok(D(0))
    assert app.dispatch(cancel_booking, CancelBooking(first), user=user) == Failure(
        "unprocessable", "the booking is cancelled already"
    )
    again = _book(app, user, "201", date(2026, 3, 11))
    assert ok_data(app.query(bookings_by_room, RoomQuery("201"), user=user)) == [
        RoomNights(first, date(2026, 3, 10), date(2026, 3, 13), "cancelled"),
        RoomNights(again, date(2026, 3, 11), date(2026, 3, 13), "booked"),
        RoomNights(after, date(2026, 3, 13), date(2026, 3, 14), "booked"),
    ]
    assert other_hotel not in _status(app, user)
    assert _pay(app, user, first, "10.00") == Failure("unprocessable", "the booking is cancelled")


def test_unpaid_bookings_are_released_the_night_before_check_in(
    app: App, clock: FakeClock, user: User, receiver: Receiver
) -> None:
    unpaid = _book(app, user, "301", date(2026, 3, 5))
    partly = _book(app, user, "302", date(2026, 3, 5))
    paid = _book(app, user, "303", date(2026, 3, 5))
    later = _book(app, user, "304", date(2026, 3, 6))
    assert isinstance(_pay(app, user, partly, "20.00"), Ok)
    assert isinstance(_pay(app, user, paid, "200.00"), Ok)
    assert app.run_worker(once=True)["started"] == 4  # one run per booking
    night = release_time(date(2026, 3, 5))
    assert night == datetime(2026, 3, 4, 1, 0, tzinfo=UTC)  # 02:00 in Amsterdam, in winter
    clock.now = night - timedelta(seconds=1)
    assert app.run_worker(once=True)["resumed"] == 0
    clock.now = night
    counts = app.run_worker(once=True)
    assert (counts["started"], counts["resumed"]) == (1, 3)  # the cron's report, and the three runs due
    assert _status(app, user) == {unpaid: "cancelled", partly: "cancelled", paid: "paid", later: "booked"}
    results = [
        ok_data(app.result(release_unpaid, r.run_id, user=user)) for r in app.runs(release_unpaid, status="completed")
    ]
    assert sorted(results) == ["cancelled", "cancelled", "paid"]
    cancelled = ok_data(app.read_stream(Booking, unpaid, user=user))[-1].event
    assert cancelled == BookingCancelled(unpaid, "not paid the night before check-in", night)
    # The report ran first in that pass: it lists both unpaid bookings arriving on the 5th.
    tonight, last_night = app.runs(nightly_release_report)  # newest first
    assert (tonight.status, tonight.steps["arriving"], len(tonight.steps["due"])) == ("completed", date(2026, 3, 5), 2)
    assert (last_night.steps["arriving"], last_night.steps["due"]) == (date(2026, 3, 4), [])
    app.run_worker(once=True)
    assert sorted(b["room_id"] for b in _bodies(receiver, "/front-desk/released")) == ["301", "302"]
    # A payment after the release is refused; the room is free again.
    assert _pay(app, user, unpaid, "200.00") == Failure("unprocessable", "the booking is cancelled")
    assert isinstance(
        app.dispatch(book_room, BookRoom("301", date(2026, 3, 5), date(2026, 3, 6), D(90)), user=user), Ok
    )


def test_a_last_minute_booking_is_not_released(app: App, clock: FakeClock, user: User) -> None:
    clock.now = datetime(2026, 3, 4, 22, 0, tzinfo=UTC)  # after 02:00 the night before
    booking = _book(app, user, "401", date(2026, 3, 5))
    assert app.run_worker(once=True)["started"] == 1
    (run,) = app.runs(release_unpaid)  # the release time had passed: it went on at once
    assert app.result(release_unpaid, run.run_id, user=user) == Ok("booked")
    assert _status(app, user) == {booking: "booked"}


def test_release_and_report_across_the_spring_change(app: App, clock: FakeClock, user: User) -> None:
    """Amsterdam moves from 02:00 to 03:00 on 29 March 2026: the release for a check-in on
    the 30th (02:00 that night, which does not exist) is at 03:00 summer time, 01:00 UTC,
    as the cron tick of that night; the night after, 02:00 summer time is 00:00 UTC."""
    clock.now = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
    assert app.run_worker(once=True)["started"] == 0  # the cron schedule starts here
    first = _book(app, user, "501", date(2026, 3, 30))
    second = _book(app, user, "502", date(2026, 3, 31))
    assert app.run_worker(once=True)["started"] == 2
    assert release_time(date(2026, 3, 30)).astimezone(UTC) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert release_time(date(2026, 3, 31)).astimezone(UTC) == datetime(2026, 3, 30, 0, 0, tzinfo=UTC)
    clock.now = datetime(2026, 3, 30, 0, 30, tzinfo=UTC)  # the worker was down for three nights
    counts = app.run_worker(once=True)
    assert (counts["started"], counts["resumed"]) == (3, 2)
    ticks = sorted(
        (r.steps["arriving"], len(r.steps["due"])) for r in app.runs(nightly_release_report, status="completed")
    )
    # Each missed tick reports its own night: the 28th's (nothing), the 29th's and the 30th's.
    assert ticks == [(date(2026, 3, 29), 0), (date(2026, 3, 30), 1), (date(2026, 3, 31), 1)]
    assert _status(app, user) == {first: "cancelled", second: "cancelled"}


def test_a_night_with_nothing_due_reports_nothing(app: App, clock: FakeClock, user: User, receiver: Receiver) -> None:
    _book(app, user, "601", date(2026, 4, 20))
    assert app.run_worker(once=True)["started"] == 1  # the booking's run; the cron starts
    clock.advance(days=2)
    assert app.run_worker(once=True)["started"] == 2  # two nights' reports
    assert [(r.status, r.steps["due"]) for r in app.runs(nightly_release_report)] == [("completed", [])] * 2
    assert receiver.to("/front-desk/released") == []


@pytest.mark.parametrize("first", ["payment", "release"])
def test_a_payment_racing_the_release_is_never_both_recorded_and_cancelled(
    app: App, clock: FakeClock, user: User, first: str, db_url: str
) -> None:
    """Both wait on a lock a second connection holds (the booking's row on PostgreSQL, the
    database's write lock on SQLite), then go at once: either the payment is recorded and
    the run finds the booking paid, or the booking is cancelled and the payment refused."""
    booking = _book(app, user, "701", date(2026, 3, 5))
    assert app.run_worker(once=True)["started"] == 1
    clock.now = release_time(date(2026, 3, 5))
    blocker = app.engine.raw_connection()
    cursor = blocker.cursor()
    if db_url.startswith("sqlite"):
        cursor.execute("BEGIN IMMEDIATE")
    else:
        cursor.execute("SELECT 1 FROM booking_booking WHERE id = %s FOR UPDATE", (booking,))
    answers: dict[str, object] = {}

    def pay() -> None:
        answers["payment"] = _pay(app, user, booking, "200.00")

    def release() -> None:
        answers["release"] = app.run_worker(once=True)

    threads = [threading.Thread(target=f) for f in ((pay, release) if first == "payment" else (release, pay))]
    for t in threads:
        t.start()
        time.sleep(0.3)
    blocker.rollback()
    blocker.close()
    for t in threads:
        t.join(30)
    payment = answers["payment"]
    events = [type(e.event) for e in ok_data(app.read_stream(Booking, booking, user=user))]
    (run,) = app.runs(release_unpaid)
    if isinstance(payment, Ok):
        assert events == [RoomBooked, PaymentRecorded, BookingFullyPaid]
        assert app.result(release_unpaid, run.run_id, user=user) == Ok("paid")
    else:
        assert payment == Failure("unprocessable", "the booking is cancelled")
        assert events == [RoomBooked, BookingCancelled]
    assert run.status == "completed"


def test_another_tenants_booking_ids_reach_nothing(app: App, user: User, make_user: Callable[..., User]) -> None:
    booking = _book(app, user, "801", date(2026, 3, 10))
    stranger = make_user()
    for answer in (
        _pay(app, stranger, booking, "200.00"),
        app.dispatch(cancel_booking, CancelBooking(booking), user=stranger),
        app.dispatch_json(
            "booking:booking:record-payment",
            {"booking_id": str(booking), "payment_id": "x", "amount": "1"},
            user=stranger,
        ),
    ):
        assert failure_of(answer).code == "not_found", answer
    assert ok_data(app.query(my_bookings, MyBookings(), user=stranger)) == []
    assert ok_data(app.query(bookings_by_room, RoomQuery("801"), user=stranger)) == []
    assert _status(app, user) == {booking: "booked"}


@pytest.mark.parametrize(
    ("amount", "message"),
    [
        ("1e400", "must be more than 0"),
        ("-5", "must be more than 0"),
        ("0.001", "in whole cents"),
        ("99999999999.99", "must be more than 0"),
        ("NaN", "expected a finite decimal"),
        ("Infinity", "expected a finite decimal"),
        ("-Infinity", "expected a finite decimal"),
        ("sNaN", "expected a finite decimal"),
    ],
)
def test_hostile_amounts_are_refused(app: App, user: User, amount: str, message: str) -> None:
    booking = _book(app, user, "901", date(2026, 3, 10))
    refused = failure_of(
        app.dispatch_json(
            "booking:booking:record-payment",
            {"booking_id": str(booking), "payment_id": "p", "amount": amount},
            user=user,
        ),
        "validation_error",
    )
    assert [d["path"] for d in refused.details] == ["$.amount"]
    assert message in refused.details[0]["message"]
    assert _status(app, user) == {booking: "booked"}


def test_hostile_json_numbers_and_text(app: App, user: User) -> None:
    booking = _book(app, user, "902", date(2026, 3, 10))

    def pay(body: dict[str, object]) -> Failure:
        return failure_of(
            app.dispatch_json("booking:booking:record-payment", {"booking_id": str(booking), **body}, user=user),
            "validation_error",
        )

    for number in (float("nan"), float("inf"), 1e308 * 10, 10**400):
        assert [d["path"] for d in pay({"payment_id": "p", "amount": number}).details] == ["$.amount"]
    assert [d["path"] for d in pay({"payment_id": "p\x00", "amount": "1.00"}).details] == ["$.payment_id"]
    assert [d["path"] for d in pay({"payment_id": "p", "amount": "1.00", "paid_by": "x" * 10**6}).details] == [
        "$.paid_by"
    ]
    room = failure_of(
        app.dispatch_json(
            "booking:room:book",
            {"room_id": "9\x00", "check_in": "2026-03-10", "check_out": "2026-03-09", "price": "1e-7"},
            user=user,
        ),
        "validation_error",
    )
    assert [d["path"] for d in room.details] == ["$.room_id"]  # attrs stops at the first validator
    assert _status(app, user) == {booking: "booked"}
    for check_in, check_out in (
        ("2026-03-01", "2026-03-02"),
        ("0001-01-01", "0001-01-02"),
        ("2028-03-02", "2028-03-03"),
    ):
        stay = {"room_id": "9", "check_in": check_in, "check_out": check_out, "price": "1"}
        assert app.dispatch_json("booking:room:book", stay, user=user) == Failure(
            "unprocessable", "check-in must be from today to two years ahead"
        )
    today = {"room_id": "9", "check_in": "2026-03-02", "check_out": "2026-03-03", "price": "1"}
    assert isinstance(app.dispatch_json("booking:room:book", today, user=user), Ok)


def test_a_payment_dispatched_again_under_its_key_is_recorded_once(app: App, user: User, receiver: Receiver) -> None:
    booking = _book(app, user, "1001", date(2026, 3, 10))
    payment = RecordPayment(booking, "p-1", D("80.00"))
    first = app.dispatch(record_payment, payment, user=user, idempotency_key="k-1")
    assert first == Ok(PaymentState(booking, "booked", D(80), D(120), D(0), True))
    assert app.dispatch(record_payment, payment, user=user, idempotency_key="k-1") == first
    changed = app.dispatch(record_payment, RecordPayment(booking, "p-1", D("81.00")), user=user, idempotency_key="k-1")
    assert failure_of(changed, "idempotency_conflict")
    assert (
        app.dispatch_json(
            "booking:booking:record-payment",
            {"booking_id": str(booking), "payment_id": "p-1", "amount": "80.00"},
            user=user,
            idempotency_key="k-1",
        )
        == first
    )
    assert app.run_worker(once=True)["sent"] == 1
    assert len(receiver.to("/payments")) == 1


def test_concurrent_payments_add_up_and_a_repeated_payment_id_counts_once(app: App, user: User) -> None:
    """Eight payments of 25.00 (two of them sent twice) from threads, each its own
    connection: the locked read makes them decide one at a time."""
    booking = _book(app, user, "1101", date(2026, 3, 10))
    ids = [f"p-{i}" for i in range(8)] + ["p-0", "p-1"]
    answers: list[object] = []
    lock = threading.Lock()

    def pay(payment: str) -> None:
        answer = _pay(app, user, booking, "25.00", payment)
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=pay, args=(p,)) for p in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(isinstance(a, Ok) for a in answers), answers
    assert sorted(a.data.recorded for a in answers if isinstance(a, Ok)) == [False] * 2 + [True] * 8
    events = [type(e.event) for e in ok_data(app.read_stream(Booking, booking, user=user))]
    assert (events.count(PaymentRecorded), events.count(BookingFullyPaid)) == (8, 1)
    (view,) = ok_data(app.query(my_bookings, MyBookings(), user=user))
    assert (view.outstanding, view.status) == (D(0), "paid")


def test_a_payment_while_the_workers_were_down_keeps_the_booking(app: App, clock: FakeClock, user: User) -> None:
    """The release time passed with no worker running; the guest paid after it, before a
    worker took the run: the run reads the booking as it is then, paid, and keeps it."""
    booking = _book(app, user, "1201", date(2026, 3, 5))
    assert app.run_worker(once=True)["started"] == 1
    clock.now = release_time(date(2026, 3, 5)) + timedelta(hours=5)
    assert isinstance(_pay(app, user, booking, "200.00"), Ok)
    app.run_worker(once=True)
    (run,) = app.runs(release_unpaid)
    assert app.result(release_unpaid, run.run_id, user=user) == Ok("paid")


def test_release_and_report_across_the_autumn_change(app: App, clock: FakeClock, user: User) -> None:
    """On 25 October 2026 Amsterdam's 02:00 comes twice: the release (fold 0) and the cron
    tick are both at its first occurrence, 00:00 UTC, once; a night later 02:00 is 01:00 UTC."""
    clock.now = datetime(2026, 10, 23, 12, 0, tzinfo=UTC)
    assert app.run_worker(once=True)["started"] == 0
    first = _book(app, user, "1301", date(2026, 10, 26))
    second = _book(app, user, "1302", date(2026, 10, 27))
    assert app.run_worker(once=True)["started"] == 2
    assert release_time(date(2026, 10, 26)).astimezone(UTC) == datetime(2026, 10, 25, 0, 0, tzinfo=UTC)
    assert release_time(date(2026, 10, 27)).astimezone(UTC) == datetime(2026, 10, 26, 1, 0, tzinfo=UTC)
    clock.now = datetime(2026, 10, 25, 0, 0, tzinfo=UTC)
    counts = app.run_worker(once=True)
    assert (counts["started"], counts["resumed"]) == (2, 1)  # the 24th's and the 25th's ticks
    assert _status(app, user) == {first: "cancelled", second: "booked"}
    clock.now = datetime(2026, 10, 26, 0, 59, tzinfo=UTC)  # the repeated hour brought no second tick
    assert app.run_worker(once=True)["started"] == 0
    clock.now = datetime(2026, 10, 26, 1, 0, tzinfo=UTC)
    counts = app.run_worker(once=True)
    assert (counts["started"], counts["resumed"]) == (1, 1)
    assert _status(app, user) == {first: "cancelled", second: "cancelled"}
    assert sorted((r.steps["arriving"], len(r.steps["due"])) for r in app.runs(nightly_release_report)) == [
        (date(2026, 10, 25), 0),
        (date(2026, 10, 26), 1),
        (date(2026, 10, 27), 1),
    ]


def test_a_booking_cancelled_early_ends_its_run_at_once(app: App, user: User) -> None:
    booking = _book(app, user, "1401", date(2026, 6, 1))
    assert app.run_worker(once=True)["started"] == 1
    assert app.dispatch(cancel_booking, CancelBooking(booking, "plans changed"), user=user) == Ok(D(0))
    assert app.run_worker(once=True)["resumed"] == 1  # months before the release night
    (run,) = app.runs(release_unpaid)
    assert app.result(release_unpaid, run.run_id, user=user) == Ok("cancelled")
    events = ok_data(app.read_stream(Booking, booking, user=user))
    assert [e.event for e in events][1:] == [BookingCancelled(booking, "plans changed", START)]


def test_concurrent_bookings_of_one_room_and_night_book_it_once(app: App, user: User) -> None:
    answers: list[object] = []
    lock = threading.Lock()

    def book(night: int) -> None:
        stay = BookRoom("1501", date(2026, 3, 10 + night % 2), date(2026, 3, 11 + night % 2), D(90))
        answer = app.dispatch(book_room, stay, user=user)
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=book, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(isinstance(a, Ok) for a in answers) == 2, answers  # one per night
    assert [a for a in answers if not isinstance(a, Ok)] == [
        Failure("unprocessable", "room 1501 is not available for those nights")
    ] * 4
    assert len(ok_data(app.query(bookings_by_room, RoomQuery("1501"), user=user))) == 2
