"""The ``eventsourcing`` library's bank-accounts example, ported (examples/ports/bank.py),
on SQLite and PostgreSQL: what its users expect of it, checked on results AND on what is
stored (the account's stream, its row, a rebuild of the row from the stream), and that
racing customers in separate processes never take out more than the overdraft allows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import _bank_racer
import pytest

from examples.ports.bank import (
    Account,
    AccountClosed,
    AccountOpened,
    CloseAccount,
    Deposit,
    Deposited,
    GetBalance,
    MyAccounts,
    OpenAccount,
    OverdraftLimitSet,
    SetOverdraftLimit,
    Statement,
    Transfer,
    Withdraw,
    Withdrawn,
    bank,
    close_account,
    deposit,
    get_balance,
    my_accounts,
    open_account,
    set_overdraft_limit,
    transfer,
    withdraw,
)
from kumiko_typed import App, Failure, Ok, User

REPO = Path(__file__).resolve().parents[2]
RACER = Path(_bank_racer.__file__).resolve()
D = Decimal


@pytest.fixture
def app(app_on: Callable[..., App]) -> App:
    return app_on([bank])


@pytest.fixture
def alice() -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles={"Banker"})


def opened(app: App, user: User, name: str = "Alice", funds: str = "0") -> uuid.UUID:
    result = app.dispatch(open_account, OpenAccount(name, "alice@example.com"), user=user)
    assert isinstance(result, Ok), result
    account: uuid.UUID = result.data
    if D(funds):
        assert isinstance(app.dispatch(deposit, Deposit(account, D(funds)), user=user), Ok)
    return account


def balance(app: App, user: User, account: uuid.UUID) -> Decimal:
    result = app.query(get_balance, GetBalance(account), user=user)
    assert isinstance(result, Ok), result
    return result.data


def test_open_deposit_withdraw_and_the_stream_behind_it(app: App, alice: User) -> None:
    account = opened(app, alice)
    assert app.dispatch(deposit, Deposit(account, D("200.00")), user=alice) == Ok(D("200.00"))
    assert app.dispatch(withdraw, Withdraw(account, D("50.25")), user=alice) == Ok(D("149.75"))
    assert balance(app, alice, account) == D("149.75")

    stream = app.read_stream(Account, account, user=alice)
    assert isinstance(stream, Ok)
    assert [e.event for e in stream.data] == [
        AccountOpened(alice.id, "Alice", "alice@example.com"),
        Deposited(D("200.00")),
        Withdrawn(D("50.25")),
    ]
    assert [e.version for e in stream.data] == [1, 2, 3]
    # The row is the projection of those events alone.
    check = app.rebuild_projection(Account, user=alice, verify=True)
    assert isinstance(check, Ok) and check.data.matches, check


def test_withdrawing_past_the_overdraft_limit_is_refused_naming_the_amount(app: App, alice: User) -> None:
    account = opened(app, alice, funds="100")
    refused = app.dispatch(withdraw, Withdraw(account, D("100.01")), user=alice)
    assert refused == Failure(
        "unprocessable",
        "insufficient funds",
        [{"path": "$.amount", "message": "at most 100.00 is available, not 100.01"}],
    )
    assert refused.http_status == 422
    # A banker grants an overdraft; the account may then go that far below zero, no further.
    assert app.dispatch(set_overdraft_limit, SetOverdraftLimit(account, D("50")), user=alice) == Ok(D("50"))
    assert app.dispatch(withdraw, Withdraw(account, D("150")), user=alice) == Ok(D("-50.00"))
    again = app.dispatch(withdraw, Withdraw(account, D("0.01")), user=alice)
    assert isinstance(again, Failure) and again.details == [
        {"path": "$.amount", "message": "at most 0.00 is available, not 0.01"}
    ]
    assert balance(app, alice, account) == D("-50.00")
    customer = User(id=alice.id, tenant_id=alice.tenant_id)  # no Banker role
    denied = app.dispatch(set_overdraft_limit, SetOverdraftLimit(account, D("1000")), user=customer)
    assert isinstance(denied, Failure) and denied.code == "access_denied"


def test_a_transfer_moves_money_between_one_owners_accounts_or_nothing(app: App, alice: User) -> None:
    current, savings = opened(app, alice, funds="100"), opened(app, alice, "Alice savings")
    assert app.dispatch(transfer, Transfer(current, savings, D("60")), user=alice) == Ok((D("40.00"), D("60.00")))

    short = app.dispatch(transfer, Transfer(current, savings, D("41")), user=alice)
    assert isinstance(short, Failure) and short.code == "unprocessable"
    assert short.details == [{"path": "$.amount", "message": "at most 40.00 is available, not 41"}]
    same = app.dispatch(transfer, Transfer(current, current, D("1")), user=alice)
    assert same == Failure(
        "validation_error", "cannot transfer to the same account", [{"path": "$.to_id", "message": "same as from_id"}]
    )
    bob = User(id=uuid.uuid4(), tenant_id=alice.tenant_id)  # same bank, another owner
    bobs = opened(app, bob, "Bob")
    theirs = app.dispatch(transfer, Transfer(current, bobs, D("1")), user=alice)
    assert isinstance(theirs, Failure) and theirs.code == "access_denied"
    assert app.dispatch(close_account, CloseAccount(savings), user=alice) == Ok(3)
    closed = app.dispatch(transfer, Transfer(current, savings, D("1")), user=alice)
    assert isinstance(closed, Failure) and closed.details == [
        {"path": "$.to_id", "message": f"account {savings} is closed"}
    ]
    # None of the refused transfers wrote anything.
    assert (balance(app, alice, current), balance(app, alice, savings), balance(app, bob, bobs)) == (
        D("40.00"),
        D("60.00"),
        D("0.00"),
    )
    stream = app.read_stream(Account, savings, user=alice)
    assert isinstance(stream, Ok)
    assert [e.event for e in stream.data][1:] == [Deposited(D("60")), AccountClosed("closed by its owner")]
    mine = app.query(my_accounts, MyAccounts(include_closed=True), user=alice)
    assert mine == Ok(
        [Statement(current, "Alice", D("40.00"), False), Statement(savings, "Alice savings", D("60.00"), True)]
    )
    assert app.query(my_accounts, MyAccounts(), user=alice) == Ok([Statement(current, "Alice", D("40.00"), False)])


def test_another_tenants_account_does_not_exist(app: App, alice: User) -> None:
    account = opened(app, alice, funds="10")
    mallory = User(id=alice.id, tenant_id=uuid.uuid4())
    for result in (
        app.dispatch(withdraw, Withdraw(account, D("1")), user=mallory),
        app.query(get_balance, GetBalance(account), user=mallory),
    ):
        assert isinstance(result, Failure) and result.code == "not_found"
    assert balance(app, alice, account) == D("10.00")


# Amounts from untrusted JSON: a JSON number or a decimal string is an amount; what is not
# positive, or holds fractions of a cent, is refused at the field.
AMOUNTS: list[tuple[object, str | dict[str, str]]] = [
    (10.5, "10.50"),
    ("0.30", "0.30"),
    (7, "7.00"),
    ("-1", {"path": "$.amount", "message": "amount must be positive"}),
    (0, {"path": "$.amount", "message": "amount must be positive"}),
    ("0.001", {"path": "$.amount", "message": "must have at most 2 digits after the decimal point"}),
    ("ten", {"path": "$.amount", "message": "expected a decimal string, got 'ten'"}),
]


@pytest.mark.parametrize(("amount", "want"), AMOUNTS, ids=[repr(a) for a, _ in AMOUNTS])
def test_amounts_from_json(app: App, alice: User, amount: object, want: str | dict[str, str]) -> None:
    account = opened(app, alice)
    result = app.dispatch_json("bank:account:deposit", {"account_id": str(account), "amount": amount}, user=alice)
    if isinstance(want, str):
        assert isinstance(result, Ok) and result.data == D(want), result
        assert balance(app, alice, account) == D(want)
    else:
        assert isinstance(result, Failure) and result.code == "validation_error", result
        assert [{k: d[k] for k in ("path", "message")} for d in result.details] == [want]
        assert balance(app, alice, account) == D("0.00")


# --- racing customers, each a process of its own -------------------------------------------------


def _race(
    url: str, mode: str, user: User, a: uuid.UUID, b: uuid.UUID, racers: list[subprocess.Popen[str]]
) -> tuple[Counter[str], Decimal]:
    """Four racers (``crossing``: two each way); every call's code, and the money they moved."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(RACER.parent)])}
    args = [url, "", str(user.id), str(user.tenant_id), str(a), str(b)]
    for index in range(4):
        args[1] = mode if mode != "crossing" else ("cross" if index % 2 else "transfer")
        racers.append(
            subprocess.Popen(
                [sys.executable, str(RACER), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env=env,
            )
        )
    for proc in racers:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr
    for proc in racers:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    codes: Counter[str] = Counter()
    moved = D(0)
    for proc in racers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        line = [x for x in out.splitlines() if x.startswith("result ")][-1]
        result = json.loads(line.removeprefix("result "))
        codes.update(result["codes"])
        moved += D(result["moved"])
    return codes, moved


@pytest.mark.slow
def test_racing_withdrawals_never_overdraw(
    app: App, db_url: str, alice: User, racers: list[subprocess.Popen[str]]
) -> None:
    """Four processes withdraw 10.00 at a time from one account with 200.00 and an overdraft
    of 100.00: exactly 30 withdrawals succeed, whatever the interleaving; a racer whose read
    was overtaken gets ``version_conflict`` (and tries again), never a second spend."""
    account = opened(app, alice, funds="200")
    assert isinstance(app.dispatch(set_overdraft_limit, SetOverdraftLimit(account, D("100")), user=alice), Ok)
    codes, moved = _race(db_url, "withdraw", alice, account, account, racers)
    assert set(codes) <= {"ok", "version_conflict", "unprocessable"}, codes
    assert codes["ok"] == 30 and codes["unprocessable"] == 4, codes
    assert moved == D("300.00")
    assert balance(app, alice, account) == D("-100.00")
    stream = app.read_stream(Account, account, user=alice)
    assert isinstance(stream, Ok) and len(stream.data) == 3 + 30
    assert stream.data[2].event == OverdraftLimitSet(D("100"))


@pytest.mark.slow
def test_crossing_transfers_keep_the_total(
    app: App, db_url: str, alice: User, racers: list[subprocess.Popen[str]]
) -> None:
    """Two processes transfer A→B while two transfer B→A: crossing writers of two aggregates
    (a deadlock on PostgreSQL) lose with ``version_conflict``, and no money appears or vanishes."""
    a, b = opened(app, alice, funds="500"), opened(app, alice, "Alice savings", funds="500")
    codes, _moved = _race(db_url, "crossing", alice, a, b, racers)
    assert set(codes) <= {"ok", "version_conflict", "unprocessable"}, codes
    assert codes["ok"] > 0
    assert balance(app, alice, a) + balance(app, alice, b) == D("1000.00")
    check = app.rebuild_projection(Account, user=alice, verify=True)
    assert isinstance(check, Ok) and check.data.matches, check
