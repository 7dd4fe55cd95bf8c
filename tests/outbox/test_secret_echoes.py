"""A peer that echoes what it was sent shows no credential of the row in ``last_error``
or the logs (the secrets issue): a receiver quoting the request (its headers, the URL's
query) in its reason phrase, an SMTP server quoting the AUTH command in its refusal.
Real servers on 127.0.0.1; both databases for the webhooks."""

from __future__ import annotations

import base64
import http.server
import logging
import socket
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from _support import Hook
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import kumiko_typed._observe as observe
from kumiko_typed import App, Feature, Ok, OutboxItem, SmtpTransport, User, bearer, ok

AppOn = Callable[..., App]

f = Feature("echoes", requires=["webhook.send", "mail.send"])
plain = f.write_handler(
    "plain",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}).return_(lambda c: ok(None)),
)
with_headers = f.write_handler(
    "with-headers",
    f.pipeline(Hook)
    .send_webhook(
        url=lambda c: c.payload.url,
        headers={"Authorization": "Bearer HEADER-TOKEN-1", "X-Api-Key": "API-KEY-VALUE-2", "X-Mode": "on"},
    )
    .return_(lambda c: ok(None)),
)
#: Credentials of a few characters: a secret is one because of where it stands, not its length.
with_short_headers = f.write_handler(
    "with-short-headers",
    f.pipeline(Hook)
    .send_webhook(
        url=lambda c: c.payload.url,
        headers={"Authorization": "Bearer Zq4", "X-Api-Key": "k9", "X-Mode": "on"},
    )
    .return_(lambda c: ok(None)),
)
with_short_bearer = f.write_handler(
    "with-short-bearer",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, auth=bearer("CRM")).return_(lambda c: ok(None)),
)


class EchoReceiver:
    """An HTTP server on 127.0.0.1 answering 401 with the request's headers and path as
    its reason phrase (and in a header and the body): a peer that shows what it got."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                said = " ".join(f"{k}={v}" for k, v in self.headers.items()) + f" path={self.path}"
                self.send_response(401, said)
                self.send_header("X-Echo", said)
                self.send_header("Content-Length", str(len(said)))
                self.end_headers()
                self.wfile.write(said.encode())

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def echo() -> Iterator[EchoReceiver]:
    receiver = EchoReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on: a real SDK provider whose spans land in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(observe, "_tracer", lambda: provider.get_tracer("kumiko_typed"))
    yield exporter
    provider.shutdown()


def _traced(spans: InMemorySpanExporter) -> str:
    """Every finished span's name, attributes, status and events, as an exporter sends them."""
    return "\n".join(
        f"{s.name} {dict(s.attributes or {})} {s.status.description} "
        f"{[(e.name, dict(e.attributes or {})) for e in s.events]}"
        for s in spans.get_finished_spans()
    )


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record's message and traceback, as a handler would write them."""
    return "\n".join(
        r.getMessage() + ("".join(traceback.format_exception(*r.exc_info)) if r.exc_info else "")
        for r in caplog.records
    )


def _only(app: App) -> OutboxItem:
    (item,) = app.outbox()
    return item


BASIC = base64.b64encode(b"shop:url-pass-word").decode()  # what httpx sends for the URL's user part
SHORT_BASIC = base64.b64encode(b"shop:Wq7").decode()


