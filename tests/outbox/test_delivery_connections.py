"""A worker keeps its HTTP connection to a receiver, instead of opening a TCP connection
per delivery: an answer without a body, or with a small one (read and discarded, up to
``BODY_CAP``); a body over the cap, or one it would have to wait for, is not read (the
connection is dropped instead).  Both databases, real peers on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import httpx
import pytest
from _receiver import Receiver
from _support import Hook, hook_feature, ok_data

from kumiko_typed import App, User
from kumiko_typed._delivery import BODY_CAP
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]

f, hook = hook_feature("connections")


def _queue(app: App, url: str, rows: int) -> None:
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    for _ in range(rows):
        ok_data(app.dispatch(hook, Hook(url), user=user))


def test_deliveries_to_a_receiver_answering_without_a_body_share_one_connection(
    app_on: AppOn, receiver: Receiver
) -> None:
    accepted: list[object] = []
    accept = receiver.server.get_request

    def counted() -> tuple[socket.socket, object]:
        got = accept()
        accepted.append(got[1])
        return got

    receiver.server.get_request = counted  # type: ignore[method-assign]
    app = app_on([f], clock=FakeClock(datetime(2026, 1, 5, tzinfo=UTC)), delivery_concurrency=1)
    _queue(app, receiver.url(), 5)

    counts = app.run_worker(once=True)

    assert counts["sent"] == 5 and len(receiver.requests) == 5
    assert len(accepted) == 1, f"{len(accepted)} connections for 5 deliveries"


@pytest.mark.parametrize("size", [1, 2000, BODY_CAP], ids=["1-byte", "2-kB", "at-the-cap"])
def test_deliveries_to_a_receiver_answering_with_a_small_body_share_one_connection(
    app_on: AppOn, receiver: Receiver, size: int
) -> None:
    """Before, a body was never read, so its response was closed unread, which drops the
    connection: five deliveries, five TCP connections."""
    receiver.body = lambda _i, _p: b"{" + b"x" * (size - 1)
    app = app_on([f], clock=FakeClock(datetime(2026, 1, 5, tzinfo=UTC)), delivery_concurrency=1)
    _queue(app, receiver.url(), 5)

    counts = app.run_worker(once=True)

    assert counts["sent"] == 5 and len(receiver.requests) == 5
    assert receiver.connections == 1, f"{receiver.connections} connections for 5 deliveries"


@pytest.mark.parametrize("length", ["sent", "chunked"])
def test_a_body_over_the_cap_is_not_read_its_connection_is_dropped(
    app_on: AppOn, receiver: Receiver, length: str
) -> None:
    """32 MB, more than loopback's socket buffers hold: the receiver cannot get it all out
    unless the worker reads it all.  Announced (``Content-Length``) it is not read at all;
    chunked, at most one read past the cap."""
    size = 32 * 2**20
    if length == "chunked":
        chunk = b"%x\r\n%s\r\n" % (2**20, b"x" * 2**20)
        receiver.respond = lambda _i, _p: (200, {"Transfer-Encoding": "chunked"})
        receiver.body = lambda _i, _p: chunk * (size // 2**20) + b"0\r\n\r\n"
    else:
        receiver.body = lambda _i, _p: b"x" * size
    app = app_on([f], clock=FakeClock(datetime(2026, 1, 5, tzinfo=UTC)), delivery_concurrency=1)
    _queue(app, receiver.url(), 2)

    counts = app.run_worker(once=True)

    assert counts["sent"] == 2
    assert receiver.connections == 2  # each connection dropped, not kept
    # The receiver's thread notes the hang-up when its next write fails: after the worker
    # has moved on, so it is waited for (a body read to its end would be noted at once).
    until = time.monotonic() + 30
    while len(receiver.written) < 2 and time.monotonic() < until:
        time.sleep(0.01)
    assert receiver.written == [-1, -1], "a body over the cap was read to its end"


@pytest.fixture
def withheld() -> Iterator[str]:
    """A receiver answering ``200`` with ``Content-Length: 5`` and no body (held until the
    test ends: a client waiting for it waits out its 30 s); yields its URL."""
    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
            done.wait(60)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    done.set()
    thread.join(10)
    server.close()


@pytest.mark.parametrize("client", ["own", "yours"])
def test_a_body_the_receiver_withholds_is_not_waited_for(app_on: AppOn, withheld: str, client: str) -> None:
    """The App's own client waits ``BODY_WAIT`` at most; a client of your own, which the
    deadline does not reach, does not read a body at all (it would wait its read timeout)."""
    http = {"http": httpx.Client(timeout=30)} if client == "yours" else {}
    app = app_on([f], clock=FakeClock(datetime(2026, 1, 5, tzinfo=UTC)), **http)
    _queue(app, withheld, 1)

    began = time.monotonic()
    counts = app.run_worker(once=True)

    # 1 s of BODY_WAIT; a pass that waited for the body would take 30 s (the deadline, the
    # read timeout): the margin is for a loaded CI machine.
    assert time.monotonic() - began < 15, "the pass waited for a body nobody needs"
    assert counts["sent"] == 1
