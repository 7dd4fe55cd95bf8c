"""Connecting is inside a delivery's deadline too: the name's lookup, and each of its
addresses with the time left.  Before, ``socket.create_connection`` gave every address
the whole timeout (a name with three addresses that do not answer held a webhook three
times its deadline) and the system resolver all the time it took; an SMTP send whose
deadline passed while it connected was not cut at all.

The peers are real sockets on 127.0.0.1: an address that does not answer is a listener
whose accept queue is full (the kernel drops the SYN, as a firewall would).  The names
are the one stand-in: ``socket.getaddrinfo`` answers for ``*.test`` names with such
addresses, or hangs, as a resolver whose server is gone does.  Both databases."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from _receiver import Receiver
from _support import Hook, hook_feature, ok_data
from aiosmtpd.controller import Controller

from kumiko_typed import App, Feature, RetryPolicy, SmtpTransport, User, _resolve, ok
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 2, 3, 4, 5, tzinfo=UTC)
#: A pass that the 1 s deadline (or the 0.5 s timeout) cut ends well within this; one that
#: was not cut takes 20 s or more (addresses, trickles, hung lookups, the 30 s deadline).
#: The margin is for a loaded CI machine, where the pass around the send is slow.
PROMPT = 10

f, hook = hook_feature("connect_deadline", RetryPolicy(times=2, base_delay=timedelta(seconds=5)))


@attrs.frozen
class Letter:
    to: str


mail = Feature("connect_deadline_mail", requires=["mail.send"])
letter = mail.write_handler(
    "letter",
    mail.pipeline(Letter).send_mail(to=lambda c: [c.payload.to], subject="Hi", body="x").return_(lambda c: ok(None)),
)


class Names:
    """``socket.getaddrinfo`` for ``*.test`` names: ``ports[name]`` are its addresses (all
    127.0.0.1, each its own port), in that order; a name in ``hanging`` blocks until the
    test ends.  Any other name, and every address literal, is the system's."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.ports: dict[str, list[int]] = {}
        self.hanging: set[str] = set()
        self.release = threading.Event()
        self.asked: list[tuple[str, object]] = []  # (name, port) of every lookup of a name

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(host, str) and host.endswith(".test")):
            return self.real(host, port, *args, **kwargs)
        flags = kwargs.get("flags", args[3] if len(args) > 3 else 0)
        if flags & socket.AI_NUMERICHOST:  # what the system answers for a name then
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        self.asked.append((host, port))
        if host in self.hanging:
            self.release.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", p)) for p in self.ports[host]]


