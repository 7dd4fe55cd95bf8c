"""Temporal's expense sample, ported (examples/ports/expense.py), on SQLite and PostgreSQL:
the payment is a webhook to a real HTTP receiver on 127.0.0.1, the auto-rejection mail goes
to a real maildir, and the App's fake clock moves the deadlines."""

from __future__ import annotations

import email
import email.policy
import json
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from _receiver import Receiver

from examples.ports.expense import (
    DECIDE_WITHIN,
    PAYMENT_WITHIN,
    ByStatus,
    ConfirmPayment,
    Decide,
    Expense,
    ExpenseDecided,
    ExpenseLine,
    FileExpense,
    approve,
    confirm_payment,
    expense_flow,
    expenses,
    file_expense,
    list_expenses,
    reject,
)
from kumiko_typed import App, Failure, MaildirTransport, Ok, User, WriteHandler
from kumiko_typed.testing import FakeClock

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TENANT, OTHER = uuid.uuid4(), uuid.uuid4()
ANA = User(id=uuid.uuid4(), tenant_id=TENANT, roles={"Employee"})
MANAGER = User(id=uuid.uuid4(), tenant_id=TENANT, roles={"Manager"})
STRANGER = User(id=uuid.uuid4(), tenant_id=OTHER, roles={"Manager"})
PAYMENTS = User(id=uuid.uuid4(), tenant_id=TENANT, roles={"PaymentService"})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def app(
    app_on: Callable[..., App], clock: FakeClock, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> App:
    monkeypatch.setenv("EXPENSE_PAYMENTS_URL", receiver.base)
    return app_on([expenses], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))


def filed(app: App, amount: str = "42.50", user: User = ANA) -> uuid.UUID:
    result = app.dispatch(file_expense, FileExpense("ana@example.com", "Train to Lyon", Decimal(amount)), user=user)
    assert isinstance(result, Ok), result
    expense_id: uuid.UUID = result.data
    return expense_id


def run_of(app: App) -> uuid.UUID:
    (run,) = app.runs(workflow="expenses:expense")
    return run.run_id


def status_of(app: App, expense: uuid.UUID) -> str:
    for status in ("submitted", "approved", "rejected", "expired", "paid", "payment-timed-out"):
        listed = app.query(list_expenses, ByStatus(status), user=MANAGER)
        assert isinstance(listed, Ok), listed
        if any(line.expense_id == expense for line in listed.data):
            return status
    raise AssertionError("the expense is listed under no status")


def mail(tmp_path: Path) -> list[tuple[str, str]]:
    folder = tmp_path / "mail"
    parsed = [email.message_from_bytes(p.read_bytes(), policy=email.policy.default) for p in folder.glob("*.eml")]
    return [(str(m["To"]), str(m["Subject"])) for m in parsed]


def test_an_approved_expense_is_paid_once_confirmed(app: App, receiver: Receiver) -> None:
    expense = filed(app)
    assert app.run_worker(once=True)["started"] == 1
    run = app.get_run(run_of(app))
    assert run is not None and (run.status, run.path) == ("suspended", "decision")

    assert app.dispatch(approve, Decide(expense), user=MANAGER) == Ok("approved")
    counts = app.run_worker(once=True)  # the decision wakes the run; the payment goes out in the same pass
    assert (counts["resumed"], counts["sent"]) == (1, 1)
    (paid,) = receiver.to("/pay")
    assert json.loads(paid.body) == {"expense_id": str(expense), "amount": "42.50"}
    assert paid.headers["idempotency-key"] == str(app.outbox()[0].id)
    run = app.get_run(run_of(app))
    assert run is not None and (run.status, run.path) == ("suspended", "pay/on_true/confirmation")
    assert status_of(app, expense) == "approved"

    assert app.dispatch(confirm_payment, ConfirmPayment(expense, "PAY-1"), user=PAYMENTS) == Ok("PAY-1")
    app.run_worker(once=True)
    assert app.result(expense_flow, run_of(app), user=ANA) == Ok("paid")
    assert app.query(list_expenses, ByStatus("paid"), user=MANAGER) == Ok(
        [ExpenseLine(expense, "ana@example.com", Decimal("42.50"), "paid")]
    )
    again = app.dispatch(confirm_payment, ConfirmPayment(expense, "PAY-2"), user=PAYMENTS)
    assert again == Failure("unprocessable", "the expense is paid, not awaiting payment")


