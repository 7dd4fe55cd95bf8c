"""Temporal's money-transfer sample, ported as a durable workflow over the bank port's
accounts (examples/ports/bank.py): withdraw from one account, deposit into another, and
when the deposit cannot be made, put the money back.

The accounts belong to the ``bank`` feature, so the run changes them only through its
handlers, with ``call_feature`` (boot refuses an ``append_event`` on another feature's
aggregate).  Each call is in a ``retry``: an attempt that loses a race with another
writer of the account (``version_conflict``) is rolled back and tried again after a
second, by a worker.  A run cannot catch a step's Failure, as a Temporal workflow catches
a failed activity: it decides beforehand instead, on the accounts it reads locked
(``with_for_update``), so nothing it decided on changes before its call is made — an
overdrawn or closed account is an outcome, not a failed run.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import attrs
from sqlalchemy import select

from kumiko_typed import Feature, manual, ok

from .bank import Account, Deposit, Withdraw, deposit, withdraw

#: How long a run waits before it tries a call that lost a race again (doubling).
RETRY_AFTER = timedelta(seconds=1)


def _positive(_instance: object, attribute: attrs.Attribute[Decimal], value: Decimal) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive")


@attrs.frozen
class MoneyTransfer:
    from_id: uuid.UUID
    to_id: uuid.UUID
    amount: Decimal = attrs.field(validator=_positive)


payments = Feature("payments", requires=["call_feature"])


def _outcome(funded: bool, deposited: Decimal | None) -> str:
    if not funded:
        return "insufficient funds"
    return "refunded" if deposited is None else "transferred"


money_transfer = payments.workflow(
    "transfer",
    trigger=manual(MoneyTransfer),
    pipeline=payments.workflow_pipeline(MoneyTransfer)
    # 1. Withdraw, if the account can cover it: decided on the row read locked.
    .retry(
        name="withdraw",
        times=5,
        base_delay=RETRY_AFTER,
        do=lambda b: (
            b.get_one("debit", lambda c: select(Account).where(Account.id == c.payload.from_id).with_for_update())
            .compute(
                "funded",
                lambda c: (
                    not c.steps["debit"].closed
                    and c.steps["debit"].balance + c.steps["debit"].overdraft_limit >= c.payload.amount
                ),
            )
            .branch(
                name="take",
                when=lambda c: c.steps["funded"],
                on_true=lambda b: b.call_feature(
                    "withdrawn", withdraw, payload=lambda c: Withdraw(c.payload.from_id, c.payload.amount)
                ),
            )
        ),
    )
    # 2. Deposit, if the other account is still open.
    .branch(
        name="move",
        when=lambda c: c.steps["funded"],
        on_true=lambda b: (
            b.retry(
                name="deposit",
                times=5,
                base_delay=RETRY_AFTER,
                do=lambda b: b.get_one(
                    "credit", lambda c: select(Account).where(Account.id == c.payload.to_id).with_for_update()
                ).branch(
                    name="give",
                    when=lambda c: not c.steps["credit"].closed,
                    on_true=lambda b: b.call_feature(
                        "deposited", deposit, payload=lambda c: Deposit(c.payload.to_id, c.payload.amount)
                    ),
                ),
            )
            # 3. Compensate: the money goes back where it came from.
            .branch(
                name="refund",
                when=lambda c: c.steps["deposited"] is None,
                on_true=lambda b: b.retry(
                    name="compensate",
                    times=5,
                    base_delay=RETRY_AFTER,
                    do=lambda b: b.call_feature(
                        "refunded", deposit, payload=lambda c: Deposit(c.payload.from_id, c.payload.amount)
                    ),
                ),
            )
        ),
    )
    .return_(lambda c: ok(_outcome(c.steps["funded"], c.steps["deposited"]))),
)
