"""The lending library (examples/ports/library.py) run end to end on SQLite and PostgreSQL:
loans with a limit and a block on unpaid fines, a webhook to a real catalogue on 127.0.0.1
for each loan, returns fined to the cent (at, just before and after the due instant, twice,
of a copy not on loan), the reservation queue (offered in order, held three days, passed
on when it lapses or is cancelled while offered, mails through the outbox), the reminder
and the daily overdue cron, another tenant's ids, hostile input, members racing for the
last copy on their own connections and in processes of their own, and the rows equal to
what the events rebuild."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from _receiver import Receiver
from _support import failure_of, ok_data

from examples.ports.library import (
    FINE_PER_DAY,
    HOLD_FOR,
    LOAN_FOR,
    REMIND_BEFORE,
    AddTitle,
    Availability,
    Borrow,
    CancelReservation,
    Copy,
    Join,
    Lent,
    Loans,
    Member,
    MemberId,
    PayFine,
    Reservation,
    Reserve,
    Return,
    Returned,
    Title,
    TitleId,
    add_title,
    availability,
    borrow,
    cancel_reservation,
    join,
    library,
    loan,
    member_loans,
    offer,
    overdue,
    pay_fine,
    reserve,
    return_copy,
)
from kumiko_typed import App, Failure, Ok, User
from kumiko_typed.testing import FakeClock, MemoryMail

D = Decimal
START = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
TENANT = uuid.uuid4()
DESK = User(id=uuid.uuid4(), tenant_id=TENANT)
STRANGER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "_library_worker.py"


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
    monkeypatch.setenv("LIBRARY_CATALOGUE_URL", receiver.base)
    return app_on([library], clock=clock, mail=mail)


def _member(app: App, name: str = "ada", limit: int = 3) -> uuid.UUID:
    member: uuid.UUID = ok_data(app.dispatch(join, Join(name, f"{name}@example.com", limit), user=DESK))
    return member


def _title(app: App, copies: int = 1, name: str = "Dune") -> uuid.UUID:
    title: uuid.UUID = ok_data(app.dispatch(add_title, AddTitle(name, copies), user=DESK))
    return title


def _borrow(app: App, member: uuid.UUID, title: uuid.UUID) -> Lent:
    lent: Lent = ok_data(app.dispatch(borrow, Borrow(member, title), user=DESK))
    return lent


def _return(app: App, copy: uuid.UUID) -> Returned:
    returned: Returned = ok_data(app.dispatch(return_copy, Return(copy), user=DESK))
    return returned


def _reserve(app: App, member: uuid.UUID, title: uuid.UUID) -> uuid.UUID:
    reservation: uuid.UUID = ok_data(app.dispatch(reserve, Reserve(member, title), user=DESK))
    return reservation


def _seen(app: App, title: uuid.UUID, user: User = DESK) -> Availability:
    seen: Availability = ok_data(app.query(availability, TitleId(title), user=user))
    return seen


def _loans(app: App, member: uuid.UUID) -> Loans:
    loans: Loans = ok_data(app.query(member_loans, MemberId(member), user=DESK))
    return loans


def _status(app: App, reservation: uuid.UUID) -> str:
    with app.engine.connect() as conn:
        status: str = conn.execute(
            Reservation.__table__.select().with_only_columns(Reservation.status).where(Reservation.id == reservation)
        ).scalar_one()
    return status


def _drain(app: App) -> None:
    while any(app.run_worker(once=True).values()):
        pass


# --- loans and returns -----------------------------------------------------------------------


def test_a_loan_tells_the_catalogue_and_a_timely_return_puts_the_copy_back_unfined(
    app: App, receiver: Receiver
) -> None:
    ada, title = _member(app), _title(app, copies=2)
    lent = _borrow(app, ada, title)
    assert lent.due_at == START + LOAN_FOR
    assert _seen(app, title) == Availability(title, "Dune", 1, 1, 0, [])
    assert _loans(app, ada) == Loans(ada, 1, D("0.00"), [lent.copy_id])
    _drain(app)
    (hook,) = receiver.to("/loans")
    assert json.loads(hook.body) == {
        "loan_id": str(lent.loan_id),
        "title_id": str(title),
        "copy_id": str(lent.copy_id),
        "due_at": lent.due_at.isoformat(),
    }
    assert _return(app, lent.copy_id) == Returned(lent.copy_id, 0, D("0.00"))
    assert _seen(app, title) == Availability(title, "Dune", 2, 0, 0, [])
    assert _loans(app, ada) == Loans(ada, 0, D("0.00"), [])


def test_a_return_at_the_due_instant_is_unfined_and_each_started_day_after_costs_a_day(
    app: App, clock: FakeClock
) -> None:
    title = _title(app, copies=3)
    on_time, a_bit_late, late = _member(app, "a"), _member(app, "b"), _member(app, "c")
    lent = {m: _borrow(app, m, title) for m in (on_time, a_bit_late, late)}
    clock.advance(LOAN_FOR)
    assert _return(app, lent[on_time].copy_id) == Returned(lent[on_time].copy_id, 0, D("0.00"))
    clock.advance(microseconds=1)
    assert _return(app, lent[a_bit_late].copy_id) == Returned(lent[a_bit_late].copy_id, 1, D("0.25"))
    clock.advance(days=9)
    assert _return(app, lent[late].copy_id) == Returned(lent[late].copy_id, 10, FINE_PER_DAY * 10)
    assert _loans(app, late).fines_due == D("2.50")


def test_the_same_return_twice_fines_once_and_a_copy_not_on_loan_is_refused(app: App, clock: FakeClock) -> None:
    ada, title = _member(app), _title(app)
    lent = _borrow(app, ada, title)
    clock.advance(LOAN_FOR + timedelta(days=2))
    assert _return(app, lent.copy_id).fine == D("0.50")
    refusal = Failure("unprocessable", "the copy is not on loan")
    assert app.dispatch(return_copy, Return(lent.copy_id), user=DESK) == refusal
    assert _loans(app, ada) == Loans(ada, 0, D("0.50"), [])
    other = _title(app, name="Emma")
    (copy,) = _copies(app, other)
    assert app.dispatch(return_copy, Return(copy), user=DESK) == refusal


def test_the_limit_and_unpaid_fines_block_a_loan_until_paid(app: App, clock: FakeClock) -> None:
    ada, title = _member(app, limit=2), _title(app, copies=4)
    first = _borrow(app, ada, title)
    _borrow(app, ada, title)
    assert app.dispatch(borrow, Borrow(ada, title), user=DESK) == Failure(
        "unprocessable", "the member has 2 loans, the limit"
    )
    clock.advance(LOAN_FOR + timedelta(hours=1))
    _return(app, first.copy_id)
    assert app.dispatch(borrow, Borrow(ada, title), user=DESK) == Failure(
        "unprocessable", "blocked: fines of 0.25 are unpaid"
    )
    assert app.dispatch(pay_fine, PayFine(ada, D("0.26")), user=DESK) == Failure(
        "unprocessable", "the member owes 0.25"
    )
    assert app.dispatch(pay_fine, PayFine(ada, D("0.10")), user=DESK) == Ok(D("0.15"))
    assert app.dispatch(pay_fine, PayFine(ada, D("0.15")), user=DESK) == Ok(D("0.00"))
    assert _borrow(app, ada, title)


# --- the reservation queue ---------------------------------------------------------------------


def test_a_returned_copy_is_offered_to_the_queue_in_order_held_three_days_then_passed_on(
    app: App, clock: FakeClock, mail: MemoryMail
) -> None:
    title = _title(app)
    ada, bob, cy = _member(app, "ada"), _member(app, "bob"), _member(app, "cy")
    lent = _borrow(app, ada, title)
    assert app.dispatch(reserve, Reserve(bob, title), user=DESK)
    first, second = _seen(app, title).queue[0], _reserve(app, cy, title)
    assert _seen(app, title).queue == [first, second]
    assert app.dispatch(borrow, Borrow(cy, title), user=DESK) == Failure(
        "unprocessable", "no copy of the title is on the shelf: reserve it"
    )
    _return(app, lent.copy_id)
    assert _seen(app, title) == Availability(title, "Dune", 0, 0, 1, [second])
    assert app.dispatch(borrow, Borrow(cy, title), user=DESK) == Failure(
        "unprocessable", "no copy of the title is on the shelf: reserve it"
    )
    _drain(app)
    assert [(m.to, m.subject) for m in mail.sent] == [(("bob@example.com",), "A copy is held for you")]
    clock.advance(HOLD_FOR - timedelta(microseconds=1))
    _drain(app)
    assert _status(app, first) == "offered"
    clock.advance(microseconds=1)
    _drain(app)
    assert (_status(app, first), _status(app, second)) == ("lapsed", "offered")
    assert [m.subject for m in mail.sent][1:] == ["Your reservation lapsed", "A copy is held for you"]
    assert mail.sent[-1].to == ("cy@example.com",)
    cy_lent = _borrow(app, cy, title)
    assert cy_lent.copy_id == lent.copy_id
    _drain(app)
    assert _status(app, second) == "collected"
    assert _seen(app, title) == Availability(title, "Dune", 0, 1, 0, [])
    assert {r.status for r in app.runs(offer)} == {"completed"}


def test_a_reservation_cancelled_while_offered_passes_the_copy_on_at_once(app: App, mail: MemoryMail) -> None:
    title = _title(app)
    ada, bob, cy = _member(app, "ada"), _member(app, "bob"), _member(app, "cy")
    lent = _borrow(app, ada, title)
    first, second = _reserve(app, bob, title), _reserve(app, cy, title)
    _return(app, lent.copy_id)
    _drain(app)
    assert app.dispatch(cancel_reservation, CancelReservation(first), user=DESK) == Ok(first)
    assert app.dispatch(cancel_reservation, CancelReservation(first), user=DESK) == Ok(first)
    _drain(app)
    assert (_status(app, first), _status(app, second)) == ("cancelled", "offered")
    assert app.dispatch(borrow, Borrow(bob, title), user=DESK) == Failure(
        "unprocessable", "no copy of the title is on the shelf: reserve it"
    )
    _borrow(app, cy, title)
    _drain(app)
    assert app.dispatch(cancel_reservation, CancelReservation(second), user=DESK) == Failure(
        "unprocessable", "the reservation was collected: return the copy instead"
    )
    assert [m.to[0] for m in mail.sent] == ["bob@example.com", "cy@example.com"]


def test_the_last_offer_lapsing_puts_the_copy_on_the_shelf(app: App, clock: FakeClock) -> None:
    title, ada, bob = _title(app), _member(app, "ada"), _member(app, "bob")
    reservation = (_borrow(app, ada, title), _reserve(app, bob, title))[1]
    assert app.dispatch(reserve, Reserve(ada, title), user=DESK)
    _return(app, _loans(app, ada).copies[0])
    _drain(app)
    clock.advance(HOLD_FOR)
    _drain(app)
    clock.advance(HOLD_FOR)
    _drain(app)
    assert _status(app, reservation) == "lapsed"
    assert _seen(app, title) == Availability(title, "Dune", 1, 0, 0, [])
    assert app.dispatch(reserve, Reserve(bob, title), user=DESK) == Failure(
        "unprocessable", "a copy is on the shelf: borrow it"
    )


def test_concurrent_reservations_queue_in_commit_order_with_no_place_twice(app: App) -> None:
    title, holder = _title(app), _member(app, "holder")
    _borrow(app, holder, title)
    members = [_member(app, f"m{n}") for n in range(12)]
    barrier = threading.Barrier(4)
    made: list[list[uuid.UUID]] = [[] for _ in range(4)]

    def queue(n: int) -> None:
        barrier.wait()
        for member in members[n::4]:
            made[n].append(_reserve(app, member, title))

    threads = [threading.Thread(target=queue, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    queue_order = _seen(app, title).queue
    assert sorted(queue_order) == sorted(r for mine in made for r in mine)
    with app.engine.connect() as conn:
        places = sorted(conn.execute(Reservation.__table__.select().with_only_columns(Reservation.place)).scalars())
    assert places == list(range(1, 13))
    # Each desk's reservations queue in the order it made them.
    for mine in made:
        assert sorted(mine, key=queue_order.index) == mine


# --- reminders and overdue loans ---------------------------------------------------------------


def test_a_loan_is_reminded_two_days_before_due_and_the_daily_cron_mails_the_overdue_once_a_day(
    app: App, clock: FakeClock, mail: MemoryMail
) -> None:
    title, ada, bob = _title(app, copies=2), _member(app, "ada"), _member(app, "bob")
    _drain(app)  # the first pass starts the cron schedule
    kept = _borrow(app, ada, title)
    back = _borrow(app, bob, title)
    _drain(app)
    clock.advance(LOAN_FOR - REMIND_BEFORE - timedelta(hours=1))
    _return(app, back.copy_id)
    clock.advance(hours=1)
    _drain(app)
    reminders = [m for m in mail.sent if m.subject == "Your loan is due soon"]
    assert [m.to for m in reminders] == [("ada@example.com",)]
    clock.advance(REMIND_BEFORE + timedelta(days=2))
    _drain(app)
    late = [m for m in mail.sent if m.subject == "Your loan is overdue"]
    assert [m.to for m in late] == [("ada@example.com",)] * 2 and str(kept.copy_id) in late[0].body
    assert [r.status for r in app.runs(loan)] == ["completed", "completed"]
    assert {r.status for r in app.runs(overdue)} == {"completed"}


# --- tenants and hostile input -------------------------------------------------------------------


def test_another_tenants_ids_look_like_none(app: App) -> None:
    ada, title = _member(app), _title(app)
    lent = _borrow(app, ada, title)
    reservation = _reserve(app, _member(app, "bob"), title)
    stranger_member: uuid.UUID = ok_data(app.dispatch(join, Join("eve", "eve@example.com", 3), user=STRANGER))
    unknown = uuid.uuid4()
    asks: list[Callable[[uuid.UUID], object]] = [
        lambda id: app.query(availability, TitleId(id), user=STRANGER),
        lambda id: app.query(member_loans, MemberId(id), user=STRANGER),
        lambda id: app.dispatch(borrow, Borrow(stranger_member, id), user=STRANGER),
        lambda id: app.dispatch(borrow, Borrow(id, title), user=STRANGER),
        lambda id: app.dispatch(return_copy, Return(id), user=STRANGER),
        lambda id: app.dispatch(reserve, Reserve(stranger_member, id), user=STRANGER),
        lambda id: app.dispatch(pay_fine, PayFine(id, D("1")), user=STRANGER),
        lambda id: app.dispatch(cancel_reservation, CancelReservation(id), user=STRANGER),
    ]
    for ask, known in zip(asks, [title, ada, title, ada, lent.copy_id, title, ada, reservation], strict=True):
        assert ask(known) == ask(unknown)
        failure_of(ask(known), "not_found")
    assert _seen(app, title) == Availability(title, "Dune", 0, 1, 0, [reservation])


@pytest.mark.parametrize(
    ("name", "data", "path"),
    [
        ("member:join", {"name": "", "email": "a@b.c", "loan_limit": 3}, "$.name"),
        ("member:join", {"name": "x" * 10_000_000, "email": "a@b.c", "loan_limit": 3}, "$.name"),
        ("member:join", {"name": "a\x00b", "email": "a@b.c", "loan_limit": 3}, "$.name"),
        ("member:join", {"name": "\ud800", "email": "a@b.c", "loan_limit": 3}, "$.name"),
        ("member:join", {"name": "a", "email": "a\x00@b.c", "loan_limit": 3}, "$.email"),
        ("member:join", {"name": "a", "email": "a@b.c", "loan_limit": 0}, "$.loan_limit"),
        ("member:join", {"name": "a", "email": "a@b.c", "loan_limit": -5}, "$.loan_limit"),
        ("member:join", {"name": "a", "email": "a@b.c", "loan_limit": 10**40}, "$.loan_limit"),
        ("member:join", {"name": "a", "email": "a@b.c", "loan_limit": float("nan")}, "$.loan_limit"),
        ("title:add", {"name": "t", "copies": 101}, "$.copies"),
        ("member:pay-fine", {"amount": "NaN"}, "$.amount"),
        ("member:pay-fine", {"amount": "-0.25"}, "$.amount"),
        ("member:pay-fine", {"amount": "0"}, "$.amount"),
        ("member:pay-fine", {"amount": "Infinity"}, "$.amount"),
        ("member:pay-fine", {"amount": "0.001"}, "$.amount"),
        ("member:pay-fine", {"amount": float("nan")}, "$.amount"),
        ("member:pay-fine", {"amount": "1e999999999"}, "$.amount"),
        ("loan:borrow", {"title_id": "not-a-uuid"}, "$.title_id"),
        ("loan:borrow", {"title_id": "\x00" * 36}, "$.title_id"),
    ],
)
def test_hostile_input_is_refused_at_its_field_and_writes_nothing(
    app: App, name: str, data: dict[str, object], path: str
) -> None:
    ada, title = _member(app), _title(app)
    data = {"member_id": str(ada), "title_id": str(title), **data}
    refused = failure_of(app.dispatch_json(f"library:{name}", data, user=DESK), "validation_error")
    assert refused.details is not None and path in [d["path"] for d in refused.details], refused
    assert _seen(app, title) == Availability(title, "Dune", 1, 0, 0, [])
    assert _loans(app, ada) == Loans(ada, 0, D("0.00"), [])


# --- races and rebuilds ----------------------------------------------------------------------------


def test_members_racing_for_the_last_copy_on_their_own_connections_get_it_once(app: App) -> None:
    title = _title(app, copies=2)
    _borrow(app, _member(app, "first"), title)
    members = [_member(app, f"r{n}") for n in range(4)]
    barrier = threading.Barrier(4)
    answers: list[Ok[Lent] | Failure] = []
    lock = threading.Lock()

    def race(member: uuid.UUID) -> None:
        barrier.wait()
        answer = app.dispatch(borrow, Borrow(member, title), user=DESK)
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=race, args=(m,)) for m in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(answers) == 4 and len([a for a in answers if isinstance(a, Ok)]) == 1, answers
    refusal = Failure("unprocessable", "no copy of the title is on the shelf: reserve it")
    assert [a for a in answers if isinstance(a, Failure)] == [refusal] * 3
    assert _seen(app, title) == Availability(title, "Dune", 0, 2, 0, [])


def test_members_in_processes_of_their_own_racing_for_the_last_copy_get_it_once(
    app: App, db_url: str, racers: list[subprocess.Popen[str]]
) -> None:
    title = _title(app)
    members = [_member(app, f"p{n}") for n in range(4)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for member in members:
        racers.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), db_url, "borrow", str(TENANT), str(member), str(title)],
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
    assert sorted(a["code"] for a in answers) == ["ok", *["unprocessable"] * 3], answers
    assert {a.get("message") for a in answers} == {None, "no copy of the title is on the shelf: reserve it"}
    assert _seen(app, title) == Availability(title, "Dune", 0, 1, 0, [])


@pytest.mark.slow
def test_a_worker_killed_in_the_middle_of_passing_a_lapsed_copy_on_offers_it_once(
    app: App, db_url: str, clock: FakeClock
) -> None:
    title, ada, bob, cy = _title(app), _member(app, "ada"), _member(app, "bob"), _member(app, "cy")
    lent = _borrow(app, ada, title)
    first, second = _reserve(app, bob, title), _reserve(app, cy, title)
    _return(app, lent.copy_id)
    _drain(app)
    clock.advance(HOLD_FOR)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def worker(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(WORKER), db_url, *args, clock.now.isoformat()],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )

    died = worker("crash")  # right after the database took the lapse's offer to the next, before COMMIT
    assert died.returncode == 137, died.stderr
    assert (_status(app, first), _status(app, second)) == ("offered", "waiting")
    again = worker("once")
    assert again.returncode == 0, again.stderr
    assert (_status(app, first), _status(app, second)) == ("lapsed", "offered")
    assert _seen(app, title) == Availability(title, "Dune", 0, 0, 1, [])
    assert len(app.runs(offer)) == 2


def test_the_rows_are_what_the_events_rebuild(app: App, clock: FakeClock) -> None:
    title, other = _title(app, copies=2), _title(app, name="Emma")
    ada, bob, cy = _member(app, "ada"), _member(app, "bob"), _member(app, "cy")
    a, b = _borrow(app, ada, title), _borrow(app, bob, title)
    _borrow(app, cy, other)
    gone, kept = _reserve(app, cy, title), _reserve(app, ada, title)
    clock.advance(LOAN_FOR + timedelta(days=3))
    _return(app, a.copy_id)
    _drain(app)
    ok_data(app.dispatch(cancel_reservation, CancelReservation(gone), user=DESK))
    _drain(app)
    assert _status(app, kept) == "offered"
    _return(app, b.copy_id)
    ok_data(app.dispatch(pay_fine, PayFine(ada, D("0.50")), user=DESK))
    for entity in (Member, Title, Copy, Reservation):
        report = ok_data(app.rebuild_projection(entity, user=DESK, verify=True))
        assert report.matches, (entity, report)


def _copies(app: App, title: uuid.UUID) -> list[uuid.UUID]:
    with app.engine.connect() as conn:
        return list(
            conn.execute(Copy.__table__.select().with_only_columns(Copy.id).where(Copy.title_id == title)).scalars()
        )


def test_copies_returned_at_once_go_to_the_first_two_in_the_queue(app: App) -> None:
    """Each pass-on reads the first waiting reservation locked; the one that waited for the
    other's lock must read the next in the queue, not an empty queue (PostgreSQL re-reads a
    locked row it waited for, and ``LIMIT 1`` then gives none)."""
    title, holders = _title(app, copies=2), [_member(app, "h1"), _member(app, "h2")]
    lent = [_borrow(app, m, title) for m in holders]
    waiting = [_reserve(app, _member(app, f"w{n}"), title) for n in range(3)]
    for _ in range(5):
        barrier = threading.Barrier(2)
        answers: list[object] = []

        def back(copy: uuid.UUID) -> None:
            barrier.wait()
            answers.append(app.dispatch(return_copy, Return(copy), user=DESK))

        threads = [threading.Thread(target=back, args=(loaned.copy_id,)) for loaned in lent]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert all(isinstance(a, Ok) for a in answers), answers
        assert _seen(app, title).on_shelf == 0, [_status(app, r) for r in waiting]
        # Both offers collected, and the copies lent again for the next round.
        lent = [_borrow(app, _reservation_member(app, r), title) for r in waiting[:2]]
        ok_data(app.dispatch(cancel_reservation, CancelReservation(waiting[2]), user=DESK))
        waiting = [_reserve(app, _member(app, f"x{n}"), title) for n in range(3)]


def _reservation_member(app: App, reservation: uuid.UUID) -> uuid.UUID:
    with app.engine.connect() as conn:
        member: uuid.UUID = conn.execute(
            Reservation.__table__.select().with_only_columns(Reservation.member_id).where(Reservation.id == reservation)
        ).scalar_one()
    return member


@pytest.mark.slow
def test_ten_thousand_reservations_queue_in_order_and_the_first_is_offered(app: App, mail: MemoryMail) -> None:
    title, ada = _title(app), _member(app, limit=50)
    lent = _borrow(app, ada, title)
    _drain(app)
    made = [_reserve(app, ada, title) for _ in range(10_000)]
    assert _seen(app, title).queue == made
    _return(app, lent.copy_id)
    _drain(app)
    assert _status(app, made[0]) == "offered" and _status(app, made[1]) == "waiting"
    assert [m.subject for m in mail.sent] == ["A copy is held for you"]
