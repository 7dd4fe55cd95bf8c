"""Temporal's expense sample, ported: an employee files an expense; its creation event
starts a workflow that waits for a manager's decision (a signal in Temporal: here an event
the run waits for, until the expense's decision deadline, after which the expense is
rejected and the submitter mailed); an approved expense is paid through the payment
service (a webhook, retried by the outbox, with an ``Idempotency-Key``), which confirms
later by calling ``payment:confirm``; the run waits for that confirmation and marks the
expense paid.

The decision deadline is stored on the expense and used twice, by one rule: the handlers
refuse a decision at or after it, and the run's wait times out at it.  So a manager who
decides a second late is told so, instead of getting ``Ok`` for a decision the run (which
counts an event by the time it occurred) would then ignore.

The payment service's URL comes from the environment (``EXPENSE_PAYMENTS_URL``) when a
step runs.
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal

import attrs
from sqlalchemy import DateTime, Numeric, String, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Feature, RetryPolicy, WriteHandler, fail, mail_address, ok, on_event

DECIDE_WITHIN = timedelta(days=3)
PAYMENT_WITHIN = timedelta(days=1)
#: How the outbox retries a payment request the service did not accept.
DELIVERY = RetryPolicy(times=4, base_delay=timedelta(minutes=1))

Status = Literal["submitted", "approved", "rejected", "expired", "paid", "payment-timed-out"]


def payments_url(path: str) -> str:
    return os.environ.get("EXPENSE_PAYMENTS_URL", "https://payments.example") + path


class Expense(Entity):
    __tablename__ = "exp_expense"
    submitter: Mapped[str] = mapped_column(String(254))
    description: Mapped[str] = mapped_column(String(200))
    amount: Mapped[Decimal] = mapped_column(Numeric(12, 2))
    decide_by: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(20), default="submitted", index=True)
    payment_reference: Mapped[str | None] = mapped_column(String(80), default=None)


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class ExpenseCreated:
    expense_id: uuid.UUID
    submitter: str
    amount: Decimal
    decide_by: datetime


@attrs.frozen
class ExpenseDecided:
    expense_id: uuid.UUID
    approved: bool
    manager: uuid.UUID


@attrs.frozen
class DecisionExpired:
    expense_id: uuid.UUID


@attrs.frozen
class PaymentConfirmed:
    expense_id: uuid.UUID
    reference: str


@attrs.frozen
class PaymentSettled:
    """The run's own record of the outcome: paid, or no confirmation in time."""

    expense_id: uuid.UUID
    paid: bool


# --- payloads ------------------------------------------------------------------------------


@attrs.frozen
class FileExpense:
    submitter: str = attrs.field(validator=attrs.validators.and_(attrs.validators.max_len(254), mail_address))
    description: str = attrs.field(validator=attrs.validators.max_len(200))
    amount: Decimal = attrs.field(validator=attrs.validators.gt(Decimal(0)))


@attrs.frozen
class Decide:
    expense_id: uuid.UUID


@attrs.frozen
class ConfirmPayment:
    expense_id: uuid.UUID
    reference: str = attrs.field(
        validator=attrs.validators.and_(attrs.validators.min_len(1), attrs.validators.max_len(80))
    )


@attrs.frozen
class ByStatus:
    status: Status


@attrs.frozen
class ExpenseLine:
    expense_id: uuid.UUID
    submitter: str
    amount: Decimal
    status: str


# --- the feature ---------------------------------------------------------------------------

expenses = Feature("expenses", requires=["mail.send", "webhook.send"])
expenses.entity(Expense)
expenses.event(ExpenseCreated, name="expense-created")
expenses.event(ExpenseDecided, name="expense-decided")
expenses.event(DecisionExpired, name="decision-expired")
expenses.event(PaymentConfirmed, name="expense-payment-confirmed")
expenses.event(PaymentSettled, name="expense-payment-settled")


@expenses.projector(Expense, ExpenseDecided)
def _decided(row: Expense, event: ExpenseDecided) -> None:
    row.status = "approved" if event.approved else "rejected"


@expenses.projector(Expense, DecisionExpired)
def _expired(row: Expense, event: DecisionExpired) -> None:
    row.status = "expired"


@expenses.projector(Expense, PaymentConfirmed)
def _confirmed(row: Expense, event: PaymentConfirmed) -> None:
    row.payment_reference = event.reference


@expenses.projector(Expense, PaymentSettled)
def _settled(row: Expense, event: PaymentSettled) -> None:
    row.status = "paid" if event.paid else "payment-timed-out"