@pytest.fixture
def names(monkeypatch: pytest.MonkeyPatch) -> Iterator[Names]:
    stand_in = Names(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", stand_in)
    yield stand_in
    stand_in.release.set()


@pytest.fixture
def silent() -> Iterator[Callable[[], int]]:
    """``silent()``: the port of a listener that never completes a connection."""
    sockets: list[socket.socket] = []

    def make() -> int:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        filler = socket.create_connection(("127.0.0.1", port))  # fills the accept queue
        sockets.extend((listener, filler))
        return port

    yield make
    for s in sockets:
        s.close()


def _queue(app: App, url: str) -> None:
    ok_data(app.dispatch(hook, Hook(url), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))


def _timed_pass(app: App) -> float:
    began = time.monotonic()
    app.run_worker(once=True)
    return time.monotonic() - began


def test_a_webhook_to_a_name_whose_addresses_do_not_answer_ends_at_the_deadline(
    app_on: AppOn, names: Names, silent: Callable[[], int]
) -> None:
    """Twenty silent addresses, a 1 s deadline: before, each got the whole second (20 s)."""
    names.ports["hook.test"] = [silent() for _ in range(20)]
    app = app_on([f], clock=FakeClock(T0), webhook_timeout=timedelta(seconds=1))
    _queue(app, "http://hook.test/hook")

    assert _timed_pass(app) < PROMPT
    (item,) = app.outbox()
    assert (item.status, item.attempts) == ("pending", 1)
    assert item.last_error == "the receiver did not answer within 1 s (App(webhook_timeout=...))"


def test_a_webhook_to_a_name_whose_lookup_hangs_ends_at_the_deadline(app_on: AppOn, names: Names) -> None:
    """Before, the attempt waited for the resolver (here until the test ends, 30 s)."""
    names.hanging.add("hook.test")
    app = app_on([f], clock=FakeClock(T0), webhook_timeout=timedelta(seconds=1))
    _queue(app, "http://hook.test/hook")

    assert _timed_pass(app) < PROMPT
    (item,) = app.outbox()
    assert (item.status, item.attempts) == ("pending", 1)
    assert item.last_error == "the receiver did not answer within 1 s (App(webhook_timeout=...))"


def test_a_webhook_goes_to_the_next_address_of_its_name_when_one_refuses(
    app_on: AppOn, names: Names, receiver: Receiver
) -> None:
    """As ``create_connection`` does: an address that refuses at once leaves the time to
    the next one, and the request carries the name as its Host."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refusing = int(closed.getsockname()[1])  # bound, never listening: refused
        names.ports["hook.test"] = [refusing, receiver.server.server_port]
        app = app_on([f], clock=FakeClock(T0), webhook_timeout=timedelta(seconds=5))
        _queue(app, "http://hook.test/hook")

        assert app.run_worker(once=True)["sent"] == 1
    (seen,) = receiver.requests
    assert seen.headers["host"] == "hook.test"


class _Taking:
    def __init__(self) -> None:
        self.envelopes: list[Any] = []
        self.ehlo: list[str] = []  # the name each sender gave in EHLO

    async def handle_DATA(self, _server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        self.ehlo.append(session.host_name)
        return "250 OK"


@pytest.fixture
def smtp_server() -> Iterator[tuple[_Taking, int]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    handler = _Taking()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    yield handler, port
    controller.stop()


@pytest.fixture
def trickler() -> Iterator[int]:
    """An SMTP server that trickles its greeting, one byte every 0.2 s, for up to 20 s."""
    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            try:
                for byte in b"220 " + b"x" * 100 + b"\r\n":
                    if done.wait(0.2):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                pass  # the client hung up

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = int(server.getsockname()[1])
    yield port
    done.set()
    socket.create_connection(("127.0.0.1", port)).close()  # an accept() nobody connected to ends
    thread.join(10)
    server.close()


def _send_mail(app: App) -> float:
    ok_data(app.dispatch(letter, Letter("a@example.com"), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))
    return _timed_pass(app)


def test_an_smtp_send_whose_deadline_passes_while_it_connects_is_still_cut(
    app_on: AppOn, names: Names, silent: Callable[[], int], trickler: int
) -> None:
    """The first address is silent for the whole 1 s timeout, the whole deadline; the
    second trickles its greeting.  Before, the deadline's timer found no socket to shut
    down while the first connect was under way, and the send then read the trickle for
    all of its 20 s (an endless one: for ever)."""
    names.ports["mx.test"] = [silent(), trickler]
    app = app_on([mail], mail=SmtpTransport("mx.test", 25, timeout=1.0, deadline=1.0))

    assert _send_mail(app) < PROMPT
    (item,) = app.outbox()
    assert (item.status, item.attempts) == ("pending", 1)
    assert item.last_error == "the SMTP server did not finish within 1 s (SmtpTransport(deadline=...))"


@pytest.mark.parametrize(("options", "port"), [({}, 25), ({"starttls": True}, 25), ({"implicit_tls": True}, 465)])
def test_an_smtp_transport_without_a_port_takes_its_modes_own(
    app_on: AppOn, names: Names, silent: Callable[[], int], options: dict[str, bool], port: int
) -> None:
    """As smtplib's ``SMTP_SSL`` does, implicit TLS goes to 465.  Before, the default was
    25 whatever the mode, so ``SmtpTransport(host, implicit_tls=True)`` spoke TLS to a
    plain port and every mail waited out its timeout there."""
    names.ports["mx.test"] = [silent()]
    app = app_on([mail], mail=SmtpTransport("mx.test", timeout=0.5, deadline=5.0, **options))

    _send_mail(app)
    assert names.asked == [("mx.test", port)]
    assert [i.status for i in app.outbox()] == ["pending"]


def test_an_smtp_send_to_a_name_whose_lookup_hangs_ends_at_the_deadline(app_on: AppOn, names: Names) -> None:
    names.hanging.add("mx.test")
    app = app_on([mail], mail=SmtpTransport("mx.test", 25, deadline=1.0))

    assert _send_mail(app) < PROMPT
    (item,) = app.outbox()
    assert item.last_error == "the SMTP server did not finish within 1 s (SmtpTransport(deadline=...))"


def test_an_smtp_send_goes_to_the_next_address_while_time_is_left(
    app_on: AppOn, names: Names, silent: Callable[[], int], smtp_server: tuple[_Taking, int]
) -> None:
    """A silent first address costs its ``timeout`` (0.5 s), not the deadline: the second
    takes the mail."""
    handler, port = smtp_server
    names.ports["mx.test"] = [silent(), port]
    app = app_on([mail], mail=SmtpTransport("mx.test", 25, timeout=0.5, deadline=30.0))

    assert _send_mail(app) < PROMPT
    assert [i.status for i in app.outbox()] == ["sent"]
    (envelope,) = handler.envelopes
    assert envelope.rcpt_tos == ["a@example.com"]


def test_an_smtp_send_whose_own_name_lookup_hangs_ends_at_the_deadline(
    app_on: AppOn, monkeypatch: pytest.MonkeyPatch, smtp_server: tuple[_Taking, int]
) -> None:
    """smtplib looks this machine's name up for its EHLO (``socket.getfqdn``, a reverse
    lookup) each time a client is made: before, a hanging resolver held every send there,
    before its deadline even started.  Now the lookup is cut at the deadline, and once it
    succeeds it is not made again."""
    handler, port = smtp_server
    release, asked = threading.Event(), []

    def getfqdn(name: str = "") -> str:
        asked.append(threading.current_thread().name)  # aiosmtpd asks too, for its own name
        release.wait(30)
        return "worker.example.com"

    monkeypatch.setattr(socket, "getfqdn", getfqdn)
    monkeypatch.setattr(_resolve, "_local", [])
    app = app_on([mail], mail=SmtpTransport("127.0.0.1", port, deadline=1.0))

    assert _send_mail(app) < PROMPT
    (item,) = app.outbox()
    assert (item.status, item.last_error) == (
        "pending",
        "the SMTP server did not finish within 1 s (SmtpTransport(deadline=...))",
    )

    release.set()  # the resolver is back: the next attempt and every later mail are sent
    _send_mail(app)
    _send_mail(app)
    assert sorted(i.status for i in app.outbox()) == ["pending", "sent", "sent"]
    assert handler.ehlo == ["worker.example.com"] * 2
    # Ours: the first (cut) and the second; the third used the name found.
    assert asked.count("kumiko-resolve") == 2
