"""Temporal's money-transfer sample, ported (examples/ports/money_transfer.py), on SQLite and
PostgreSQL: a workflow that changes another feature's aggregates only through its handlers
(``call_feature`` inside ``retry``), compensates a deposit it cannot make, and — started
many times at once, transfers crossing between two accounts — moves every amount once:
an attempt that lost a race is rolled back and made again by a worker, never twice."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from examples.ports.bank import (
    Account,
    CloseAccount,
    Deposit,
    Deposited,
    GetBalance,
    OpenAccount,
    Withdrawn,
    bank,
    close_account,
    deposit,
    get_balance,
    open_account,
)
from examples.ports.money_transfer import MoneyTransfer, money_transfer, payments
from kumiko_typed import App, Ok, User
from kumiko_typed.testing import FakeClock

D = Decimal
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock) -> App:
    return app_on([bank, payments], clock=clock)


@pytest.fixture
def alice() -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def opened(app: App, user: User, funds: str) -> uuid.UUID:
    result = app.dispatch(open_account, OpenAccount("Alice", "alice@example.com"), user=user)
    assert isinstance(result, Ok), result
    assert isinstance(app.dispatch(deposit, Deposit(result.data, D(funds)), user=user), Ok)
    account: uuid.UUID = result.data
    return account


def balance(app: App, user: User, account: uuid.UUID) -> Decimal:
    result = app.query(get_balance, GetBalance(account), user=user)
    assert isinstance(result, Ok), result
    return result.data


def moves(app: App, user: User, account: uuid.UUID) -> list[object]:
    """The account's withdrawals and deposits, in stream order (after its opening)."""
    stream = app.read_stream(Account, account, user=user)
    assert isinstance(stream, Ok), stream
    return [e.event for e in stream.data if isinstance(e.event, (Withdrawn, Deposited))]


def transfer(app: App, user: User, source: uuid.UUID, target: uuid.UUID, amount: str) -> Ok[str]:
    run_id = app.start_workflow(money_transfer, MoneyTransfer(source, target, D(amount)), user=user)
    result = app.result(money_transfer, run_id, user=user)
    assert isinstance(result, Ok), (result, app.get_run(run_id))
    return result


def test_a_transfer_withdraws_and_deposits_in_one_run(app: App, alice: User) -> None:
    a, b = opened(app, alice, "100"), opened(app, alice, "5")
    assert transfer(app, alice, a, b, "30") == Ok("transferred")
    assert (balance(app, alice, a), balance(app, alice, b)) == (D("70.00"), D("35.00"))
    assert moves(app, alice, a) == [Deposited(D("100.00")), Withdrawn(D("30.00"))]
    assert moves(app, alice, b) == [Deposited(D("5.00")), Deposited(D("30.00"))]


def test_an_amount_the_account_cannot_cover_moves_nothing(app: App, alice: User) -> None:
    a, b = opened(app, alice, "10"), opened(app, alice, "5")
    assert transfer(app, alice, a, b, "30") == Ok("insufficient funds")
    assert moves(app, alice, a) == [Deposited(D("10.00"))]
    assert moves(app, alice, b) == [Deposited(D("5.00"))]


def test_a_closed_target_gets_nothing_and_the_money_goes_back(app: App, alice: User) -> None:
    a, b = opened(app, alice, "100"), opened(app, alice, "5")
    assert isinstance(app.dispatch(close_account, CloseAccount(b), user=alice), Ok)
    assert transfer(app, alice, a, b, "30") == Ok("refunded")
    assert balance(app, alice, a) == D("100.00")
    assert moves(app, alice, a) == [Deposited(D("100.00")), Withdrawn(D("30.00")), Deposited(D("30.00"))]
    assert moves(app, alice, b) == [Deposited(D("5.00"))]


def test_crossing_transfers_started_at_once_each_move_their_amount_once(
    app: App, alice: User, db_url: str, clock: FakeClock
) -> None:
    """Eight runs started together from eight Apps (own engines), half of them each way
    (4 x 25 is covered whichever goes first):
    on PostgreSQL the first segments race (and deadlock on the locked reads); a lost
    attempt is rolled back, and a worker makes it again after its backoff."""
    a, b = opened(app, alice, "100"), opened(app, alice, "100")
    racers = [App([bank, payments], database_url=db_url, clock=clock) for _ in range(8)]
    started: list[uuid.UUID] = []
    barrier = threading.Barrier(len(racers))

    def start(n: int) -> None:
        source, target = (a, b) if n % 2 else (b, a)
        barrier.wait()
        started.append(racers[n].start_workflow(money_transfer, MoneyTransfer(source, target, D("25")), user=alice))

    threads = [threading.Thread(target=start, args=(n,)) for n in range(len(racers))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(started) == len(racers)
        for _ in range(10):  # a lost attempt waits 1 s, then 2 s, ...: well within 10 passes
            if all(run.status == "completed" for run in app.runs(money_transfer)):
                break
            clock.advance(seconds=20)
            app.run_worker(once=True)
        assert Counter(str(app.result(money_transfer, r, user=alice)) for r in started) == {
            str(Ok("transferred")): len(racers)
        }
    finally:
        for racer in racers:
            racer.dispose()
    assert (balance(app, alice, a), balance(app, alice, b)) == (D("100.00"), D("100.00"))
    for account in (a, b):
        made = Counter(type(e).__name__ for e in moves(app, alice, account))
        assert made == {"Deposited": 1 + 4, "Withdrawn": 4}  # the opening deposit, then 4 each way