def test_a_rejected_expense_pays_nothing_and_stays_rejected(app: App, receiver: Receiver, tmp_path: Path) -> None:
    expense = filed(app)
    app.run_worker(once=True)
    assert app.dispatch(reject, Decide(expense), user=MANAGER) == Ok("rejected")
    app.run_worker(once=True)
    assert app.result(expense_flow, run_of(app), user=ANA) == Ok("rejected")
    assert receiver.requests == [] and mail(tmp_path) == []
    late = app.dispatch(approve, Decide(expense), user=MANAGER)
    assert late == Failure("unprocessable", "the expense is rejected, not awaiting a decision")
    assert status_of(app, expense) == "rejected"


def test_deciding_twice_or_both_ways_is_refused(app: App) -> None:
    expense = filed(app)
    app.run_worker(once=True)
    assert app.dispatch(approve, Decide(expense), user=MANAGER) == Ok("approved")
    refused = Failure("unprocessable", "the expense is approved, not awaiting a decision")
    assert app.dispatch(approve, Decide(expense), user=MANAGER) == refused
    assert app.dispatch(reject, Decide(expense), user=MANAGER) == refused
    app.run_worker(once=True)
    run = app.get_run(run_of(app))
    assert run is not None and run.path == "pay/on_true/confirmation"


def test_no_decision_in_time_rejects_and_mails_the_submitter(app: App, clock: FakeClock, tmp_path: Path) -> None:
    expense = filed(app)
    app.run_worker(once=True)
    clock.advance(DECIDE_WITHIN - timedelta(seconds=1))
    assert app.run_worker(once=True)["resumed"] == 0
    clock.advance(seconds=1)
    counts = app.run_worker(once=True)
    assert (counts["resumed"], counts["sent"]) == (1, 1)
    assert app.result(expense_flow, run_of(app), user=ANA) == Ok("expired")
    assert mail(tmp_path) == [("ana@example.com", "Your expense was rejected")]
    assert status_of(app, expense) == "expired"
    late = app.dispatch(approve, Decide(expense), user=MANAGER)
    assert late == Failure("unprocessable", "the expense is expired, not awaiting a decision")


def test_a_decision_after_the_deadline_is_refused_before_any_worker_took_the_timeout(
    app: App, clock: FakeClock, receiver: Receiver
) -> None:
    """The workers were down over the deadline: the expense still reads ``submitted``, but
    the run will time out (an event that occurred after the timeout is no answer), so the
    handler must refuse, not answer ``Ok`` for an approval that is then ignored."""
    expense = filed(app)
    app.run_worker(once=True)
    clock.advance(DECIDE_WITHIN)
    late = app.dispatch(approve, Decide(expense), user=MANAGER)
    assert late == Failure("unprocessable", "the time to decide on the expense has run out")
    app.run_worker(once=True)
    assert app.result(expense_flow, run_of(app), user=ANA) == Ok("expired")
    assert receiver.requests == []


def test_a_decision_a_second_before_the_deadline_counts(app: App, clock: FakeClock, receiver: Receiver) -> None:
    """Read by a worker only after the deadline passed, the approval still wins: it occurred before."""
    expense = filed(app)
    app.run_worker(once=True)
    clock.advance(DECIDE_WITHIN - timedelta(seconds=1))
    assert app.dispatch(approve, Decide(expense), user=MANAGER) == Ok("approved")
    clock.advance(hours=1)
    app.run_worker(once=True)
    run = app.get_run(run_of(app))
    assert run is not None and run.path == "pay/on_true/confirmation"
    assert len(receiver.to("/pay")) == 1


def test_a_manager_of_another_tenant_cannot_decide_nor_see(app: App) -> None:
    expense = filed(app)
    app.run_worker(once=True)
    for handler in (approve, reject):
        refused = app.dispatch(handler, Decide(expense), user=STRANGER)
        assert isinstance(refused, Failure) and refused.code == "not_found", refused
        assert str(expense) not in refused.message
    assert app.query(list_expenses, ByStatus("submitted"), user=STRANGER) == Ok([])
    run = app.get_run(run_of(app))
    assert run is not None and (run.status, run.path) == ("suspended", "decision")
    assert status_of(app, expense) == "submitted"


