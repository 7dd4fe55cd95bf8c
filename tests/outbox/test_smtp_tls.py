"""``SmtpTransport(starttls=True)`` sends over TLS, and verifies the server as the webhooks'
TLS does (certifi's roots, or ``SSL_CERT_FILE``).  Before, it never sent at all: the client
was made without its host, and smtplib's STARTTLS refused the empty name it had
(``ValueError: server_hostname cannot be an empty string``), attempt after attempt.  And
smtplib's own STARTTLS context checks neither the certificate nor the name: given the
name only, whoever answered in the server's place (with a certificate of its own making)
would have got the mail and the login's password.  A real SMTP server (aiosmtpd) on
127.0.0.1 with STARTTLS and a certificate made for the test; both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from _support import loopback_tls, ok_data, smtp_server
from aiosmtpd.smtp import AuthResult, LoginPassword

from kumiko_typed import App, Feature, SmtpTransport, User, ok

AppOn = Callable[..., App]
PASSWORD = "s3cret-smtp-password"


@attrs.frozen
class Letter:
    to: str


f = Feature("smtp_tls", requires=["mail.send"])
letter = f.write_handler(
    "letter",
    f.pipeline(Letter).send_mail(to=lambda c: [c.payload.to], subject="Hi", body="x").return_(lambda c: ok(None)),
)


class _Server:
    def __init__(self) -> None:
        self.logins: list[tuple[bytes, bytes]] = []
        self.envelopes: list[Any] = []
        self.over_tls: list[bool] = []  # per mail: did it come over a TLS connection

    async def handle_DATA(self, server: Any, _session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        self.over_tls.append(server.transport.get_extra_info("ssl_object") is not None)
        return "250 OK"

    def authenticate(self, _server: Any, _session: Any, _envelope: Any, _mechanism: str, data: Any) -> AuthResult:
        assert isinstance(data, LoginPassword)
        self.logins.append((data.login, data.password))
        return AuthResult(success=True)


@pytest.fixture
def tls_smtp(tmp_path: Path) -> Iterator[tuple[_Server, int, Path]]:
    """An SMTP server offering STARTTLS with a self-signed certificate for 127.0.0.1 (the
    certificate's file is yielded: trusted only where a test points ``SSL_CERT_FILE`` at it)."""
    context, cert = loopback_tls(tmp_path)
    server = _Server()
    with smtp_server(server, tls_context=context, authenticator=server.authenticate) as port:
        yield server, port, cert


def _app(app_on: AppOn, port: int) -> App:
    transport = SmtpTransport("127.0.0.1", port, username="shop", password_ref="SMTP", starttls=True, timeout=5)
    return app_on([f], mail=transport, secrets={"SMTP": PASSWORD}.get)


def _refused_for_its_certificate(app: App, server: _Server) -> None:
    """One attempt, failed on the server's certificate: it got neither the login nor the
    mail, and the row waits for the next attempt."""
    assert app.run_worker(once=True)["retried"] == 1
    assert (server.logins, server.envelopes) == ([], [])
    (item,) = app.outbox()
    assert item.status == "pending"
    assert item.last_error is not None and "CERTIFICATE_VERIFY_FAILED" in item.last_error


def _send(app: App) -> None:
    ok_data(app.dispatch(letter, Letter("a@example.com"), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))


def test_a_server_whose_certificate_is_not_trusted_gets_neither_the_mail_nor_the_password(
    app_on: AppOn, tls_smtp: tuple[_Server, int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, port, _cert = tls_smtp
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    app = _app(app_on, port)
    _send(app)

    _refused_for_its_certificate(app, server)


def test_a_server_whose_certificate_is_trusted_gets_the_mail_over_tls(
    app_on: AppOn, tls_smtp: tuple[_Server, int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, port, cert = tls_smtp
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    app = _app(app_on, port)
    _send(app)

    assert app.run_worker(once=True)["sent"] == 1
    assert server.logins == [(b"shop", PASSWORD.encode())]
    (envelope,) = server.envelopes
    assert envelope.rcpt_tos == ["a@example.com"]
    assert server.over_tls == [True]


def test_a_certificate_for_another_name_is_refused(
    app_on: AppOn, tls_smtp: tuple[_Server, int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trusted, but made for 127.0.0.1: reached as ``localhost`` it is not that server's."""
    server, port, cert = tls_smtp
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    transport = SmtpTransport("localhost", port, username="shop", password_ref="SMTP", starttls=True, timeout=5)
    app = app_on([f], mail=transport, secrets={"SMTP": PASSWORD}.get)
    _send(app)

    _refused_for_its_certificate(app, server)


# Implicit TLS (RFC 8314, port 465): TLS from the first byte, as smtplib.SMTP_SSL speaks it.
# Before, SmtpTransport had no such mode: a provider offering only 465 could not be used,
# and a plain client on such a port waited for a greeting that never came.


@pytest.fixture
def implicit_tls_smtp(tmp_path: Path) -> Iterator[tuple[_Server, int, Path]]:
    """An SMTP server speaking TLS from the first byte, with a certificate for 127.0.0.1."""
    context, cert = loopback_tls(tmp_path)
    server = _Server()
    # aiosmtpd offers AUTH only after STARTTLS unless told the connection may carry it: this
    # one is TLS from the first byte (the test asserts the mail came over TLS).
    options = {"ssl_context": context, "authenticator": server.authenticate, "auth_require_tls": False}
    with smtp_server(server, **options) as port:
        yield server, port, cert


def _implicit(app_on: AppOn, port: int, host: str = "127.0.0.1", **options: Any) -> App:
    transport = SmtpTransport(host, port, username="shop", password_ref="SMTP", implicit_tls=True, **options)
    return app_on([f], mail=transport, secrets={"SMTP": PASSWORD}.get)


def test_implicit_tls_sends_the_mail_and_the_login_over_tls(
    app_on: AppOn, implicit_tls_smtp: tuple[_Server, int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, port, cert = implicit_tls_smtp
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    app = _implicit(app_on, port, timeout=5)
    _send(app)

    assert app.run_worker(once=True)["sent"] == 1
    assert server.logins == [(b"shop", PASSWORD.encode())]
    (envelope,) = server.envelopes
    assert envelope.rcpt_tos == ["a@example.com"]
    assert server.over_tls == [True]
    assert app.outbox()[0].status == "sent"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_implicit_tls_verifies_the_certificate_and_its_name(
    app_on: AppOn, implicit_tls_smtp: tuple[_Server, int, Path], monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    """Untrusted (no SSL_CERT_FILE), or trusted but made for another name: nothing is sent."""
    server, port, cert = implicit_tls_smtp
    if host == "127.0.0.1":
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    else:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    app = _implicit(app_on, port, host=host, timeout=5)
    _send(app)

    _refused_for_its_certificate(app, server)


def test_a_plain_client_on_an_implicit_tls_port_is_told_to_use_implicit_tls(
    app_on: AppOn, implicit_tls_smtp: tuple[_Server, int, Path]
) -> None:
    server, port, _cert = implicit_tls_smtp
    app = app_on([f], mail=SmtpTransport("127.0.0.1", port, timeout=0.5))
    _send(app)

    assert app.run_worker(once=True)["retried"] == 1
    assert server.envelopes == []
    (item,) = app.outbox()
    assert item.last_error is not None
    assert item.last_error.endswith(
        "no greeting came: a port that speaks TLS from the start (465) needs implicit_tls=True"
    ), item.last_error


def test_an_implicit_tls_client_on_a_starttls_port_is_told_to_use_starttls(
    app_on: AppOn, tls_smtp: tuple[_Server, int, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, port, cert = tls_smtp
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    app = _implicit(app_on, port, timeout=5)
    _send(app)

    assert app.run_worker(once=True)["retried"] == 1
    assert (server.logins, server.envelopes) == ([], [])
    (item,) = app.outbox()
    assert item.last_error is not None
    assert item.last_error.endswith("a port that turns to TLS later (587) needs starttls=True"), item.last_error


def test_starttls_and_implicit_tls_together_are_refused_when_made() -> None:
    with pytest.raises(ValueError, match="starttls and implicit_tls exclude each other"):
        SmtpTransport("smtp.example.com", 465, starttls=True, implicit_tls=True)
