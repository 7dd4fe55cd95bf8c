"""Oskar Dudycz's HotelManagement sample as an example app (examples/ports/hotel.py), run
end to end on SQLite and PostgreSQL: a guest stay's account and its check-out, group
check-outs (mixed, of one, empty, a stay in two groups, the same command twice, another
tenant's stay), a charge racing a check-out on real second connections, hostile amounts,
a worker killed in the middle of a group, and the cost of a segment of a group of 500."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa
from _sql_log import bytes_read, statements
from _support import failure_of, ok_data

from examples.ports.hotel import (
    BATCH,
    NO_SUCH_STAY,
    VALUE_TYPES,
    ChargeRecorded,
    CheckIn,
    CheckOut,
    GroupCheckout,
    GroupCheckoutCompleted,
    GroupCheckoutFailed,
    GroupCheckoutInitiated,
    GroupCheckoutStay,
    GroupStatus,
    GroupView,
    GuestCheckedIn,
    GuestCheckedOut,
    GuestCheckOutFailed,
    GuestCheckoutRecorded,
    GuestCheckoutRequested,
    GuestStayAccount,
    InitiateGroupCheckout,
    PaymentRecorded,
    RecordCharge,
    RecordPayment,
    check_in,
    check_out,
    group_checkout,
    group_status,
    hotel,
    initiate_group_checkout,
    record_charge,
    record_payment,
)
from kumiko_typed import App, Failure, Ok, User
from kumiko_typed.testing import FakeClock, MemoryMail

D = Decimal
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
CLERK = "clerk@hotel.example"
REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "_hotel_worker.py"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def mail() -> MemoryMail:
    return MemoryMail()


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock, mail: MemoryMail) -> App:
    return app_on([hotel], clock=clock, mail=mail, value_types=VALUE_TYPES)


def _stay(app: App, user: User, charged: str | None = None, paid: str | None = None) -> uuid.UUID:
    stay: uuid.UUID = ok_data(app.dispatch(check_in, CheckIn(uuid.uuid4()), user=user))
    if charged is not None:
        ok_data(app.dispatch(record_charge, RecordCharge(stay, D(charged)), user=user))
    if paid is not None:
        ok_data(app.dispatch(record_payment, RecordPayment(stay, D(paid)), user=user))
    return stay


def _group(app: App, user: User, stays: list[uuid.UUID], group: uuid.UUID | None = None) -> uuid.UUID:
    command = InitiateGroupCheckout(group or uuid.uuid4(), CLERK, stays)
    answer: uuid.UUID = ok_data(app.dispatch(initiate_group_checkout, command, user=user))
    return answer


def _drain(app: App) -> int:
    """Worker passes until one finds nothing to do; how many did something."""
    busy = 0
    while any(app.run_worker(once=True).values()):
        busy += 1
    return busy


def _view(app: App, user: User, group: uuid.UUID) -> GroupView:
    view: GroupView = ok_data(app.query(group_status, GroupStatus(group), user=user))
    return view


def _events(app: App, user: User, entity: type[object], id: uuid.UUID) -> list[object]:
    return [e.event for e in ok_data(app.read_stream(entity, id, user=user))]


def _row(app: App, user: User, stay: uuid.UUID) -> sa.Row[tuple[str, Decimal, Decimal, Decimal]]:
    """The stay's row as stored (read past the App: the tests look at any tenant's)."""
    t = GuestStayAccount
    with app.engine.connect() as conn:
        return conn.execute(sa.select(t.status, t.charges, t.payments, t.balance).where(t.id == stay)).one()


# --- the guest stay account ---------------------------------------------------------------------


def test_a_stay_is_checked_out_only_once_its_balance_is_settled(app: App, user: User) -> None:
    stay = _stay(app, user, charged="120.50", paid="100.00")
    assert app.dispatch(check_out, CheckOut(stay), user=user) == Failure(
        "unprocessable", "the balance is not settled: 20.50 outstanding"
    )
    assert app.dispatch(record_payment, RecordPayment(stay, D("30.00")), user=user) == Ok(D("-9.50"))
    assert app.dispatch(check_out, CheckOut(stay), user=user) == Failure(
        "unprocessable", "the balance is not settled: 9.50 to pay back"
    )
    assert app.dispatch(record_charge, RecordCharge(stay, D("9.50")), user=user) == Ok(D(0))
    assert app.dispatch(check_out, CheckOut(stay), user=user) == Ok(stay)
    assert app.dispatch(check_out, CheckOut(stay), user=user) == Failure(
        "unprocessable", "the guest stay is checked out already"
    )
    for late in (
        app.dispatch(record_charge, RecordCharge(stay, D("1.00")), user=user),
        app.dispatch(record_payment, RecordPayment(stay, D("1.00")), user=user),
    ):
        assert late == Failure("unprocessable", "the guest stay is checked out")
    # A refused solo check-out rolled back: the stream has the accepted events only.
    assert [type(e) for e in _events(app, user, GuestStayAccount, stay)] == [
        GuestCheckedIn,
        ChargeRecorded,
        PaymentRecorded,
        PaymentRecorded,
        ChargeRecorded,
        GuestCheckedOut,
    ]
    assert ok_data(app.rebuild_projection(GuestStayAccount, user=user, verify=True)).matches
    row = _row(app, user, stay)
    assert (row.status, row.charges, row.payments, row.balance) == ("checked_out", D("130.00"), D("130.00"), D(0))


@pytest.mark.parametrize(
    "amount",
    ["-5", "0", "0.001", "1000000.01", "99999999999999.99", "1e400", "NaN", "sNaN", "Infinity", "-Infinity", "-0"],
)
def test_hostile_amounts_are_refused_and_change_nothing(app: App, user: User, amount: str) -> None:
    stay = _stay(app, user, charged="10.00")
    for name in ("hotel:stay:record-charge", "hotel:stay:record-payment"):
        refused = failure_of(
            app.dispatch_json(name, {"stay_id": str(stay), "amount": amount}, user=user), "validation_error"
        )
        assert [d["path"] for d in refused.details] == ["$.amount"], refused
        assert amount not in refused.message
    assert len(_events(app, user, GuestStayAccount, stay)) == 2
    assert _row(app, user, stay).balance == D("10.00")


def test_hostile_json_numbers_are_refused(app: App, user: User) -> None:
    stay = _stay(app, user)
    for number in (float("nan"), float("inf"), 1e308 * 10, 10**400, 12.345, True):
        refused = failure_of(
            app.dispatch_json("hotel:stay:record-charge", {"stay_id": str(stay), "amount": number}, user=user),
            "validation_error",
        )
        assert [d["path"] for d in refused.details] == ["$.amount"], (number, refused)
    # The largest charge, many times over: the balance is exact, on both databases.
    for _ in range(5):
        ok_data(app.dispatch_json("hotel:stay:record-charge", {"stay_id": str(stay), "amount": "1000000"}, user=user))
    ok_data(app.dispatch_json("hotel:stay:record-payment", {"stay_id": str(stay), "amount": "0.01"}, user=user))
    assert _row(app, user, stay).balance == D("4999999.99")
    assert app.dispatch(check_out, CheckOut(stay), user=user) == Failure(
        "unprocessable", "the balance is not settled: 4999999.99 outstanding"
    )


# --- group check-outs ---------------------------------------------------------------------------


def test_a_group_with_an_unsettled_stay_fails_listing_both_kinds(app: App, user: User, mail: MemoryMail) -> None:
    settled = _stay(app, user, charged="80.00", paid="80.00")
    fresh = _stay(app, user)
    owing = _stay(app, user, charged="45.10", paid="5.00")
    group = _group(app, user, [settled, owing, fresh])
    view = _view(app, user, group)
    assert (view.status, view.pending) == ("initiated", [settled, owing, fresh])
    assert _drain(app) >= 1
    (run,) = app.runs(group_checkout)
    assert app.result(group_checkout, run.run_id, user=user) == Ok("failed")
    assert _view(app, user, group) == GroupView(group, "failed", 3, [settled, fresh], [owing], [])
    # The refusal is recorded on the stay, with the group and the reason; the others are out.
    assert _events(app, user, GuestStayAccount, owing)[-1] == GuestCheckOutFailed(
        owing, group, "the balance is not settled: 40.10 outstanding", START
    )
    assert _events(app, user, GuestStayAccount, settled)[-1] == GuestCheckedOut(settled, group, START)
    assert _row(app, user, owing).status == "open"
    group_events = _events(app, user, GroupCheckout, group)
    assert [type(e) for e in group_events] == [
        GroupCheckoutInitiated,
        *[GuestCheckoutRequested] * 3,
        *[GuestCheckoutRecorded] * 3,
        GroupCheckoutFailed,
    ]
    assert group_events[-1] == GroupCheckoutFailed(group, [settled, fresh], [owing], START)
    assert ok_data(app.rebuild_projection(GroupCheckout, user=user, verify=True)).matches
    (sent,) = mail.sent
    assert (sent.to, sent.subject) == ((CLERK,), "Group check-out failed")
    assert f"not checked out: {owing}: the balance is not settled: 40.10 outstanding" in sent.body
    # Once settled, the guest checks out alone.
    ok_data(app.dispatch(record_payment, RecordPayment(owing, D("40.10")), user=user))
    assert app.dispatch(check_out, CheckOut(owing), user=user) == Ok(owing)


def test_a_group_of_one_settled_stay_completes(app: App, user: User, mail: MemoryMail) -> None:
    stay = _stay(app, user, charged="10.00", paid="10.00")
    group = _group(app, user, [stay])
    _drain(app)
    assert _view(app, user, group) == GroupView(group, "completed", 1, [stay], [], [])
    assert _events(app, user, GroupCheckout, group)[-1] == GroupCheckoutCompleted(group, [stay], START)
    assert [m.subject for m in mail.sent] == ["Group check-out completed"]
    assert app.dispatch(check_out, CheckOut(stay), user=user) == Failure(
        "unprocessable", "the guest stay is checked out already"
    )


@pytest.mark.parametrize(
    ("stays", "message"),
    [
        (0, "must name 1 to 1000 guest stays"),
        (1001, "must name 1 to 1000 guest stays"),
        (-2, "must name each guest stay once"),
    ],
)
def test_an_empty_oversized_or_repeating_group_is_refused(app: App, user: User, stays: int, message: str) -> None:
    ids = [str(uuid.uuid4()) for _ in range(abs(stays))]
    if stays < 0:
        ids = ids[:1] * 2
    body = {"group_id": str(uuid.uuid4()), "clerk_email": CLERK, "stay_ids": ids}
    refused = failure_of(app.dispatch_json("hotel:group:initiate-checkout", body, user=user), "validation_error")
    assert refused.details == [{"path": "$.stay_ids", "message": message}]
    assert _drain(app) == 0
    assert app.runs() == []


@pytest.mark.parametrize("clerk", ["clerk@hotel.example,boss", "clerk(@hotel.example", "clerk\x01@hotel.example"])
def test_a_clerk_address_the_groups_mail_would_refuse_is_refused_when_the_group_is_initiated(
    app: App, user: User, clerk: str
) -> None:
    """The run mails the clerk when the group is done: an address that mail refuses failed
    that last segment, so the group stayed "initiated" for good after its stays were
    checked out.  It is refused at the command, at its field."""
    stay = _stay(app, user)
    body = {"group_id": str(uuid.uuid4()), "clerk_email": clerk, "stay_ids": [str(stay)]}
    refused = failure_of(app.dispatch_json("hotel:group:initiate-checkout", body, user=user), "validation_error")
    assert refused.details is not None and [d["path"] for d in refused.details] == ["$.clerk_email"]
    assert _drain(app) == 0 and app.runs() == []


def test_a_stay_in_two_groups_is_checked_out_by_the_first_only(app: App, user: User) -> None:
    shared = _stay(app, user)
    first = _group(app, user, [shared, _stay(app, user)])
    second = _group(app, user, [_stay(app, user), shared])
    _drain(app)
    one, two = _view(app, user, first), _view(app, user, second)
    assert (one.status, two.status) == ("completed", "failed")
    assert two.failed == [shared]
    events = _events(app, user, GuestStayAccount, shared)
    assert events[1:] == [
        GuestCheckedOut(shared, first, START),
        GuestCheckOutFailed(shared, second, "the guest stay is checked out already", START),
    ]


def test_the_same_group_command_twice_starts_one_checkout(app: App, user: User, make_user: Callable[..., User]) -> None:
    stays = [_stay(app, user), _stay(app, user)]
    command = InitiateGroupCheckout(uuid.uuid4(), CLERK, stays)
    assert app.dispatch(initiate_group_checkout, command, user=user) == Ok(command.group_id)
    assert app.dispatch(initiate_group_checkout, command, user=user) == Ok(command.group_id)
    keyed = app.dispatch(initiate_group_checkout, command, user=user, idempotency_key="g-1")
    assert (
        app.dispatch(initiate_group_checkout, command, user=user, idempotency_key="g-1")
        == keyed
        == Ok(command.group_id)
    )
    other = InitiateGroupCheckout(command.group_id, CLERK, list(reversed(stays)))
    assert app.dispatch(initiate_group_checkout, other, user=user) == Failure(
        "unprocessable", "that group check-out was initiated with other guest stays"
    )
    _drain(app)
    assert app.dispatch(initiate_group_checkout, command, user=user) == Ok(command.group_id)  # after it ran, too
    _drain(app)
    assert len(app.runs(group_checkout)) == 1
    assert [type(e) for e in _events(app, user, GroupCheckout, command.group_id)].count(GroupCheckoutInitiated) == 1
    for stay in stays:
        assert [type(e) for e in _events(app, user, GuestStayAccount, stay)] == [GuestCheckedIn, GuestCheckedOut]
    # Another tenant's clerk under the same group id reaches nothing of it.
    stranger = make_user()
    taken = failure_of(app.dispatch(initiate_group_checkout, command, user=stranger))
    assert str(stays[0]) not in taken.message and CLERK not in taken.message
    assert failure_of(app.query(group_status, GroupStatus(command.group_id), user=stranger)).code == "not_found"


def test_another_tenants_stay_is_neither_checked_out_nor_seen(
    app: App, user: User, make_user: Callable[..., User], mail: MemoryMail
) -> None:
    stranger = make_user()
    theirs = _stay(app, stranger)
    nobody = uuid.uuid4()
    ours = _stay(app, user)
    group = _group(app, user, [ours, theirs, nobody])
    _drain(app)
    view = _view(app, user, group)
    assert (view.checked_out, view.failed) == ([ours], [theirs, nobody])
    assert _events(app, stranger, GuestStayAccount, theirs) == [GuestCheckedIn(theirs, _guest(app, theirs), START)]
    assert _row(app, stranger, theirs).status == "open"
    # Their stay answers exactly as an id that is no stay: nothing tells the two apart.
    with app.engine.connect() as conn:
        rows = conn.execute(
            sa.select(GroupCheckoutStay.stay_id, GroupCheckoutStay.reason).where(GroupCheckoutStay.group_id == group)
        )
        reasons = {stay: reason for stay, reason in rows}
    assert reasons == {ours: None, theirs: NO_SUCH_STAY, nobody: NO_SUCH_STAY}
    assert failure_of(app.read_stream(GuestStayAccount, theirs, user=user)).code == "not_found"
    assert mail.sent[0].body.count(NO_SUCH_STAY) == 2


def _guest(app: App, stay: uuid.UUID) -> uuid.UUID | None:
    with app.engine.connect() as conn:
        return conn.scalar(sa.select(GuestStayAccount.guest_id).where(GuestStayAccount.id == stay))


def test_eleven_groups_at_once_each_go_on_at_every_pass(app: App, user: User) -> None:
    """Each batch's zero wait leaves a group's run due again at the clock's instant.
    Before, a pass that had resumed ten of them read those ten again first and stopped:
    the eleventh group waited until the others had finished."""
    groups = [_group(app, user, [_stay(app, user) for _ in range(BATCH * 2 + 1)]) for _ in range(11)]
    progress = []
    for _ in range(3):
        app.run_worker(once=True)
        progress.append({(v.status, len(v.pending)) for v in (_view(app, user, g) for g in groups)})
    assert progress == [{("initiated", 1)}, {("initiated", 0)}, {("completed", 0)}]


# --- races on real second connections -------------------------------------------------------------


@pytest.mark.parametrize("via", ["handler", "group"])
def test_charges_racing_a_check_out_never_leave_a_checked_out_stay_owing(
    app: App, user: User, db_url: str, via: str
) -> None:
    """Charges and a check-out (a guest's own, or a group's run in a worker) start on their
    own connections while a third holds the lock they need (the stay's row on PostgreSQL,
    the write lock on SQLite), then go at once: whatever order they decide in, a checked
    out stay owes nothing and every charge after the check-out is refused."""
    stay = _stay(app, user)
    group = _group(app, user, [stay]) if via == "group" else None
    blocker = app.engine.raw_connection()
    cursor = blocker.cursor()
    if db_url.startswith("sqlite"):
        cursor.execute("BEGIN IMMEDIATE")
    else:
        cursor.execute("SELECT 1 FROM hotel_guest_stay WHERE id = %s FOR UPDATE", (stay,))
    answers: list[object] = []
    lock = threading.Lock()

    def charge() -> None:
        answer = app.dispatch(record_charge, RecordCharge(stay, D("15.00")), user=user)
        with lock:
            answers.append(answer)

    def leave() -> None:
        if group is None:
            answer: object = app.dispatch(check_out, CheckOut(stay), user=user)
        else:
            answer = _drain(app)
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=f) for f in (charge, leave, charge, charge)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    time.sleep(0.3)
    blocker.rollback()
    blocker.close()
    for t in threads:
        t.join(60)
    assert len(answers) == 4
    _drain(app)
    events = _events(app, user, GuestStayAccount, stay)
    charged = [e for e in events if isinstance(e, ChargeRecorded)]
    row = _row(app, user, stay)
    if row.status == "checked_out":  # the check-out decided first: every charge is refused
        assert [type(e) for e in events] == [GuestCheckedIn, GuestCheckedOut] and row.balance == 0
        assert answers.count(Failure("unprocessable", "the guest stay is checked out")) == 3
    else:  # a charge decided first: the check-out is refused, every charge recorded
        assert len(charged) == 3 and row.balance == D("45.00")
        failed = [e for e in events if isinstance(e, GuestCheckOutFailed)]
        refusal = failed[0] if group is not None else next(a for a in answers if isinstance(a, Failure))
        assert "the balance is not settled: " in str(refusal)
        assert all(not isinstance(a, Failure) for a in answers if a is not refusal)
    if group is not None:
        assert _view(app, user, group).status == ("completed" if row.status == "checked_out" else "failed")


def test_a_stay_in_four_groups_worked_by_three_workers_at_once_is_checked_out_once(app: App, user: User) -> None:
    """Three worker threads, each on its own connections, pass over four groups that share
    a stay: one group checks it out, the other three record it failed, none twice."""
    shared = _stay(app, user)
    groups = [_group(app, user, [shared, *(_stay(app, user) for _ in range(BATCH + 10))]) for _ in range(4)]

    def work() -> None:
        for _ in range(10):
            app.run_worker(once=True)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    _drain(app)
    views = [_view(app, user, g) for g in groups]
    assert sorted((v.status, v.failed) for v in views) == [("completed", [])] + [("failed", [shared])] * 3
    assert [type(e) for e in _events(app, user, GuestStayAccount, shared)] == [
        GuestCheckedIn,
        GuestCheckedOut,
        *[GuestCheckOutFailed] * 3,
    ]
    assert {r.status for r in app.runs(group_checkout)} == {"completed"}


# --- a worker killed in the middle of a group -----------------------------------------------------


@pytest.mark.slow
def test_a_worker_killed_mid_group_resumes_and_checks_out_each_stay_once(
    app: App, user: User, db_url: str, mail: MemoryMail
) -> None:
    stays = [_stay(app, user) for _ in range(BATCH * 2 + 5)]
    group = _group(app, user, stays)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

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

    died = worker("crash", str(BATCH + 7))  # in the second batch: the first is committed
    assert died.returncode == 137, died.stderr
    view = _view(app, user, group)
    assert (view.status, len(view.checked_out), len(view.pending)) == ("initiated", BATCH, BATCH + 5)
    (run,) = app.runs(group_checkout)
    assert run.status == "suspended"
    again = worker("once")
    assert again.returncode == 0, again.stderr
    view = _view(app, user, group)
    assert view == GroupView(group, "completed", len(stays), stays, [], [])
    for stay in stays:
        assert [type(e) for e in _events(app, user, GuestStayAccount, stay)] == [GuestCheckedIn, GuestCheckedOut]
    recorded = [e for e in _events(app, user, GroupCheckout, group) if isinstance(e, GuestCheckoutRecorded)]
    assert sorted(e.position for e in recorded) == list(range(len(stays)))
    outbox = app.outbox()
    assert [(o.kind, o.status) for o in outbox] == [("mail", "sent")]


# --- the cost of a segment does not grow with the group -------------------------------------------


def _batch_costs(app: App, user: User, size: int) -> list[tuple[int, int]]:
    """Statements sent and bytes of run state read by each worker pass that checks out a
    whole batch of a group of ``size`` settled stays (one segment each).  Not counted: the
    claims of due runs, whose number follows the machine's speed on PostgreSQL (a worker
    whose segments are slow claims a few runs at a time, ``_claim_size``), not the group."""
    stays = [_stay(app, user, charged="1.00", paid="1.00") for _ in range(size)]
    group = _group(app, user, stays)
    costs: list[tuple[int, int]] = []
    while pending := len(_view(app, user, group).pending):
        tables = ("kumiko_workflow_runs", "kumiko_workflow_parts")
        with statements(app.engine) as sent, bytes_read(app.engine, *tables) as got:
            app.run_worker(once=True)
        if pending - len(_view(app, user, group).pending) == BATCH and len(costs) < 3:
            claims = sum("FROM kumiko_workflow_runs" in q and "SKIP LOCKED" in q for q in sent)
            costs.append((len(sent) - claims, sum(v for k, v in got.items() if not k.endswith(" rows"))))
    _drain(app)
    assert _view(app, user, group).status == "completed"
    return costs


def test_a_segment_of_a_group_of_500_costs_what_one_of_a_group_of_60_does(app: App, user: User) -> None:
    small = _batch_costs(app, user, BATCH * 3)
    large = _batch_costs(app, user, 500)
    print("statements, bytes of run state read per segment:", small, large)
    assert len(small) >= 1 and len(large) == 3
    assert {n for n, _ in large} == {n for n, _ in small}  # every segment sends as many statements
    assert max(b for _, b in large) <= max(b for _, b in small) * 1.5  # and reads about as much run state
