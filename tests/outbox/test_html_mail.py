"""``send_mail(..., html=...)``: an HTML form of the text body, sent as
``multipart/alternative`` (the text first, the HTML last, as readers prefer the last form
they can show) by the maildir and SMTP transports, and given to a transport of one's own as
``MailMessage.html``.  Before, a mail could carry plain text only.  Both databases; a real
SMTP server (aiosmtpd) on 127.0.0.1."""

from __future__ import annotations

import email.parser
import email.policy
import uuid
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import attrs
import pytest
from _support import ok_data, smtp_server

from kumiko_typed import App, Feature, MaildirTransport, SmtpTransport, User, ok
from kumiko_typed.testing import MemoryMail

AppOn = Callable[..., App]


@attrs.frozen
class Notice:
    to: str
    name: str
    html: bool = True


f = Feature("html_mail", requires=["mail.send"])
notice = f.write_handler(
    "notice",
    f.pipeline(Notice)
    .send_mail(
        to=lambda c: c.payload.to,
        subject="Grüße",
        body=lambda c: f"Hello {c.payload.name}\n",
        html=lambda c: f"<p>Hello <b>{c.payload.name}</b> – ß</p>\n" if c.payload.html else None,
    )
    .return_(lambda c: ok(None)),
)


def _user() -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def _parse(raw: bytes) -> EmailMessage:
    parsed = email.parser.BytesParser(policy=email.policy.default).parsebytes(raw)
    assert isinstance(parsed, EmailMessage)
    return parsed


def _forms(message: EmailMessage) -> tuple[str, str, str]:
    """The content type, the text form and the HTML form (line ends as LF)."""
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    assert isinstance(text, EmailMessage) and isinstance(html, EmailMessage)
    return (
        message.get_content_type(),
        text.get_content().replace("\r\n", "\n"),
        html.get_content().replace("\r\n", "\n"),
    )


def test_a_transport_of_ones_own_gets_the_html_form(app_on: AppOn) -> None:
    memory = MemoryMail()
    app = app_on([f], mail=memory)
    ok_data(app.dispatch(notice, Notice("ann@example.com", "Ann"), user=_user()))
    ok_data(app.dispatch(notice, Notice("bob@example.com", "Bob", html=False), user=_user()))
    assert app.run_worker(once=True)["sent"] == 2
    assert sorted((m.to, m.html) for m in memory.sent) == [
        (("ann@example.com",), "<p>Hello <b>Ann</b> – ß</p>\n"),
        (("bob@example.com",), None),  # the resolver's None: text only
    ]


def test_maildir_writes_text_and_html_as_alternatives(app_on: AppOn, tmp_path: Path) -> None:
    folder = tmp_path / "mail"
    app = app_on([f], mail=MaildirTransport(str(folder)))
    ok_data(app.dispatch(notice, Notice("ann@example.com", "Ann"), user=_user()))
    ok_data(app.dispatch(notice, Notice("bob@example.com", "Bob", html=False), user=_user()))
    assert app.run_worker(once=True)["sent"] == 2

    parsed = {str(m["To"]): m for m in (_parse(p.read_bytes()) for p in folder.glob("*.eml"))}
    assert _forms(parsed["ann@example.com"]) == (
        "multipart/alternative",
        "Hello Ann\n",
        "<p>Hello <b>Ann</b> – ß</p>\n",
    )
    ann = parsed["ann@example.com"]
    assert [part.get_content_type() for part in ann.iter_parts()] == ["text/plain", "text/html"]
    bob = parsed["bob@example.com"]
    assert (bob.get_content_type(), bob.get_content()) == ("text/plain", "Hello Bob\n")


class _Collect:
    def __init__(self) -> None:
        self.envelopes: list[Any] = []

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[_Collect, int]]:
    handler = _Collect()
    with smtp_server(handler) as port:
        yield handler, port


def test_smtp_sends_text_and_html_as_alternatives(app_on: AppOn, smtp: tuple[_Collect, int]) -> None:
    handler, port = smtp
    app = app_on([f], mail=SmtpTransport("127.0.0.1", port, timeout=5))
    ok_data(app.dispatch(notice, Notice("ann@example.com", "Ann"), user=_user()))
    assert app.run_worker(once=True)["sent"] == 1
    (envelope,) = handler.envelopes
    message = _parse(envelope.original_content)
    assert _forms(message) == ("multipart/alternative", "Hello Ann\n", "<p>Hello <b>Ann</b> – ß</p>\n")
    assert message["Subject"] == "Grüße"
