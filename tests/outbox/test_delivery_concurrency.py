"""One worker keeps several deliveries of a batch in flight (``delivery_concurrency``),
each row still delivered once and recorded with its own outcome — on both databases,
against a real HTTP peer on 127.0.0.1 that answers slowly."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import Hook

from kumiko_typed import App, Feature, RetryPolicy, User, _outbox, ok
from kumiko_typed._tables import outbox
from kumiko_typed.testing import FakeClock

T0 = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
#: Bounds a hang only: how long an answer waits for the others it expects beside it.
BOUND = 30


f = Feature("conc", requires=["webhook.send"])
hook = f.write_handler(
    "hook",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}).return_(lambda c: ok(None)),
)
#: One try only: a failure makes the row dead at once.
hook_once = f.write_handler(
    "hook-once",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, retry=RetryPolicy(times=1)).return_(lambda c: ok(None)),
)


class InFlight:
    """Counts the requests the peer is answering at the same time.  Each answer waits
    until as many are in flight as the worker may have (its width, or the rows still to
    go when fewer): the overlap is then there however slowly the machine starts the
    requests (a fixed 0.3 s answer let a loaded CI start the fourth after the first
    ended), and a worker that delivers fewer at once makes each answer wait ``BOUND``."""

    def __init__(self, width: int, rows: int) -> None:
        self.changed = threading.Condition()
        self.width = width
        self.left = rows
        self.now = 0
        self.most = 0

    def respond(self, index: int, path: str) -> tuple[int, dict[str, str]]:
        with self.changed:
            self.now += 1
            self.most = max(self.most, self.now)
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.now >= min(self.width, self.left), timeout=BOUND)
            self.now -= 1
            self.left -= 1
            self.changed.notify_all()
        return (404, {}) if path.startswith("/missing") else (200, {})


def _enqueue(app: App, receiver: Receiver, user: User, paths: list[str]) -> None:
    for path in paths:
        assert app.dispatch(hook, Hook(receiver.url(path)), user=user) == ok(None)


@pytest.mark.parametrize("width", [1, 4])
def test_a_worker_delivers_up_to_its_concurrency_at_once(
    app_on: Callable[..., App], receiver: Receiver, user: User, width: int
) -> None:
    paths = [f"/ok/{i}" for i in range(5)] + ["/missing/1"]
    peer = InFlight(width, len(paths))
    receiver.respond = peer.respond
    app = app_on([f], clock=FakeClock(T0), delivery_concurrency=width)
    _enqueue(app, receiver, user, paths)
    counts = app.run_worker(once=True)
    assert counts["sent"] == 5 and counts["retried"] == 1
    assert peer.most == width  # never more than the bound; with a bound above 1, overlapping
    assert sorted(r.path for r in receiver.requests) == sorted(paths)  # each row once
    by_target = {item.target: item for item in app.outbox()}
    assert {by_target[receiver.url(p)].status for p in paths[:-1]} == {"sent"}
    missing = by_target[receiver.url("/missing/1")]
    assert (missing.status, missing.attempts, missing.last_error) == ("pending", 1, "HTTP 404 Not Found")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_a_delivery_concurrency_below_one_is_a_boot_error(bad: object) -> None:
    from kumiko_typed import BootError

    with pytest.raises(BootError, match="delivery_concurrency must be a positive int"):
        App([f], database_url="sqlite://", delivery_concurrency=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("width", [1, 4])
def test_each_row_of_a_batch_keeps_its_own_outcome(
    app_on: Callable[..., App], receiver: Receiver, user: User, width: int
) -> None:
    """The rows a batch sent are marked together; a failure next to them stays a failure
    of that row alone, and its later success is counted as its second attempt."""
    failing = [True]
    receiver.respond = lambda _i, path: (
        (500, {}) if path == "/never" or (path.startswith("/flaky") and failing[0]) else (200, {})
    )
    clock = FakeClock(T0)
    app = app_on([f], clock=clock, delivery_concurrency=width)
    paths = [f"/flaky/{i}" if i % 3 == 0 else f"/ok/{i}" for i in range(9)]  # one batch
    _enqueue(app, receiver, user, paths)
    assert app.dispatch(hook_once, Hook(receiver.url("/never")), user=user) == ok(None)

    assert app.run_worker(once=True) == {"started": 0, "resumed": 0, "sent": 6, "retried": 3, "dead": 1}
    first = _rows(app)
    for path in paths:
        status, attempts, error, sent_at, next_at = first[receiver.url(path)]
        if path.startswith("/flaky"):
            assert (status, attempts, error, sent_at) == ("pending", 1, "HTTP 500 Internal Server Error", None)
            assert next_at is not None and next_at > T0
        else:
            assert (status, attempts, error, sent_at, next_at) == ("sent", 1, None, T0, None)
    assert first[receiver.url("/never")][:3] == ("dead", 1, "HTTP 500 Internal Server Error")

    failing[0] = False
    clock.advance(hours=1)
    assert app.run_worker(once=True)["sent"] == 3
    second = _rows(app)
    for path in paths[::3]:
        assert second[receiver.url(path)] == ("sent", 2, None, T0 + timedelta(hours=1), None)
    assert all(second[receiver.url(p)] == first[receiver.url(p)] for p in paths if p.startswith("/ok"))
    assert sorted(r.path for r in receiver.requests) == sorted([*paths, *paths[::3], "/never"])  # nothing sent twice


def _rows(app: App) -> dict[str, tuple[object, ...]]:
    """Each outbox row's outcome columns, by target URL."""
    with app.engine.connect() as conn:
        rows = conn.execute(
            sa.select(outbox.c.message, outbox.c.status, outbox.c.attempts, outbox.c.last_error).add_columns(
                outbox.c.sent_at, outbox.c.next_attempt_at
            )
        ).all()
    return {r.message["url"]: (r.status, r.attempts, r.last_error, r.sent_at, r.next_attempt_at) for r in rows}


