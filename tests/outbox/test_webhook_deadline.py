"""One webhook delivery attempt has an overall deadline (``App(webhook_timeout=...)``),
not only httpx's per-read timeout: a receiver that trickles its answer one byte at a
time cannot hold a delivery past it, and so never near the claim's lease, after which
another worker would deliver the row again.  Real peers on 127.0.0.1, both databases;
the outbox's time is a hand-moved clock."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from _receiver import Receiver
from _support import Hook, hook_feature, ok_data

from kumiko_typed import App, BootError, RetryPolicy, User, ok
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 2, 3, 4, 5, tzinfo=UTC)

f, hook = hook_feature("deadline", RetryPolicy(times=2, base_delay=timedelta(seconds=5)))


def _queue(app: App, url: str, rows: int = 1) -> None:
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    for _ in range(rows):
        ok_data(app.dispatch(hook, Hook(url), user=user))


def test_a_receiver_trickling_its_headers_fails_the_attempt_at_the_deadline(app_on: AppOn, receiver: Receiver) -> None:
    """One byte every 0.2 s: no read waits anywhere near httpx's 10 s, so before, the
    attempt lasted as long as the receiver kept trickling (here 20 s) and was then sent."""
    receiver.trickle = "headers"
    clock = FakeClock(T0)
    app = app_on([f], clock=clock, webhook_timeout=timedelta(seconds=1))
    _queue(app, receiver.url())

    began = time.monotonic()
    counts = app.run_worker(once=True)

    assert time.monotonic() - began < 10  # a guard only: the deadline is 1 s, the trickle 20 s
    assert counts == {"started": 0, "resumed": 0, "sent": 0, "retried": 1, "dead": 0}
    (item,) = app.outbox()
    assert (item.status, item.attempts) == ("pending", 1)
    assert item.last_error == "the receiver did not answer within 1 s (App(webhook_timeout=...))"
    assert item.next_attempt_at == T0 + timedelta(seconds=5)  # the retry policy's, once

    clock.advance(seconds=5)  # the second and last attempt: dead, with the same reason
    assert app.run_worker(once=True)["dead"] == 1
    (item,) = app.outbox()
    assert (item.status, item.attempts) == ("dead", 2)
    assert item.last_error == "the receiver did not answer within 1 s (App(webhook_timeout=...))"
    assert len(receiver.requests) == 2


def test_a_receiver_trickling_its_body_holds_the_delivery_no_longer_than_the_deadline(
    app_on: AppOn, receiver: Receiver
) -> None:
    """The status decides: a 2xx is sent, whatever comes after it.  The body is read only
    to keep the connection (and only as long as it keeps up): a trickled one is dropped
    with its connection, the next delivery opens a new one."""
    receiver.trickle = "body"
    receiver.body = lambda _i, _p: b"x" * 200  # 40 s at one byte per 0.2 s
    app = app_on([f], clock=FakeClock(T0), webhook_timeout=timedelta(seconds=2), delivery_concurrency=1)
    _queue(app, receiver.url(), rows=2)

    began = time.monotonic()
    counts = app.run_worker(once=True)

    assert time.monotonic() - began < 12  # a guard only: two deliveries, 2 s each at most
    assert counts["sent"] == 2
    assert [(i.status, i.attempts, i.last_error) for i in app.outbox()] == [("sent", 1, None)] * 2
    assert receiver.connections == 2


@pytest.mark.parametrize(
    "value",
    [timedelta(0), timedelta(seconds=-1), timedelta(minutes=2), 30],
    ids=["zero", "negative", "past-the-lease-margin", "seconds-as-int"],
)
def test_a_webhook_timeout_not_well_inside_the_lease_is_a_boot_error(value: object) -> None:
    with pytest.raises(BootError, match=r"webhook_timeout must be a timedelta above 0 and at most 60 seconds"):
        App([f], database_url="sqlite://", webhook_timeout=value)  # type: ignore[arg-type]


def test_https_through_the_apps_own_client_keeps_its_connection_and_its_deadline(
    app_on: AppOn, tls_receiver: Receiver
) -> None:
    """The deadline transport's TLS: verified, one connection for three deliveries, and a
    receiver trickling its headers over TLS is cut off at the deadline like a plain one."""
    app = app_on([f], clock=FakeClock(T0), webhook_timeout=timedelta(seconds=1), delivery_concurrency=1)
    tls_receiver.body = lambda _i, _p: b"{}"
    _queue(app, tls_receiver.url(), rows=3)
    assert app.run_worker(once=True)["sent"] == 3
    assert tls_receiver.connections == 1

    tls_receiver.trickle = "headers"
    _queue(app, tls_receiver.url("/slow"))
    assert app.run_worker(once=True)["retried"] == 1
    (item,) = [i for i in app.outbox() if i.status == "pending"]
    assert item.last_error == "the receiver did not answer within 1 s (App(webhook_timeout=...))"


big = f.write_handler(
    "big",
    f.pipeline(Hook)
    .send_webhook(url=lambda c: c.payload.url, body=lambda c: {"pad": "x" * 20_000_000})
    .return_(lambda c: ok(None)),
)


@pytest.fixture
def slow_reader() -> Iterator[tuple[str, list[int]]]:
    """A receiver that reads the request at some 2 MB/s (64 KiB every 0.03 s) and never
    answers: fast enough that every socket send makes progress well within its timeout,
    too slow for a 20 MB body to be in by a 2 s deadline.  Yields its URL and the bytes
    it read."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # a window that keeps pace with the reads
    server.bind(("127.0.0.1", 0))
    server.listen()
    read = [0]
    done = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while not done.wait(0.03):
                data = conn.recv(65536)
                if not data:
                    return
                read[0] += len(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/hook", read
    done.set()
    thread.join(10)
    server.close()


def test_a_receiver_reading_a_big_body_slowly_is_cut_at_the_deadline(
    app_on: AppOn, slow_reader: tuple[str, list[int]]
) -> None:
    """Before, the body went out in one socket write whose every send got the whole time
    left: the attempt lasted as long as the receiver kept reading (13 s and 18 of 20 MB
    here with a 2 s deadline)."""
    url, read = slow_reader
    app = app_on([f], clock=FakeClock(T0), webhook_timeout=timedelta(seconds=2))
    ok_data(app.dispatch(big, Hook(url), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))

    assert app.run_worker(once=True)["retried"] == 1

    (item,) = app.outbox()
    assert item.last_error == "the receiver did not answer within 2 s (App(webhook_timeout=...))"
    assert read[0] < 12_000_000  # 2 s at its pace (some 4 MB), with room for a loaded machine
