"""A mail the SMTP server accepted (``250`` after ``DATA``) is sent, whatever the server
then answers to ``QUIT``.  smtplib's context manager raised for a ``QUIT`` reply other than
``221`` (and for a connection reset while waiting for it), so an accepted mail was a failed
attempt and went out again at the next one.  A real server on 127.0.0.1 (a socket speaking
just enough SMTP); both databases."""

from __future__ import annotations

import contextlib
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


f = Feature("smtp_quit", requires=["mail.send"])
letter = f.write_handler(
    "letter",
    f.pipeline(Letter).send_mail(to=lambda c: [c.payload.to], subject="Hi", body="x").return_(lambda c: ok(None)),
)


class _Server:
    """Speaks SMTP up to ``250`` after ``DATA``, then answers ``QUIT`` as ``quit`` says:
    a reply line, ``"reset"`` (the connection reset), or ``"trickle"`` (a ``221`` one
    byte every 0.2 s).  Counts the mails it accepted."""

    def __init__(self, quit: str) -> None:
        self.quit = quit
        self.accepted = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)  # accept() wakes to see ``done``: close() does not wake it
        self.port = int(self.listener.getsockname()[1])
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with conn, contextlib.suppress(OSError):  # OSError: the client hung up
                self._session(conn, conn.makefile("rb"))

    def _session(self, conn: socket.socket, lines: object) -> None:
        conn.sendall(b"220 test ESMTP\r\n")
        for raw in lines:  # type: ignore[attr-defined]
            command = raw.strip().upper()
            if command == b"DATA":
                conn.sendall(b"354 go on\r\n")
                for body in lines:  # type: ignore[attr-defined]
                    if body == b".\r\n":
                        break
                self.accepted += 1
                conn.sendall(b"250 accepted\r\n")
            elif command == b"QUIT":
                self._answer_quit(conn)
                return
            else:
                conn.sendall(b"250 ok\r\n")

    def _answer_quit(self, conn: socket.socket) -> None:
        if self.quit == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        elif self.quit == "trickle":
            for byte in b"221 bye" + b"e" * 100 + b"\r\n":
                if self.done.wait(0.2):
                    return
                conn.sendall(bytes([byte]))
        else:
            conn.sendall(self.quit.encode() + b"\r\n")

    def close(self) -> None:
        self.done.set()
        self.thread.join(10)
        self.listener.close()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[_Server]:
    s = _Server(request.param)
    yield s
    s.close()


@pytest.mark.parametrize("server", ["421 closing", "554 odd", "reset", "trickle"], indirect=True)
def test_an_accepted_mail_is_sent_whatever_quit_answers(app_on: AppOn, server: _Server) -> None:
    app = app_on([f], mail=SmtpTransport("127.0.0.1", server.port, deadline=1.0))
    ok_data(app.dispatch(letter, Letter("a@example.com"), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))

    began = time.monotonic()
    counts = app.run_worker(once=True)

    assert time.monotonic() - began < 10  # a guard only: the deadline is 1 s, the trickle 20 s
    assert counts["sent"] == 1 and counts["retried"] == 0
    (item,) = app.outbox()
    assert (item.status, item.attempts, item.last_error) == ("sent", 1, None)
    assert server.accepted == 1