def test_a_pass_that_fails_sends_none_of_the_deliveries_still_queued(
    app_on: Callable[..., App], receiver: Receiver, user: User, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database goes away while a batch is delivered two at a time: the pass fails
    recording the first outcome.  The deliveries under way end; those still queued in the
    pass's threads do not go out (before, every one did, unrecorded, and went out again
    after the lease)."""
    fault = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    #: Set once the failed pass has cancelled its queued deliveries: the slow answers
    #: wait for it, so what went out does not depend on how busy the machine is (a
    #: fixed sleep let a loaded CI start two more before the pass failed).
    cancelled = threading.Event()

    class Observed(ThreadPoolExecutor):
        def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
            super().shutdown(wait=False, cancel_futures=cancel_futures)
            cancelled.set()
            super().shutdown(wait=wait)

    monkeypatch.setattr(_outbox, "ThreadPoolExecutor", Observed)

    def rename(old: str, new: str) -> None:
        with fault.begin() as conn:
            conn.execute(sa.text(f"ALTER TABLE {old} RENAME TO {new}"))

    def respond(index: int, path: str) -> tuple[int, dict[str, str]]:
        if path == "/fail":
            if index == 0:
                rename("kumiko_outbox", "kumiko_outbox_away")
            return (500, {}) if index == 0 else (200, {})
        cancelled.wait(timeout=30)
        return (200, {})

    receiver.respond = respond
    clock = FakeClock(T0)
    app = app_on([f], clock=clock, delivery_concurrency=2)
    slow = [f"/slow/{i}" for i in range(6)]
    for path in ["/fail", *slow]:  # claimed in this order
        _enqueue(app, receiver, user, [path])
        clock.advance(seconds=1)
    try:
        with pytest.raises(sa.exc.DBAPIError):
            app.run_worker(once=True)
        assert cancelled.is_set()
        went = [r.path for r in receiver.requests if r.path != "/fail"]
        # /slow/0 was under way and ended; /fail's thread may have taken /slow/1 before
        # the pass failed; nothing after.
        assert "/slow/0" in went and set(went) <= {"/slow/0", "/slow/1"}
    finally:
        rename("kumiko_outbox_away", "kumiko_outbox")
        fault.dispose()
    before = len(receiver.requests)
    clock.advance(minutes=6)  # past the lease: the batch is due again, nothing was recorded
    assert app.run_worker(once=True)["sent"] == 7
    assert len(receiver.requests) == before + 7
