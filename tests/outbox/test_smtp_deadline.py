"""One SMTP send has an overall deadline (``SmtpTransport(deadline=...)``), not only the
socket's per-read ``timeout``: a server that trickles its replies one byte at a time
cannot hold a delivery past it (and so near the claim's lease).  A real server on
127.0.0.1 (a socket that trickles its greeting); both databases."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import attrs
import pytest
from _support import ok_data

from kumiko_typed import App, Feature, SmtpTransport, User, ok

AppOn = Callable[..., App]


@attrs.frozen
class Letter:
    to: str


f = Feature("smtp_deadline", requires=["mail.send"])
letter = f.write_handler(
    "letter",
    f.pipeline(Letter).send_mail(to=lambda c: [c.payload.to], subject="Hi", body="x").return_(lambda c: ok(None)),
)


@pytest.fixture
def trickler() -> Iterator[int]:
    """An SMTP server that sends its ``220`` greeting one byte every 0.2 s (for at most
    20 s, or until the client hangs up); yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            greeting = b"220 " + b"x" * 100 + b"\r\n"
            try:
                for i in range(len(greeting)):
                    if done.wait(0.2):
                        return
                    conn.sendall(greeting[i : i + 1])
            except OSError:
                pass  # the client hung up: what it should do

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    done.set()
    thread.join(10)
    server.close()


def test_an_smtp_server_trickling_its_greeting_fails_the_attempt_at_the_deadline(app_on: AppOn, trickler: int) -> None:
    """Before, the send lasted as long as the server kept trickling (20 s here, and an
    endless one for ever): no read waited anywhere near the 30 s timeout."""
    app = app_on([f], mail=SmtpTransport("127.0.0.1", trickler, deadline=1.0))
    ok_data(app.dispatch(letter, Letter("a@example.com"), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))

    began = time.monotonic()
    counts = app.run_worker(once=True)

    assert time.monotonic() - began < 10  # a guard only: the deadline is 1 s, the trickle 20 s
    assert counts["retried"] == 1
    (item,) = app.outbox()
    assert (item.status, item.attempts) == ("pending", 1)
    assert item.last_error == "the SMTP server did not finish within 1 s (SmtpTransport(deadline=...))"


@pytest.mark.parametrize("deadline", [0.0, -1.0, 61.0])
def test_a_deadline_not_well_inside_the_lease_is_refused(deadline: float) -> None:
    with pytest.raises(ValueError, match="deadline must be above 0 and at most 60 seconds"):
        SmtpTransport("127.0.0.1", deadline=deadline)
