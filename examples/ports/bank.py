"""Bank accounts, as in the ``eventsourcing`` library's example application: open an
account, deposit, withdraw down to the overdraft limit, transfer between two accounts of
one owner, close it; balances are read by queries.

Every change is an event on the account's stream, and the ``bank_account`` row is the
projection of those events (``app.rebuild_projection`` rebuilds it from them alone).
A withdrawal reads the account, decides, and appends the version after the one it read:
two withdrawals racing on one account cannot both spend the same money, the later one is a
``version_conflict`` and its client retries."""

from __future__ import annotations

import uuid
from decimal import Decimal

import attrs
from sqlalchemy import Numeric, String, Uuid, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Failure, Feature, fail, ok

#: Money is kept in cents-exact decimals.
Money = Numeric(14, 2)


def _positive(_instance: object, attribute: attrs.Attribute[Decimal], value: Decimal) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive")


def _not_negative(_instance: object, attribute: attrs.Attribute[Decimal], value: Decimal) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative")


class Account(Entity):
    __tablename__ = "bank_account"
    owner_id: Mapped[uuid.UUID] = mapped_column(Uuid, index=True)
    full_name: Mapped[str] = mapped_column(String(200))
    email: Mapped[str] = mapped_column(String(200))
    balance: Mapped[Decimal] = mapped_column(Money, default=Decimal("0.00"))
    overdraft_limit: Mapped[Decimal] = mapped_column(Money, default=Decimal("0.00"))
    closed: Mapped[bool] = mapped_column(default=False)


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class AccountOpened:
    owner_id: uuid.UUID
    full_name: str
    email: str


@attrs.frozen
class Deposited:
    amount: Decimal


@attrs.frozen
class Withdrawn:
    amount: Decimal


@attrs.frozen
class OverdraftLimitSet:
    limit: Decimal


@attrs.frozen
class AccountClosed:
    reason: str


# --- payloads ------------------------------------------------------------------------------


@attrs.frozen
class OpenAccount:
    full_name: str
    email: str


@attrs.frozen
class Deposit:
    account_id: uuid.UUID
    amount: Decimal = attrs.field(validator=_positive)


@attrs.frozen
class Withdraw:
    account_id: uuid.UUID
    amount: Decimal = attrs.field(validator=_positive)


@attrs.frozen
class Transfer:
    from_id: uuid.UUID
    to_id: uuid.UUID
    amount: Decimal = attrs.field(validator=_positive)


@attrs.frozen
class SetOverdraftLimit:
    account_id: uuid.UUID
    limit: Decimal = attrs.field(validator=_not_negative)


@attrs.frozen
class CloseAccount:
    account_id: uuid.UUID


@attrs.frozen
class GetBalance:
    account_id: uuid.UUID


@attrs.frozen
class MyAccounts:
    include_closed: bool = False


@attrs.frozen
class Statement:
    id: uuid.UUID
    full_name: str
    balance: Decimal
    closed: bool


# --- the feature ---------------------------------------------------------------------------

bank = Feature("bank")
bank.entity(Account)
bank.event(AccountOpened, name="account-opened")
bank.event(Deposited, name="deposited")
bank.event(Withdrawn, name="withdrawn")
bank.event(OverdraftLimitSet, name="overdraft-limit-set")
bank.event(AccountClosed, name="account-closed")


@bank.projector(Account, AccountOpened)
def _opened(row: Account, event: AccountOpened) -> None:
    row.owner_id, row.full_name, row.email = event.owner_id, event.full_name, event.email


@bank.projector(Account, Deposited)
def _deposited(row: Account, event: Deposited) -> None:
    row.balance += event.amount


@bank.projector(Account, Withdrawn)
def _withdrawn(row: Account, event: Withdrawn) -> None:
    row.balance -= event.amount


@bank.projector(Account, OverdraftLimitSet)
def _limit(row: Account, event: OverdraftLimitSet) -> None:
    row.overdraft_limit = event.limit


@bank.projector(Account, AccountClosed)
def _closed(row: Account, event: AccountClosed) -> None:
    row.closed = True


def _closed_account(account: Account, path: str) -> Failure:
    return fail(
        "unprocessable", "the account is closed", [{"path": path, "message": f"account {account.id} is closed"}]
    )


def _insufficient(account: Account, amount: Decimal) -> Failure:
    available = account.balance + account.overdraft_limit
    return fail(
        "unprocessable",
        "insufficient funds",
        [{"path": "$.amount", "message": f"at most {available} is available, not {amount}"}],
    )


open_account = bank.write_handler(
    "account:open",
    bank.pipeline(OpenAccount)
    .create(
        "account",
        Account,
        data=lambda c: Account(owner_id=c.user.id, full_name=c.payload.full_name, email=c.payload.email),
        event=lambda c: AccountOpened(c.user.id, c.payload.full_name, c.payload.email),
    )
    .return_(lambda c: ok(c.steps["account"].id)),
)

