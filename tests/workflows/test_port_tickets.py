"""Restate's ticket reservation as an example app (examples/ports/tickets.py), run end to end
on SQLite and PostgreSQL: a hold paid (a mail, a webhook to a real receiver on 127.0.0.1),
expired or cancelled; a payment at, just before and after the expiry, twice, or with an
idempotency key; cancel after confirm; another tenant's ids; hostile and oversized input;
two buyers racing for the last seat on their own connections; a worker killed in the middle
of a sale; and many holds expiring at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TypeVar

import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import failure_of, ok_data

from examples.ports.tickets import (
    HOLD_FOR,
    MAX_HELD,
    Availability,
    BuyerAnswered,
    Cancel,
    Held,
    HoldSeats,
    Pay,
    Reservation,
    ReservationConfirmed,
    ReservationHeld,
    ReservationId,
    ReservationReleased,
    ReservationView,
    ScheduleShow,
    Seat,
    SeatsHeld,
    SeatsReleased,
    SeatsSold,
    Show,
    ShowId,
    ShowScheduled,
    availability,
    cancel,
    hold,
    hold_seats,
    pay,
    reservation_status,
    schedule_show,
    tickets,
)
from kumiko_typed import App, Failure, Ok, User
from kumiko_typed.testing import FakeClock, MemoryMail

D = Decimal
START = datetime(2026, 3, 2, 19, 0, tzinfo=UTC)
TENANT = uuid.uuid4()
ADA = User(id=uuid.uuid4(), tenant_id=TENANT)
BOB = User(id=uuid.uuid4(), tenant_id=TENANT)
STRANGER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "_tickets_worker.py"
T = TypeVar("T")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def mail() -> MemoryMail:
    return MemoryMail()


@pytest.fixture
def app(
    app_on: Callable[..., App], clock: FakeClock, mail: MemoryMail, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> App:
    monkeypatch.setenv("TICKETS_BOX_OFFICE_URL", receiver.base)
    return app_on([tickets], clock=clock, mail=mail)


def _show(app: App, capacity: int = 10, price: str = "25.00") -> uuid.UUID:
    show: uuid.UUID = ok_data(app.dispatch(schedule_show, ScheduleShow("Hamlet", capacity, D(price)), user=ADA))
    return show


def _hold(app: App, show: uuid.UUID, seats: list[int], user: User = ADA) -> Held:
    held: Held = ok_data(app.dispatch(hold_seats, HoldSeats(show, "ada@example.com", seats), user=user))
    return held


def _drain(app: App) -> int:
    """Worker passes until one finds nothing to do; how many did something."""
    busy = 0
    while any(app.run_worker(once=True).values()):
        busy += 1
    return busy


def _seats(app: App, show: uuid.UUID, user: User = ADA) -> Availability:
    seen: Availability = ok_data(app.query(availability, ShowId(show), user=user))
    return seen


def _status(app: App, reservation: uuid.UUID, user: User = ADA) -> ReservationView:
    view: ReservationView = ok_data(app.query(reservation_status, ReservationId(reservation), user=user))
    return view


def _events(app: App, entity: type[object], id: uuid.UUID) -> list[type[object]]:
    return [type(e.event) for e in ok_data(app.read_stream(entity, id, user=ADA))]


def _seat_rows(app: App) -> list[tuple[int, str]]:
    """Every seat row as stored, of any tenant and show."""
    with app.engine.connect() as conn:
        return [(n, s) for n, s in conn.execute(sa.select(Seat.number, Seat.status).order_by(Seat.number))]


# --- the three endings of a hold --------------------------------------------------------------


def test_a_paid_hold_sells_its_seats_mails_the_ticket_and_tells_the_box_office(
    app: App, mail: MemoryMail, receiver: Receiver
) -> None:
    show = _show(app)
    held = _hold(app, show, [4, 3])
    assert held == Held(held.reservation_id, D("50.00"), START + HOLD_FOR)
    assert _seats(app, show) == Availability(show, "Hamlet", 10, 8, 2, 0, [1, 2, 5, 6, 7, 8, 9, 10])
    assert app.run_worker(once=True)["started"] == 1
    assert app.dispatch(pay, Pay(held.reservation_id, "pay-1", D("50.00")), user=ADA) == Ok(held.reservation_id)
    _drain(app)
    assert _seats(app, show) == Availability(show, "Hamlet", 10, 8, 0, 2, [1, 2, 5, 6, 7, 8, 9, 10])
    assert _status(app, held.reservation_id) == ReservationView(
        held.reservation_id, show, "confirmed", [3, 4], D("50.00"), START + HOLD_FOR
    )
    assert _events(app, Reservation, held.reservation_id) == [ReservationHeld, BuyerAnswered, ReservationConfirmed]
    assert _events(app, Show, show) == [ShowScheduled, SeatsHeld, SeatsSold]
    ((ticket),) = mail.sent
    assert ticket.subject == "Your tickets" and "seats 3, 4, 50.00 paid" in ticket.body
    (sold,) = receiver.to("/sold")
    assert json.loads(sold.body) == {"reservation_id": str(held.reservation_id), "show_id": str(show), "seats": [3, 4]}
    (run,) = app.runs(hold)
    assert (run.status, app.result(hold, run.run_id, user=ADA)) == ("completed", Ok("confirmed"))


def test_an_unpaid_hold_expires_and_its_seats_go_back_on_sale(app: App, clock: FakeClock, mail: MemoryMail) -> None:
    show = _show(app)
    held = _hold(app, show, [1, 2])
    _drain(app)
    clock.advance(HOLD_FOR - timedelta(microseconds=1))
    _drain(app)
    assert _status(app, held.reservation_id).status == "held"
    clock.advance(microseconds=1)
    _drain(app)
    assert _status(app, held.reservation_id).status == "expired"
    assert _seats(app, show) == Availability(show, "Hamlet", 10, 10, 0, 0, list(range(1, 11)))
    assert _events(app, Show, show) == [ShowScheduled, SeatsHeld, SeatsReleased]
    assert [m.subject for m in mail.sent] == ["Your reservation expired"]
    assert app.dispatch(pay, Pay(held.reservation_id, "late", D("50.00")), user=ADA) == Failure(
        "unprocessable", "the reservation is expired"
    )
    assert _hold(app, show, [1, 2], user=BOB)  # on sale again


def test_a_cancelled_hold_releases_its_seats_at_the_next_pass_and_cancelling_again_changes_nothing(
    app: App, mail: MemoryMail
) -> None:
    show = _show(app)
    held = _hold(app, show, [5])
    _drain(app)
    assert app.dispatch(cancel, Cancel(held.reservation_id), user=ADA) == Ok(held.reservation_id)
    assert app.dispatch(cancel, Cancel(held.reservation_id), user=ADA) == Ok(held.reservation_id)
    _drain(app)
    assert _status(app, held.reservation_id).status == "cancelled"
    assert app.dispatch(cancel, Cancel(held.reservation_id), user=ADA) == Ok(held.reservation_id)
    assert _seats(app, show).available == 10
    assert _events(app, Reservation, held.reservation_id) == [ReservationHeld, BuyerAnswered, ReservationReleased]
    assert [m.subject for m in mail.sent] == ["Your reservation cancelled"]
    assert app.dispatch(pay, Pay(held.reservation_id, "p", D("25.00")), user=ADA) == Failure(
        "unprocessable", "the reservation is cancelled"
    )


def test_a_paid_or_confirmed_reservation_is_not_cancelled(app: App) -> None:
    show = _show(app)
    held = _hold(app, show, [5])
    ok_data(app.dispatch(pay, Pay(held.reservation_id, "p", D("25.00")), user=ADA))
    refusal = Failure("unprocessable", "the reservation is paid: ask for a refund instead")
    assert app.dispatch(cancel, Cancel(held.reservation_id), user=ADA) == refusal
    _drain(app)
    assert app.dispatch(cancel, Cancel(held.reservation_id), user=ADA) == Failure(
        "unprocessable", "the reservation is confirmed: ask for a refund instead"
    )
    assert _seats(app, show).sold == 1


# --- the payment and the expiry ---------------------------------------------------------------


def test_a_payment_at_the_expiry_is_refused_and_one_just_before_it_sells_even_when_read_after_it(
    app: App, clock: FakeClock
) -> None:
    show = _show(app)
    late, early = _hold(app, show, [1]), _hold(app, show, [2])
    _drain(app)
    clock.advance(HOLD_FOR - timedelta(microseconds=1))
    assert app.dispatch(pay, Pay(early.reservation_id, "early", D("25.00")), user=ADA) == Ok(early.reservation_id)
    clock.advance(microseconds=1)  # the expiry: the workers had not read the payment yet
    assert app.dispatch(pay, Pay(late.reservation_id, "late", D("25.00")), user=ADA) == Failure(
        "unprocessable", "the hold has expired"
    )
    clock.advance(minutes=5)
    _drain(app)
    assert _status(app, early.reservation_id).status == "confirmed"
    assert _status(app, late.reservation_id).status == "expired"
    assert _seats(app, show) == Availability(show, "Hamlet", 10, 9, 0, 1, [1, *range(3, 11)])


def test_the_same_payment_twice_sells_once_and_another_payment_is_refused(app: App, receiver: Receiver) -> None:
    show = _show(app)
    held = _hold(app, show, [7, 8])
    payment = Pay(held.reservation_id, "pay-7", D("50.00"))
    assert app.dispatch(pay, payment, user=ADA) == Ok(held.reservation_id)
    assert app.dispatch(pay, payment, user=ADA) == Ok(held.reservation_id)
    _drain(app)
    assert app.dispatch(pay, payment, user=ADA) == Ok(held.reservation_id)
    assert app.dispatch(pay, Pay(held.reservation_id, "pay-8", D("50.00")), user=ADA) == Failure(
        "unprocessable", "the reservation is confirmed"
    )
    assert _events(app, Reservation, held.reservation_id) == [ReservationHeld, BuyerAnswered, ReservationConfirmed]
    assert len(receiver.to("/sold")) == 1


def test_a_hold_repeated_with_its_idempotency_key_holds_once(app: App) -> None:
    show = _show(app)
    first = app.dispatch(hold_seats, HoldSeats(show, "ada@example.com", [1]), user=ADA, idempotency_key="h-1")
    again = app.dispatch(hold_seats, HoldSeats(show, "ada@example.com", [1]), user=ADA, idempotency_key="h-1")
    assert isinstance(first, Ok) and again == first
    assert _seats(app, show).held == 1
    assert app.run_worker(once=True)["started"] == 1


def test_a_payment_repeated_with_its_idempotency_key_answers_as_the_first(app: App) -> None:
    show = _show(app)
    held = _hold(app, show, [1])
    first = app.dispatch(pay, Pay(held.reservation_id, "p-1", D("25.00")), user=ADA, idempotency_key="cb-1")
    assert first == Ok(held.reservation_id)
    again = app.dispatch(pay, Pay(held.reservation_id, "p-1", D("25.00")), user=ADA, idempotency_key="cb-1")
    assert again == first
    other = app.dispatch(pay, Pay(held.reservation_id, "p-2", D("25.00")), user=ADA, idempotency_key="cb-1")
    assert failure_of(other, "idempotency_conflict")
    assert _events(app, Reservation, held.reservation_id) == [ReservationHeld, BuyerAnswered]


def test_a_payment_of_another_amount_is_refused(app: App) -> None:
    show = _show(app)
    held = _hold(app, show, [1, 2])
    for amount in ("25.00", "-50.00", "50.01", "0"):
        assert app.dispatch(pay, Pay(held.reservation_id, "p", D(amount)), user=ADA) == Failure(
            "unprocessable", "the reservation costs 50.00"
        )
    assert app.dispatch(pay, Pay(held.reservation_id, "p", D("50.000")), user=ADA) == Ok(held.reservation_id)


# --- seats, limits and tenants -----------------------------------------------------------------


def test_a_taken_seat_is_refused_by_number_and_a_seat_the_show_has_not_too(app: App) -> None:
    show = _show(app, capacity=10)
    _hold(app, show, [3, 4])
    assert app.dispatch(hold_seats, HoldSeats(show, "bob@example.com", [5, 4, 3]), user=BOB) == Failure(
        "unprocessable", "seats taken: 3, 4"
    )
    assert app.dispatch(hold_seats, HoldSeats(show, "bob@example.com", [10, 11]), user=BOB) == Failure(
        "unprocessable", "the show has seats 1 to 10"
    )
    assert _seats(app, show).held == 2


def test_a_buyer_holds_at_most_max_held_seats_of_a_show_and_a_sale_frees_the_quota(app: App) -> None:
    show = _show(app, capacity=20)
    first = _hold(app, show, [1, 2, 3, 4])
    refusal = Failure("unprocessable", f"a buyer may hold at most {MAX_HELD} seats of a show; you hold 4")
    assert app.dispatch(hold_seats, HoldSeats(show, "ada@example.com", [5, 6, 7]), user=ADA) == refusal
    assert _hold(app, show, [5, 6])  # exactly MAX_HELD
    assert _hold(app, show, [7], user=BOB)  # another buyer's quota is his own
    ok_data(app.dispatch(pay, Pay(first.reservation_id, "p", D("100.00")), user=ADA))
    _drain(app)
    assert _hold(app, show, [8, 9, 10, 11])  # the sold four no longer count


def test_another_tenants_show_and_reservation_look_like_none(app: App) -> None:
    show = _show(app)
    held = _hold(app, show, [1])
    unknown = uuid.uuid4()
    for ask in (
        lambda id: app.query(reservation_status, ReservationId(id), user=STRANGER),
        lambda id: app.dispatch(pay, Pay(id, "p", D("25.00")), user=STRANGER),
        lambda id: app.dispatch(cancel, Cancel(id), user=STRANGER),
    ):
        assert ask(held.reservation_id) == ask(unknown)
        failure_of(ask(held.reservation_id), "not_found")
    for ask_show in (
        lambda id: app.query(availability, ShowId(id), user=STRANGER),
        lambda id: app.dispatch(hold_seats, HoldSeats(id, "x@example.com", [2]), user=STRANGER),
    ):
        assert ask_show(show) == ask_show(unknown)
        failure_of(ask_show(show), "not_found")
    _drain(app)
    assert _status(app, held.reservation_id).status == "held" and _seats(app, show).held == 1


@pytest.mark.parametrize(
    ("name", "data", "path"),
    [
        ("show:schedule", {}, "$.title"),
        ("show:schedule", {"title": "", "capacity": 3, "price": "1"}, "$.title"),
        ("show:schedule", {"title": "x" * 201, "capacity": 3, "price": "1"}, "$.title"),
        ("show:schedule", {"title": "x", "capacity": True, "price": "1"}, "$.capacity"),
        ("show:schedule", {"title": "x", "capacity": -1, "price": "1"}, "$.capacity"),
        ("show:schedule", {"title": "x", "capacity": 10**30, "price": "1"}, "$.capacity"),
        ("show:schedule", {"title": "x", "capacity": 3, "price": "NaN"}, "$.price"),
        ("show:schedule", {"title": "x", "capacity": 3, "price": float("nan")}, "$.price"),
        ("show:schedule", {"title": "x", "capacity": 3, "price": "1e999999999"}, "$.price"),
        ("show:schedule", {"title": "x", "capacity": 3, "price": "0.001"}, "$.price"),
        ("show:schedule", {"title": "a\x00b", "capacity": 3, "price": "1"}, "$.title"),
        ("show:schedule", {"title": "\ud800", "capacity": 3, "price": "1"}, "$.title"),
        ("reservation:hold", {"email": "a@b.c", "seats": []}, "$.seats"),
        ("reservation:hold", {"email": "a@b.c", "seats": [0]}, "$.seats"),
        ("reservation:hold", {"email": "a@b.c", "seats": [-1]}, "$.seats"),
        ("reservation:hold", {"email": "a@b.c", "seats": [2**70]}, "$.seats"),
        ("reservation:hold", {"email": "a@b.c", "seats": [1.5]}, "$.seats[0]"),
        ("reservation:hold", {"email": "a@b.c", "seats": [float("nan")]}, "$.seats[0]"),
        ("reservation:hold", {"email": "a@b.c", "seats": [1, 1]}, "$.seats"),
        ("reservation:hold", {"email": "a@b.c", "seats": list(range(1, 100_001))}, "$.seats"),
        ("reservation:hold", {"email": "no-at-sign", "seats": [1]}, "$.email"),
        ("reservation:hold", {"email": "a@b.c" + "x" * 300, "seats": [1]}, "$.email"),
        # Addresses the run's mail would refuse when the hold ends (mail_address refuses them now).
        ("reservation:hold", {"email": "a\x01@b.c", "seats": [1]}, "$.email"),
        ("reservation:hold", {"email": "a@b.c\x7f", "seats": [1]}, "$.email"),
        ("reservation:hold", {"email": "ada@example.com,boss", "seats": [1]}, "$.email"),
        ("reservation:hold", {"email": "a(b@c.d", "seats": [1]}, "$.email"),
        ("reservation:hold", {"email": "=?utf-8?q?a?=@b.c", "seats": [1]}, "$.email"),
        ("reservation:pay", {"payment_id": "p", "amount": "NaN"}, "$.amount"),
        ("reservation:pay", {"payment_id": "p", "amount": "sNaN"}, "$.amount"),
        ("reservation:pay", {"payment_id": "p" * 101, "amount": "25"}, "$.payment_id"),
        ("reservation:pay", {"payment_id": "", "amount": "25"}, "$.payment_id"),
    ],
)
def test_hostile_input_is_refused_at_its_field_and_writes_nothing(
    app: App, name: str, data: dict[str, object], path: str
) -> None:
    show = _show(app)
    held = _hold(app, show, [9])
    data = {"show_id": str(show), "reservation_id": str(held.reservation_id), **data}
    refused = failure_of(app.dispatch_json(f"tickets:{name}", data, user=ADA), "validation_error")
    assert refused.details is not None and path in [d["path"] for d in refused.details], refused
    _drain(app)
    assert _seats(app, show).held == 1 and _status(app, held.reservation_id).status == "held"


def test_unicode_titles_and_addresses_go_through_unchanged(app: App, mail: MemoryMail, clock: FakeClock) -> None:
    title = "Ünïcødé 🎭 \u202e Гамлет " + "漢" * 150
    show = ok_data(app.dispatch_json("tickets:show:schedule", {"title": title, "capacity": 3, "price": "1"}, user=ADA))
    held = ok_data(
        app.dispatch_json("tickets:reservation:hold", {"show_id": str(show), "email": "ü@ß.例", "seats": [3]}, user=ADA)
    )
    assert _seats(app, uuid.UUID(str(show))).title == title
    _drain(app)
    clock.advance(HOLD_FOR)
    _drain(app)
    assert [(m.to, m.subject) for m in mail.sent] == [(("ü@ß.例",), "Your reservation expired")]
    assert _status(app, held.reservation_id).status == "expired"


# --- races and faults --------------------------------------------------------------------------


def test_two_buyers_racing_for_the_last_seat_on_their_own_connections_get_it_once(app: App) -> None:
    show = _show(app, capacity=3)
    _hold(app, show, [1, 2])
    barrier = threading.Barrier(4)
    answers: list[Ok[Held] | Failure] = []
    lock = threading.Lock()

    def buy(user: User) -> None:
        barrier.wait()
        answer = app.dispatch(hold_seats, HoldSeats(show, "x@example.com", [3]), user=user)
        with lock:
            answers.append(answer)

    buyers = [User(id=uuid.uuid4(), tenant_id=TENANT) for _ in range(4)]
    threads = [threading.Thread(target=buy, args=(u,)) for u in buyers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [a for a in answers if isinstance(a, Ok)]
    assert len(answers) == 4 and len(won) == 1, answers
    # The show's row is read locked: the losers read the winner's seat, on both databases.
    assert [a for a in answers if isinstance(a, Failure)] == [Failure("unprocessable", "seats taken: 3")] * 3
    assert _seats(app, show).held == 3 and _seat_rows(app) == [(1, "held"), (2, "held"), (3, "held")]


def test_many_holds_expiring_at_once_release_every_seat_once(app: App, clock: FakeClock, mail: MemoryMail) -> None:
    show = _show(app, capacity=200)
    buyers = [User(id=uuid.uuid4(), tenant_id=TENANT) for _ in range(60)]
    for number, buyer in enumerate(buyers):
        _hold(app, show, [2 * number + 1, 2 * number + 2], user=buyer)
    _drain(app)
    clock.advance(HOLD_FOR)
    _drain(app)
    assert _seats(app, show) == Availability(show, "Hamlet", 200, 200, 0, 0, list(range(1, 201)))
    assert {r.status for r in app.runs(hold)} == {"completed"} and len(app.runs(hold)) == 60
    assert len(mail.sent) == 60 and _seat_rows(app) == []


def test_many_holds_expiring_at_once_worked_by_three_workers_release_every_seat_once(
    app: App, clock: FakeClock
) -> None:
    show = _show(app, capacity=100)
    buyers = [User(id=uuid.uuid4(), tenant_id=TENANT) for _ in range(30)]
    held = [_hold(app, show, [number + 1], user=buyer) for number, buyer in enumerate(buyers)]
    for h in held[:10]:
        ok_data(app.dispatch(pay, Pay(h.reservation_id, f"p{h.reservation_id}", D("25.00")), user=ADA))
    _drain(app)
    clock.advance(HOLD_FOR)

    def work() -> None:
        for _ in range(8):
            app.run_worker(once=True)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    _drain(app)
    assert {r.status for r in app.runs(hold)} == {"completed"}
    seen = _seats(app, show)
    assert (seen.available, seen.held, seen.sold) == (90, 0, 10)
    assert _seat_rows(app) == [(n, "sold") for n in range(1, 11)]
    assert _events(app, Show, show).count(SeatsReleased) == 20


@pytest.mark.slow
def test_a_worker_killed_in_the_middle_of_a_sale_sells_once_when_another_resumes(
    app: App, db_url: str, mail: MemoryMail, receiver: Receiver
) -> None:
    show = _show(app)
    held = _hold(app, show, [1, 2])
    _drain(app)
    ok_data(app.dispatch(pay, Pay(held.reservation_id, "p", D("50.00")), user=ADA))
    env = {**os.environ, "PYTHONPATH": str(REPO), "TICKETS_BOX_OFFICE_URL": receiver.base}

    def worker(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(WORKER), db_url, *args],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )

    died = worker("crash")  # right after the database took the seats-sold event, before COMMIT
    assert died.returncode == 137, died.stderr
    assert _status(app, held.reservation_id).status == "paid" and _seats(app, show).held == 2
    again = worker("once")
    assert again.returncode == 0, again.stderr
    assert _status(app, held.reservation_id).status == "confirmed"
    assert _events(app, Show, show) == [ShowScheduled, SeatsHeld, SeatsSold]
    assert _seat_rows(app) == [(1, "sold"), (2, "sold")]
    assert len(receiver.to("/sold")) == 1


def test_the_rows_are_what_the_events_rebuild(app: App, clock: FakeClock) -> None:
    show = _show(app)
    paid, expired, cancelled = _hold(app, show, [1, 2]), _hold(app, show, [3]), _hold(app, show, [4], user=BOB)
    _hold(app, show, [5])  # still held
    ok_data(app.dispatch(pay, Pay(paid.reservation_id, "p", D("50.00")), user=ADA))
    ok_data(app.dispatch(cancel, Cancel(cancelled.reservation_id), user=BOB))
    _drain(app)
    clock.advance(HOLD_FOR - timedelta(minutes=1))
    _hold(app, show, [6])
    clock.advance(minutes=1)
    _drain(app)
    assert _status(app, expired.reservation_id).status == "expired"
    for entity in (Show, Reservation):
        report = ok_data(app.rebuild_projection(entity, user=ADA, verify=True))
        assert report.matches, (entity, report)


def test_buyers_in_processes_of_their_own_racing_for_the_last_seat_get_it_once(
    app: App, db_url: str, racers: list[subprocess.Popen[str]]
) -> None:
    show = _show(app, capacity=3)
    _hold(app, show, [1, 2])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(5):
        racers.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), db_url, "buy", str(TENANT), str(show), "3"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=REPO,
            )
        )
    for racer in racers:
        assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    answers = [json.loads(racer.communicate(timeout=120)[0]) for racer in racers]
    assert sorted(a["code"] for a in answers) == ["ok", *["unprocessable"] * 4], answers
    assert {a.get("message") for a in answers} == {None, "seats taken: 3"}
    assert _seats(app, show).held == 3 and _seat_rows(app) == [(1, "held"), (2, "held"), (3, "held")]


def test_two_looping_workers_settle_every_hold_paid_or_cancelled_right_after_it_was_made(
    app: App, db_url: str, clock: FakeClock
) -> None:
    """Each answer commits while the hold's run may still be starting, on another
    connection: no run misses it (every hold ends sold or released, none waits for its
    expiry, which the fake clock never reaches)."""
    other = App([tickets], database_url=db_url, clock=clock, mail=MemoryMail())
    show = _show(app, capacity=200)
    raised: list[BaseException] = []

    def loop(worker: App) -> None:
        try:
            worker.run_worker(poll_interval=0.05)
        except BaseException as exc:
            raised.append(exc)

    workers = [threading.Thread(target=loop, args=(a,), daemon=True) for a in (app, other)]
    for w in workers:
        w.start()
    held: list[uuid.UUID] = []
    lock = threading.Lock()

    def buy(first: int) -> None:
        for number in range(first, 60, 3):
            buyer = User(id=uuid.uuid4(), tenant_id=TENANT)
            command = HoldSeats(show, "ada@example.com", [number + 1])
            reservation = _tried(lambda: app.dispatch(hold_seats, command, user=buyer)).reservation_id
            if number % 3:
                payment = Pay(reservation, f"p{number}", D("25.00"))
                _tried(lambda: app.dispatch(pay, payment, user=buyer, idempotency_key=payment.payment_id))
            else:
                _tried(lambda: app.dispatch(cancel, Cancel(reservation), user=buyer))
            with lock:
                held.append(reservation)

    buyers = [threading.Thread(target=buy, args=(first,)) for first in range(3)]
    for t in buyers:
        t.start()
    for t in buyers:
        t.join(120)
    try:
        _eventually(
            lambda: sum(_status(app, r).status in ("confirmed", "cancelled") for r in held) == 60,
            "every hold settled",
            lambda: repr(
                (
                    len(held),
                    sorted(_status(app, r).status for r in held),
                    [(r.status, r.path, r.error) for r in app.runs() if r.status != "completed"],
                )
            ),
        )
    finally:
        app.stop_worker()
        other.stop_worker()
        for w in workers:
            w.join(30)
        other.dispose()
    assert not raised, raised
    seen = _seats(app, show)
    assert (seen.held, seen.sold) == (0, 40)
    assert {r.status for r in app.runs(hold)} == {"completed"}


@pytest.mark.postgres
def test_a_worker_whose_connection_is_cut_mid_sale_sells_once(
    fresh_postgres_url: str, clock: FakeClock, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's locked read of the reservation waits behind another transaction; its
    backend is terminated there; the looping worker outlives it and sells the seats once."""
    monkeypatch.setenv("TICKETS_BOX_OFFICE_URL", receiver.base)
    app = App([tickets], database_url=fresh_postgres_url, clock=clock, mail=MemoryMail())
    killer = sa.create_engine(fresh_postgres_url, poolclass=sa.pool.NullPool)
    raised: list[BaseException] = []

    def loop() -> None:
        try:
            app.run_worker(poll_interval=0.05)
        except BaseException as exc:
            raised.append(exc)

    worker = threading.Thread(target=loop, daemon=True)
    try:
        app.create_all()
        show = _show(app)
        held = _hold(app, show, [1, 2])
        _drain(app)
        ok_data(app.dispatch(pay, Pay(held.reservation_id, "p", D("50.00")), user=ADA))
        with killer.connect() as blocker:
            blocker.execute(
                sa.text("SELECT 1 FROM tickets_reservation WHERE id = :id FOR UPDATE"), {"id": held.reservation_id}
            )
            worker.start()
            _eventually(lambda: _terminate_lock_waiters(killer) > 0, "the worker's read was cut")
            blocker.rollback()
        _eventually(lambda: _status(app, held.reservation_id).status == "confirmed", "the sale")
        _eventually(lambda: len(receiver.to("/sold")) == 1, "the box office told")
    finally:
        app.stop_worker()
        worker.join(30)
        killer.dispose()
    assert not raised, raised
    assert _events(app, Show, show) == [ShowScheduled, SeatsHeld, SeatsSold]
    assert _seat_rows(app) == [(1, "sold"), (2, "sold")] and len(receiver.to("/sold")) == 1
    app.dispose()


def _tried(call: Callable[[], Ok[T] | Failure]) -> T:
    """``call``'s data, asking again while it answers ``unavailable`` (SQLite's write lock
    held past its busy timeout by a worker's batch on a loaded machine), as a client does."""
    for _ in range(20):
        answer = call()
        if not (isinstance(answer, Failure) and answer.code == "unavailable"):
            break
    data: T = ok_data(answer)
    return data


def _terminate_lock_waiters(engine: sa.Engine) -> int:
    """Terminate the backends waiting for a lock: how many."""
    stmt = sa.text(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    )
    with engine.connect() as conn:
        return int(conn.execute(stmt).scalar_one())


def _eventually(
    check: Callable[[], bool], what: str, state: Callable[[], str] = lambda: "", seconds: float = 60.0
) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what} {state()}")
        time.sleep(0.05)
