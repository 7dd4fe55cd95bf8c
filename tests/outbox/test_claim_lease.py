"""Claims and leases of outbox rows (docs/operations.md, "Claims and leases"), on SQLite
and PostgreSQL, against a real HTTP receiver on 127.0.0.1 that holds a request as long as
the test says, and a fake clock moved past the lease.

A claimed row is not taken by a second worker while its lease runs; after it, it is.  The
outcome of the first worker's delivery, arriving after that, changes nothing: the row has
been claimed anew.  And a row is started only while at least half its lease lies ahead."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import Hook, hook_feature

from kumiko_typed import App, User, ok
from kumiko_typed._outbox import CLAIM_LEASE, START_WITHIN
from kumiko_typed._tables import outbox
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

f, hook = hook_feature("lease")


class Held:
    """Holds the requests numbered in ``held`` until :meth:`answer` releases them with a status."""

    def __init__(self, *held: int) -> None:
        self.entered = {i: threading.Event() for i in held}
        self.released = {i: threading.Event() for i in held}
        self.status = dict.fromkeys(held, 200)

    def respond(self, index: int, _path: str) -> tuple[int, dict[str, str]]:
        if index in self.entered:
            self.entered[index].set()
            self.released[index].wait(60)
            return self.status[index], {}
        return 200, {}

    def answer(self, index: int, status: int) -> None:
        self.status[index] = status
        self.released[index].set()

    def release_all(self) -> None:
        for released in self.released.values():
            released.set()


class Pass:
    """A worker's pass in a thread of its own (its delivery is held by the receiver)."""

    def __init__(self, app: App) -> None:
        self.counts: dict[str, int] = {}
        self.thread = threading.Thread(target=lambda: self.counts.update(app.run_worker(once=True)), daemon=True)
        self.thread.start()

    def join(self) -> dict[str, int]:
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.counts


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def held(receiver: Receiver) -> Iterator[Callable[..., Held]]:
    made: list[Held] = []

    def hold(*indexes: int) -> Held:
        made.append(Held(*indexes))
        receiver.respond = made[-1].respond
        return made[-1]

    yield hold
    for h in made:
        h.release_all()


def _worker(app_on: Callable[..., App], clock: FakeClock) -> App:
    """An App whose client outwaits the receiver: a held delivery hangs until released."""
    return app_on([f], clock=clock, http=httpx.Client(timeout=90))


def _row(app: App) -> tuple[object, ...]:
    with app.engine.connect() as conn:
        (row,) = conn.execute(
            sa.select(outbox.c.status, outbox.c.attempts, outbox.c.last_error, outbox.c.next_attempt_at)
        ).all()
    return tuple(row)


@pytest.mark.parametrize("stale_answer", [200, 500])
def test_a_claimed_row_is_taken_by_another_worker_only_after_its_lease_and_the_stale_outcome_is_dropped(
    app_on: Callable[..., App],
    receiver: Receiver,
    held: Callable[..., Held],
    clock: FakeClock,
    user: User,
    stale_answer: int,
) -> None:
    peer = held(0)
    first, second = _worker(app_on, clock), _worker(app_on, clock)
    assert first.dispatch(hook, Hook(receiver.url()), user=user) == ok(None)
    slow = Pass(first)
    assert peer.entered[0].wait(30), "the first worker never reached the receiver"
    assert _row(second) == ("pending", 0, None, T0 + CLAIM_LEASE)  # claimed: due when its lease ends

    assert second.run_worker(once=True)["sent"] == 0
    clock.advance(CLAIM_LEASE - timedelta(microseconds=1))
    assert second.run_worker(once=True)["sent"] == 0
    assert len(receiver.requests) == 1
    clock.advance(microseconds=1)
    assert second.run_worker(once=True)["sent"] == 1  # the lease ran out: claimed again, delivered
    assert _row(second) == ("sent", 1, None, None)

    peer.answer(0, stale_answer)
    assert slow.join() == {"started": 0, "resumed": 0, "sent": 0, "retried": 0, "dead": 0}
    assert _row(second) == ("sent", 1, None, None)  # the first worker's outcome came too late
    keys = [r.headers["idempotency-key"] for r in receiver.requests]
    assert len(keys) == 2 and len(set(keys)) == 1


def test_a_stale_failure_leaves_the_new_claim_in_flight_alone(
    app_on: Callable[..., App], receiver: Receiver, held: Callable[..., Held], clock: FakeClock, user: User
) -> None:
    """The first worker's failure arrives while the second worker's delivery of the row is
    under way: the row keeps the second claim's lease, and that claim's outcome is kept."""
    peer = held(0, 1)
    first, second, third = _worker(app_on, clock), _worker(app_on, clock), _worker(app_on, clock)
    assert first.dispatch(hook, Hook(receiver.url()), user=user) == ok(None)
    stale = Pass(first)
    assert peer.entered[0].wait(30)
    clock.advance(CLAIM_LEASE)
    fresh = Pass(second)
    assert peer.entered[1].wait(30)

    peer.answer(0, 500)
    assert stale.join()["retried"] == 0
    assert _row(third) == ("pending", 0, None, T0 + 2 * CLAIM_LEASE)  # still the second claim's
    assert third.run_worker(once=True)["sent"] == 0

    peer.answer(1, 200)
    assert fresh.join()["sent"] == 1
    assert _row(third) == ("sent", 1, None, None)
    assert len(receiver.requests) == 2


def test_a_delivery_starts_with_at_least_half_its_lease_left(
    app_on: Callable[..., App], receiver: Receiver, clock: FakeClock, user: User
) -> None:
    """One delivery at a time; the first one takes longer than ``START_WITHIN``.  The rows
    of the batch it has not started yet are handed back and claimed anew (here by the same
    worker, in the same pass) instead of being started late, near the end of the lease."""
    app = app_on([f], clock=clock, delivery_concurrency=1)
    paths = [f"/row/{i}" for i in range(10)]  # one claim
    for path in paths:
        assert app.dispatch(hook, Hook(receiver.url(path)), user=user) == ok(None)
    lease_left: dict[str, timedelta] = {}

    def respond(_index: int, path: str) -> tuple[int, dict[str, str]]:
        with app.engine.connect() as conn:
            rows = conn.execute(sa.select(outbox.c.message, outbox.c.next_attempt_at)).all()
        (due,) = [r.next_attempt_at for r in rows if r.message["url"] == receiver.url(path)]
        lease_left[path] = due - clock()
        if len(lease_left) == 1:
            clock.advance(START_WITHIN + timedelta(seconds=1))  # a slow first delivery
        return 200, {}

    receiver.respond = respond
    assert app.run_worker(once=True)["sent"] == 10
    assert sorted(r.path for r in receiver.requests) == sorted(paths)  # each row once
    assert min(lease_left.values()) >= CLAIM_LEASE - START_WITHIN, lease_left
    assert {i.status for i in app.outbox()} == {"sent"}