def test_an_employee_cannot_approve_their_own_expense(app: App) -> None:
    expense = filed(app)
    refused = app.dispatch(approve, Decide(expense), user=ANA)
    assert isinstance(refused, Failure) and refused.code == "access_denied"


def test_the_payment_is_retried_with_one_idempotency_key(app: App, clock: FakeClock, receiver: Receiver) -> None:
    receiver.respond = lambda index, _path: (503, {}) if index < 2 else (200, {})
    expense = filed(app)
    app.run_worker(once=True)
    app.dispatch(approve, Decide(expense), user=MANAGER)
    assert app.run_worker(once=True)["retried"] == 1
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["retried"] == 1
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["sent"] == 1
    attempts = receiver.to("/pay")
    assert len(attempts) == 3 and len({a.headers["idempotency-key"] for a in attempts}) == 1
    app.dispatch(confirm_payment, ConfirmPayment(expense, "PAY-9"), user=PAYMENTS)
    app.run_worker(once=True)
    assert app.result(expense_flow, run_of(app), user=ANA) == Ok("paid")


def test_no_confirmation_in_time_leaves_the_expense_unpaid(app: App, clock: FakeClock) -> None:
    expense = filed(app)
    app.run_worker(once=True)
    app.dispatch(approve, Decide(expense), user=MANAGER)
    app.run_worker(once=True)
    clock.advance(PAYMENT_WITHIN)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(expense_flow, run_of(app), user=ANA) == Ok("payment-timed-out")
    assert status_of(app, expense) == "payment-timed-out"
    late = app.dispatch(confirm_payment, ConfirmPayment(expense, "PAY-1"), user=PAYMENTS)
    assert late == Failure("unprocessable", "the expense is payment-timed-out, not awaiting payment")


def test_listing_by_status_is_per_tenant_and_ordered(app: App, clock: FakeClock) -> None:
    first = filed(app, "10.00")
    clock.advance(minutes=1)
    second = filed(app, "20.00")
    other = filed(app, "30.00", user=User(id=uuid.uuid4(), tenant_id=OTHER, roles={"Employee"}))
    app.run_worker(once=True)
    app.dispatch(reject, Decide(second), user=MANAGER)
    listed = app.query(list_expenses, ByStatus("submitted"), user=MANAGER)
    assert isinstance(listed, Ok) and [line.expense_id for line in listed.data] == [first]
    listed = app.query(list_expenses, ByStatus("rejected"), user=MANAGER)
    assert isinstance(listed, Ok) and [line.expense_id for line in listed.data] == [second]
    theirs = app.query(list_expenses, ByStatus("submitted"), user=STRANGER)
    assert isinstance(theirs, Ok) and [line.expense_id for line in theirs.data] == [other]
    unknown = app.query_json("expenses:expense:list", {"status": "lost"}, user=MANAGER)
    assert isinstance(unknown, Failure) and unknown.code == "validation_error"


def test_an_approval_and_a_rejection_at_once_decide_once(app: App) -> None:
    """Two managers at the same moment: one decision is recorded, the other is told so by a
    Failure (the loser's read is stale: ``version_conflict`` on PostgreSQL, or it reads the
    decision, ``unprocessable``), never an internal error."""
    expense = filed(app)
    app.run_worker(once=True)
    other = User(id=uuid.uuid4(), tenant_id=TENANT, roles={"Manager"})
    start = threading.Barrier(2)
    results: dict[str, object] = {}

    def decide(name: str, handler: WriteHandler[Decide, str], user: User) -> None:
        start.wait()
        results[name] = app.dispatch(handler, Decide(expense), user=user)

    threads = [
        threading.Thread(target=decide, args=("approve", approve, MANAGER)),
        threading.Thread(target=decide, args=("reject", reject, other)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    oks = [r for r in results.values() if isinstance(r, Ok)]
    failures = [r for r in results.values() if isinstance(r, Failure)]
    assert len(oks) == 1 and len(failures) == 1, results
    assert failures[0].code in ("unprocessable", "version_conflict"), failures
    stream = app.read_stream(Expense, expense, user=MANAGER)
    assert isinstance(stream, Ok)
    assert [type(e.event) for e in stream.data].count(ExpenseDecided) == 1
    app.run_worker(once=True)
    assert status_of(app, expense) == oks[0].data