file_expense = expenses.write_handler(
    "expense:file",
    expenses.pipeline(FileExpense)
    .create(
        "expense",
        Expense,
        data=lambda c: Expense(
            submitter=c.payload.submitter,
            description=c.payload.description,
            amount=c.payload.amount,
            decide_by=c.now + DECIDE_WITHIN,
        ),
    )
    .append_event(
        Expense,
        id=lambda c: c.steps["expense"].id,
        event=lambda c: ExpenseCreated(
            c.steps["expense"].id, c.payload.submitter, c.payload.amount, c.steps["expense"].entity.decide_by
        ),
    )
    .return_(lambda c: ok(c.steps["expense"].id)),
    roles=["Employee"],
)


def _decision(name: str, approved: bool) -> WriteHandler[Decide, str]:
    """``expense:approve`` and ``expense:reject``, by one rule.  The read is filtered to the
    manager's tenant, so another tenant's expense is ``not_found``."""
    return expenses.write_handler(
        name,
        expenses.pipeline(Decide)
        .get_one("expense", lambda c: select(Expense).where(Expense.id == c.payload.expense_id))
        .guard(
            lambda c: c.steps["expense"].status == "submitted",
            otherwise=lambda c: fail(
                "unprocessable", f"the expense is {c.steps['expense'].status}, not awaiting a decision"
            ),
        )
        .guard(
            lambda c: c.now < c.steps["expense"].decide_by,
            otherwise=lambda c: fail("unprocessable", "the time to decide on the expense has run out"),
        )
        .append_event(
            Expense,
            id=lambda c: c.payload.expense_id,
            event=lambda c: ExpenseDecided(c.payload.expense_id, approved, c.user.id),
        )
        .return_(lambda c: ok("approved" if approved else "rejected")),
        roles=["Manager"],
    )


approve = _decision("expense:approve", approved=True)
reject = _decision("expense:reject", approved=False)

# The payment service's answer: appends the event the run waits for, once, and only for an
# approved expense.
confirm_payment = expenses.write_handler(
    "payment:confirm",
    expenses.pipeline(ConfirmPayment)
    .get_one("expense", lambda c: select(Expense).where(Expense.id == c.payload.expense_id))
    .guard(
        lambda c: c.steps["expense"].status == "approved" and c.steps["expense"].payment_reference is None,
        otherwise=lambda c: fail("unprocessable", f"the expense is {c.steps['expense'].status}, not awaiting payment"),
    )
    .append_event(
        Expense,
        id=lambda c: c.payload.expense_id,
        event=lambda c: PaymentConfirmed(c.payload.expense_id, c.payload.reference),
    )
    .return_(lambda c: ok(c.payload.reference)),
    roles=["PaymentService"],
)

list_expenses = expenses.query_handler(
    "expense:list",
    expenses.query_pipeline(ByStatus)
    .find_many(
        "expenses",
        lambda c: select(Expense).where(Expense.status == c.payload.status).order_by(Expense.created_at, Expense.id),
    )
    .return_(lambda c: ok([ExpenseLine(e.id, e.submitter, e.amount, e.status) for e in c.steps["expenses"]])),
    roles=["Manager"],
)


def _outcome(decision: ExpenseDecided | None, confirmation: PaymentConfirmed | None) -> str:
    if decision is None:
        return "expired"
    if not decision.approved:
        return "rejected"
    return "paid" if confirmation is not None else "payment-timed-out"


expense_flow = expenses.workflow(
    "expense",
    trigger=on_event(ExpenseCreated),
    pipeline=expenses.workflow_pipeline(ExpenseCreated)
    .wait_for_event(
        "decision",
        ExpenseDecided,
        key=lambda c: c.payload.expense_id,
        event_key=lambda e: e.expense_id,
        timeout=lambda c: c.payload.decide_by,
    )
    .branch(
        name="expire",
        when=lambda c: c.steps["decision"] is None,
        on_true=lambda b: b.append_event(
            Expense, id=lambda c: c.payload.expense_id, event=lambda c: DecisionExpired(c.payload.expense_id)
        ).send_mail(
            to=lambda c: c.payload.submitter,
            subject="Your expense was rejected",
            body=lambda c: f"No manager decided on expense {c.payload.expense_id} in time; it was rejected.",
        ),
    )
    .branch(
        name="pay",
        when=lambda c: (d := c.steps["decision"]) is not None and d.approved,
        on_true=lambda b: (
            b.send_webhook(
                url=lambda c: payments_url("/pay"),
                body=lambda c: {"expense_id": str(c.payload.expense_id), "amount": str(c.payload.amount)},
                retry=DELIVERY,
            )
            .wait_for_event(
                "confirmation",
                PaymentConfirmed,
                key=lambda c: c.payload.expense_id,
                event_key=lambda e: e.expense_id,
                timeout=PAYMENT_WITHIN,
            )
            .append_event(
                Expense,
                id=lambda c: c.payload.expense_id,
                event=lambda c: PaymentSettled(c.payload.expense_id, c.steps["confirmation"] is not None),
            )
        ),
    )
    .compute("outcome", lambda c: _outcome(c.steps["decision"], c.steps["confirmation"]))
    .return_(lambda c: ok(c.steps["outcome"])),
)