@pytest.mark.parametrize(
    ("userinfo", "path", "handler", "hidden"),
    [
        ("shop:url-pass-word@", "/x", plain, ["url-pass-word", BASIC]),
        ("", "/x?token=query-token-3&page=2", plain, ["query-token-3"]),
        ("", "/x", with_headers, ["HEADER-TOKEN-1", "API-KEY-VALUE-2"]),
        ("shop:Wq7@", "/x", plain, ["Wq7", SHORT_BASIC]),
        ("", "/x?token=Tk3&page=2", plain, ["Tk3"]),
        ("", "/x?sig=J&page=2", plain, ["sig=J"]),
        ("", "/x", with_short_headers, ["Zq4", "k9"]),
        ("", "/x", with_short_bearer, ["Vb5"]),
    ],
    ids=[
        "url-password",
        "query-token",
        "step-headers",
        "short-url-password",
        "short-query-token",
        "one-character-query-signature",
        "short-step-headers",
        "short-bearer-secret",
    ],
)
def test_a_receiver_echoing_the_request_shows_none_of_its_credentials(
    app_on: AppOn,
    user: User,
    echo: EchoReceiver,
    caplog: pytest.LogCaptureFixture,
    spans: InMemorySpanExporter,
    userinfo: str,
    path: str,
    handler: Any,
    hidden: list[str],
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx's response line (INFO), httpcore's headers (DEBUG)
    app = app_on([f], secrets={"CRM": "Vb5"}.get)
    assert app.dispatch(handler, Hook(f"http://{userinfo}127.0.0.1:{echo.port}{path}"), user=user) == Ok(None)

    app.run_worker(once=True)

    item = _only(app)
    assert item.last_error is not None
    logged, traced = _logged(caplog), _traced(spans)
    assert "HTTP 401" in traced  # the delivery span's status is the stored error
    for secret in hidden:
        assert secret not in item.last_error
        assert secret not in logged
        assert secret not in traced
    # What an operator needs stays: the status, the host and port, the field's name, a
    # short value that is no credential.
    assert item.last_error.startswith("HTTP 401 ")
    assert f"Host=127.0.0.1:{echo.port}" in item.last_error
    assert f"127.0.0.1:{echo.port}" in logged
    if handler in (with_headers, with_short_headers):
        assert "Authorization=***" in item.last_error
    if handler is with_short_bearer:  # the App's secret, which the step does not know
        assert "Authorization=Bearer ***" in item.last_error
    if handler in (with_headers, with_short_headers):
        assert "X-Mode=on" in item.last_error
    if "page" in path:  # a short value of a parameter whose name says no credential stays
        assert "page=2" in item.last_error


# --- SMTP: a server quoting the AUTH command in its refusal -------------------------------


@attrs.frozen
class Letter:
    to: str


letter = f.write_handler(
    "letter",
    f.pipeline(Letter).send_mail(to=lambda c: c.payload.to, subject="Hi", body="b").return_(lambda c: ok(None)),
)


@pytest.fixture
def echoing_smtp() -> Iterator[Callable[[str], int]]:
    """``start(mechanisms)``: an SMTP server on 127.0.0.1 offering those AUTH mechanisms
    and refusing every login with ``535`` quoting the client's AUTH lines; its port."""
    servers: list[socket.socket] = []

    def serve(server: socket.socket, mechanisms: str) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn, conn.makefile("rwb") as wire:
                wire.write(b"220 echo ESMTP\r\n")
                wire.flush()
                while line := wire.readline():
                    command = line.strip().decode()
                    if command.upper().startswith("EHLO"):
                        wire.write(f"250-echo\r\n250 AUTH {mechanisms}\r\n".encode())
                    elif command.upper().startswith("AUTH LOGIN ") and len(command.split()) == 3:
                        wire.write(b"334 UGFzc3dvcmQ6\r\n")
                        wire.flush()
                        answer = wire.readline().strip().decode()
                        wire.write(f"535 5.7.8 refused {command} / {answer}\r\n".encode())
                    elif command.upper().startswith("AUTH"):
                        wire.write(f"535 5.7.8 refused {command}\r\n".encode())
                    elif command.upper().startswith("QUIT"):
                        wire.write(b"221 bye\r\n")
                        wire.flush()
                        break
                    else:
                        wire.write(b"500 unknown\r\n")
                    wire.flush()

    def start(mechanisms: str) -> int:
        server = socket.create_server(("127.0.0.1", 0))
        servers.append(server)
        threading.Thread(target=serve, args=(server, mechanisms), daemon=True).start()
        return int(server.getsockname()[1])

    yield start
    for server in servers:
        server.close()


@pytest.mark.parametrize("password", ["smtp-pass-word", "Wq7"], ids=["long", "short"])
@pytest.mark.parametrize("mechanisms", ["PLAIN", "LOGIN"])
def test_an_smtp_server_quoting_the_login_in_its_refusal_shows_no_password(
    make_app: Callable[..., App],
    user: User,
    echoing_smtp: Callable[[str], int],
    caplog: pytest.LogCaptureFixture,
    mechanisms: str,
    password: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    port = echoing_smtp(mechanisms)
    transport = SmtpTransport("127.0.0.1", port, username="shop", password_ref="SMTP", timeout=5)
    app = make_app([f], mail=transport, secrets={"SMTP": password}.get)
    assert app.dispatch(letter, Letter("a@example.com"), user=user) == Ok(None)

    app.run_worker(once=True)

    error = _only(app).last_error
    assert error is not None
    encoded = [base64.b64encode(raw.encode()).decode() for raw in (password, f"\0shop\0{password}")]
    for shown in (error, _logged(caplog)):
        for secret in (password, *encoded, *(e.rstrip("=") for e in encoded)):
            assert secret not in shown
    assert "SMTPAuthenticationError: (535" in error
    assert error.endswith("refused AUTH PLAIN ***')" if mechanisms == "PLAIN" else "/ ***')")  # the user stays


def test_an_smtp_password_that_is_not_ascii_is_named_not_quoted(
    app_on: Callable[..., App], user: User, echoing_smtp: Callable[[str], int], caplog: pytest.LogCaptureFixture
) -> None:
    """smtplib sends a login as ASCII only: every attempt failed with its UnicodeEncodeError,
    which quoted a character of the password and where it stands (``'ascii' codec can't
    encode character '\\xe4' in position 7``), in the stored error and the log."""
    caplog.set_level(logging.DEBUG)
    transport = SmtpTransport("127.0.0.1", echoing_smtp("PLAIN"), username="shop", password_ref="SMTP", timeout=5)
    app = app_on([f], mail=transport, secrets={"SMTP": "pässwörd-geheim"}.get)
    assert app.dispatch(letter, Letter("a@example.com"), user=user) == Ok(None)

    assert app.run_worker(once=True)["retried"] == 1

    error = _only(app).last_error
    assert error == (
        "the password of password_ref 'SMTP' is not ASCII, which smtplib's login cannot send;"
        " give the account an ASCII password"
    )
    for shown in (error, _logged(caplog)):
        assert "position" not in shown and "\\xe4" not in shown and "ä" not in shown


def test_an_smtp_username_that_is_not_ascii_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="username must be ASCII text"):
        SmtpTransport("127.0.0.1", username="jörg", password_ref="SMTP")


def test_an_apps_repr_shows_no_password_of_its_database_url() -> None:
    app = App([f], database_url="postgresql+psycopg://shop:pw-user@db.internal:5433/shop?password=pw-query")
    try:
        shown = repr(app)
    finally:
        app.dispose()
    assert "pw-user" not in shown and "pw-query" not in shown
    # The query's password (libpq's choice over the user part's) is moved into the user part.
    assert shown == "<App ['echoes'] on postgresql+psycopg://shop:***@db.internal:5433/shop>"