deposit = bank.write_handler(
    "account:deposit",
    bank.pipeline(Deposit)
    .get_one("account", lambda c: select(Account).where(Account.id == c.payload.account_id))
    .guard(
        lambda c: not c.steps["account"].closed, otherwise=lambda c: _closed_account(c.steps["account"], "$.account_id")
    )
    .append_event(Account, id=lambda c: c.payload.account_id, event=lambda c: Deposited(c.payload.amount))
    .return_(lambda c: ok(c.steps["account"].balance)),
)

withdraw = bank.write_handler(
    "account:withdraw",
    bank.pipeline(Withdraw)
    .get_one("account", lambda c: select(Account).where(Account.id == c.payload.account_id))
    .guard(
        lambda c: not c.steps["account"].closed, otherwise=lambda c: _closed_account(c.steps["account"], "$.account_id")
    )
    .guard(
        lambda c: c.steps["account"].balance - c.payload.amount >= -c.steps["account"].overdraft_limit,
        otherwise=lambda c: _insufficient(c.steps["account"], c.payload.amount),
    )
    .append_event(Account, id=lambda c: c.payload.account_id, event=lambda c: Withdrawn(c.payload.amount))
    .return_(lambda c: ok(c.steps["account"].balance)),
)

transfer = bank.write_handler(
    "account:transfer",
    bank.pipeline(Transfer)
    .guard(
        lambda c: c.payload.from_id != c.payload.to_id,
        otherwise=lambda c: fail(
            "validation_error",
            "cannot transfer to the same account",
            [{"path": "$.to_id", "message": "same as from_id"}],
        ),
    )
    .get_one("debit", lambda c: select(Account).where(Account.id == c.payload.from_id))
    .get_one("credit", lambda c: select(Account).where(Account.id == c.payload.to_id))
    .guard(
        lambda c: c.steps["debit"].owner_id == c.user.id and c.steps["credit"].owner_id == c.user.id,
        otherwise=lambda c: fail(
            "access_denied", "both accounts must be yours", [{"path": "$.to_id", "message": "another owner's account"}]
        ),
    )
    .guard(lambda c: not c.steps["debit"].closed, otherwise=lambda c: _closed_account(c.steps["debit"], "$.from_id"))
    .guard(lambda c: not c.steps["credit"].closed, otherwise=lambda c: _closed_account(c.steps["credit"], "$.to_id"))
    .guard(
        lambda c: c.steps["debit"].balance - c.payload.amount >= -c.steps["debit"].overdraft_limit,
        otherwise=lambda c: _insufficient(c.steps["debit"], c.payload.amount),
    )
    .append_event(Account, id=lambda c: c.payload.from_id, event=lambda c: Withdrawn(c.payload.amount))
    .append_event(Account, id=lambda c: c.payload.to_id, event=lambda c: Deposited(c.payload.amount))
    .return_(lambda c: ok((c.steps["debit"].balance, c.steps["credit"].balance))),
)

set_overdraft_limit = bank.write_handler(
    "account:set-overdraft-limit",
    bank.pipeline(SetOverdraftLimit)
    .get_one("account", lambda c: select(Account).where(Account.id == c.payload.account_id))
    .guard(
        lambda c: not c.steps["account"].closed, otherwise=lambda c: _closed_account(c.steps["account"], "$.account_id")
    )
    .append_event(Account, id=lambda c: c.payload.account_id, event=lambda c: OverdraftLimitSet(c.payload.limit))
    .return_(lambda c: ok(c.steps["account"].overdraft_limit)),
    roles=["Banker"],
)

close_account = bank.write_handler(
    "account:close",
    bank.pipeline(CloseAccount)
    .get_one("account", lambda c: select(Account).where(Account.id == c.payload.account_id))
    .guard(
        lambda c: not c.steps["account"].closed, otherwise=lambda c: _closed_account(c.steps["account"], "$.account_id")
    )
    .append_event(Account, id=lambda c: c.payload.account_id, event=lambda c: AccountClosed("closed by its owner"))
    .return_(lambda c: ok(c.steps["account"].version)),
)

get_balance = bank.query_handler(
    "account:balance",
    bank.query_pipeline(GetBalance)
    .get_one("account", lambda c: select(Account).where(Account.id == c.payload.account_id))
    .return_(lambda c: ok(c.steps["account"].balance)),
)

my_accounts = bank.query_handler(
    "account:mine",
    bank.query_pipeline(MyAccounts)
    .find_many(
        "accounts",
        lambda c: (
            select(Account)
            .where(Account.owner_id == c.user.id, Account.closed.in_([False, c.payload.include_closed]))
            .order_by(Account.full_name, Account.created_at)
        ),
    )
    .return_(lambda c: ok([Statement(a.id, a.full_name, a.balance, a.closed) for a in c.steps["accounts"]])),
)
