"""The outbox against hostile receivers and hostile values (both databases): a receiver
that answers with an endless body, a URL carrying credentials that a delivery refuses,
and mail header fields with line breaks (header injection).  Real peers on 127.0.0.1;
time is a hand-moved clock."""

from __future__ import annotations

import email.parser
import email.policy
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import Hook, failure_of, ok_data

from kumiko_typed import App, BootError, Feature, MaildirTransport, OutboxItem, User, header_auth, ok
from kumiko_typed._outbox import ERROR_MAX
from kumiko_typed._outbox_types import HEADERS_MAX
from kumiko_typed._tables import outbox
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


@attrs.frozen
class Letter:
    to: list[str]
    subject: str
    sender: str | None = None


f = Feature("hostile", requires=["mail.send", "webhook.send"])
hook = f.write_handler(
    "hook",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}).return_(lambda c: ok(None)),
)
letter = f.write_handler(
    "letter",
    f.pipeline(Letter)
    .send_mail(
        to=lambda c: c.payload.to, subject=lambda c: c.payload.subject, body="", sender=lambda c: c.payload.sender
    )
    .return_(lambda c: ok(None)),
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def _only(app: App) -> OutboxItem:
    (item,) = app.outbox()
    return item


@pytest.fixture
def endless() -> Iterator[tuple[str, list[int]]]:
    """A receiver answering ``200`` with a chunked body that never ends (for at most 6 s,
    or until the client hangs up); yields its URL and the bytes of body it got out."""
    server = socket.create_server(("127.0.0.1", 0))
    sent = [0]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
            deadline = time.monotonic() + 6
            try:
                while time.monotonic() < deadline:
                    conn.sendall(chunk)
                    sent[0] += 65536
            except OSError:
                pass  # the client hung up: what it should do

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/hook", sent
    thread.join(10)
    server.close()


def test_a_receiver_with_an_endless_body_does_not_hold_the_worker(
    app_on: AppOn, user: User, clock: FakeClock, endless: tuple[str, list[int]]
) -> None:
    """The status line decides; the body is never read.  Before, the worker read the whole
    body into memory (600 MB in 8 s here) for as long as the receiver kept sending, on
    PostgreSQL with its claim's row locks held."""
    url, sent = endless
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(url), user=user))

    began = time.monotonic()
    counts = app.run_worker(once=True)
    took = time.monotonic() - began

    # A pass that held the connection without reading would take the 30 s webhook timeout;
    # one that read the body is caught by the bytes sent below.
    assert took < 15, f"the pass took {took:.1f} s reading a body nobody needs"
    assert counts["sent"] == 1
    assert _only(app).status == "sent"
    assert sent[0] < 64 * 2**20  # the receiver could not push more than socket buffers hold


@pytest.mark.parametrize(
    "url",
    [
        "ftp://bob:hunter2@example.com/x?token=t0ps3cret",
        " http://bob:hunter2@example.com/x?token=t0ps3cret",
        "http://bob:hunter2@/x?token=t0ps3cret",
    ],
    ids=["scheme", "blank", "no-host"],
)
def test_a_refused_url_is_shown_without_its_password_or_query_values(
    app_on: AppOn, user: User, clock: FakeClock, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Masked as ``OutboxItem.target`` masks them; the refusal (once ``last_error``, now
    the handler's Failure) and the log quoted the URL whole."""
    app = app_on([f], clock=clock)
    with caplog.at_level(logging.INFO, logger="kumiko_typed"):
        failure = failure_of(app.dispatch(hook, Hook(url), user=user), "validation_error")

    assert "bob:***@" in failure.message and "token=***" in failure.message
    for text in (failure.message, str(failure.details), caplog.text):
        assert "hunter2" not in text and "t0ps3cret" not in text
    assert app.outbox() == []


def test_a_redirect_is_reported_without_the_query_values_of_its_location(
    app_on: AppOn, user: User, clock: FakeClock, receiver: Receiver
) -> None:
    receiver.respond = lambda _i, _p: (302, {"Location": "https://elsewhere.example/cb?code=0auth-c0de&x=1"})
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))
    assert app.run_worker(once=True)["retried"] == 1

    error = _only(app).last_error
    assert error == "HTTP 302 redirect to https://elsewhere.example/cb?code=***&x=*** (redirects are not followed)"


def _refused_mail_field(app: App, user: User, field: str, value: str) -> str:
    """The message of the one problem a mail whose ``field`` is ``value`` is refused with at
    dispatch, after checking it names that field and column and that nothing was queued."""
    fields = {"to": ["a@example.com"], "subject": "Hello", "sender": None} | {
        field: [value] if field == "to" else value
    }
    failure = failure_of(app.dispatch(letter, Letter(**fields), user=user), "validation_error")
    (problem,) = failure.details
    assert problem["path"] == ("$.to[0]" if field == "to" else f"$.{field}")
    assert problem["column"] == f"kumiko_outbox.message.{field}"
    assert app.outbox() == []
    message: str = problem["message"]
    return message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("subject", "Hello\r\nBcc: victim@example.com"),
        ("subject", "Hello\nX-Evil: 1"),
        ("subject", "Hello\rworld"),
        ("to", "a@example.com\r\nBcc: victim@example.com"),
        ("sender", "shop@example.com\nBcc: victim@example.com"),
        ("subject", "nul\x00inside"),
    ],
)
def test_a_line_break_in_a_mail_header_field_is_refused_at_dispatch(
    app_on: AppOn, user: User, clock: FakeClock, tmp_path: Path, field: str, value: str
) -> None:
    """Header injection: a subject, recipient or sender with a line break (or another
    control character) never reaches a transport — a custom one would write it as it is.
    Before, the row was stored and retried to death at the worker (``ValueError`` from the
    email package), and ``kumiko-typed outbox`` printed the injected header as its target."""
    problem = _refused_mail_field(
        app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail"))), user, field, value
    )
    assert problem == "must not contain line breaks or control characters"


@pytest.mark.parametrize(
    "subject",
    [
        "=?utf-8?q?Hello=0D=0ABcc:_victim@example.com?=",
        "Re: =?utf-8?b?SGVsbG8NCkJjYzogdmljdGltQGV4YW1wbGUuY29t?=",
        "=?utf-8?q?nul=00inside?=",
    ],
    ids=["q-crlf", "b-crlf", "q-nul"],
)
def test_an_encoded_word_decoding_to_a_line_break_in_a_subject_is_refused_at_dispatch(
    app_on: AppOn, user: User, clock: FakeClock, tmp_path: Path, subject: str
) -> None:
    """Header injection without a line break in the text: the email package decodes the
    RFC 2047 encoded words of a subject it is given and wrote the CR LF they decode to as
    given.  Before, the mail was queued and its file held ``Bcc: victim@example.com`` as a
    header of its own (Python before 3.11.10 and 3.12.5; after, every attempt failed)."""
    problem = _refused_mail_field(
        app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail"))), user, "subject", subject
    )
    assert problem == (
        "must not hold an RFC 2047 encoded word (=?...?=) that decodes to a line break or control character; "
        "give the text itself"
    )


def test_a_subject_whose_encoded_words_decode_to_text_is_delivered(
    app_on: AppOn, user: User, clock: FakeClock, tmp_path: Path
) -> None:
    """A subject quoting a received one keeps working: its encoded words hold no line break."""
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    ok_data(app.dispatch(letter, Letter(["a@example.com"], "Re: =?utf-8?q?Caf=C3=A9?= =?x"), user=user))
    assert app.run_worker(once=True)["sent"] == 1
    (eml,) = (tmp_path / "mail").glob("*.eml")
    parsed = email.parser.BytesParser(policy=email.policy.default).parsebytes(eml.read_bytes())
    assert parsed["Subject"] == "Re: Café =?x"


def test_a_stored_mail_whose_subject_decodes_to_a_line_break_is_dead_unsent(
    app_on: AppOn, user: User, clock: FakeClock, tmp_path: Path
) -> None:
    """A row queued before the step checked: refused for good at its first attempt, as a
    stored recipient that is several addresses is, rather than written with the header."""
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    ok_data(app.dispatch(letter, Letter(["a@example.com"], "Hello"), user=user))
    with app.engine.begin() as conn:
        (message,) = conn.execute(sa.select(outbox.c.message)).scalars()
        injected = "=?utf-8?q?Hello=0D=0ABcc:_victim@example.com?="
        conn.execute(sa.update(outbox).values(message={**message, "subject": injected}))

    assert app.run_worker(once=True)["dead"] == 1

    assert _only(app).last_error == (
        "the subject must not hold an RFC 2047 encoded word (=?...?=) that decodes to a line break or control "
        "character; give the text itself"
    )
    assert not (tmp_path / "mail").exists() or list((tmp_path / "mail").glob("*.eml")) == []


def test_unicode_addresses_subjects_and_an_empty_body_are_delivered(
    app_on: AppOn, user: User, clock: FakeClock, tmp_path: Path
) -> None:
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    ok_data(app.dispatch(letter, Letter(["Jörg <joerg@example.com>", "zoë@example.com"], "Grüße ☃\ttab"), user=user))
    assert app.run_worker(once=True)["sent"] == 1
    (eml,) = (tmp_path / "mail").glob("*.eml")
    parsed = email.parser.BytesParser(policy=email.policy.default).parsebytes(eml.read_bytes())
    assert [a.addr_spec for a in parsed["To"].addresses] == ["joerg@example.com", "zoë@example.com"]
    assert (parsed["Subject"], parsed.get_content()) == ("Grüße ☃\ttab", "\n")


def test_a_mail_to_an_international_domain_names_it_in_its_ascii_form(
    app_on: AppOn, user: User, clock: FakeClock, tmp_path: Path
) -> None:
    """Before, the file's headers held an encoded word inside the address
    (``a@=?utf-8?q?b=C3=BCcher?=.example``), which no reader takes for an address."""
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    letter_to = Letter(["Anna <anna@bücher.example>"], "Hi", sender="Shop <shop@bücher.example>")
    ok_data(app.dispatch(letter, letter_to, user=user))
    assert app.run_worker(once=True)["sent"] == 1
    (eml,) = (tmp_path / "mail").glob("*.eml")
    head = eml.read_bytes().split(b"\n\n")[0].decode("ascii")
    assert "To: Anna <anna@xn--bcher-kva.example>" in head.splitlines()
    assert "From: Shop <shop@xn--bcher-kva.example>" in head.splitlines()


hook_to = f.write_handler(
    "hook-to",
    f.pipeline(Letter)
    .send_webhook(url=lambda c: c.payload.to[0], headers=lambda c: {"X-Note": c.payload.subject})
    .return_(lambda c: ok(None)),
)
hook_headers = f.write_handler(
    "hook-headers",
    f.pipeline(Letter)
    .send_webhook(url="http://127.0.0.1:9/hook", headers=lambda c: {c.payload.to[0]: c.payload.subject})
    .return_(lambda c: ok(None)),
)


@pytest.mark.parametrize(
    ("name", "value", "path", "message"),
    [
        ("X-Note", "a\r\nX-Evil: 1", "$.subject", "is not an HTTP header value"),
        ("X-Note", "héllo", "$.subject", "is not an HTTP header value"),
        ("X-Note", " padded ", "$.subject", "is not an HTTP header value"),
        ("Bad Name:", "1", "$.to[0]", "is not an HTTP header name"),
        ("X-Evil\r\nX", "1", "$.to[0]", "is not an HTTP header name"),
        ("Transfer-Encoding", "chunked", "$.to[0]", "is set by the HTTP client"),
        ("content-length", "5", "$.to[0]", "is set by the HTTP client"),
        ("Host", "internal.example", "$.to[0]", "is set by the HTTP client"),
        ("Connection", "close", "$.to[0]", "is set by the HTTP client"),
        ("Upgrade", "h2c", "$.to[0]", "is set by the HTTP client"),
        ("Idempotency-Key", "order-7", "$.to[0]", "is set by the outbox: every attempt"),
        ("idempotency-KEY", "order-7", "$.to[0]", "is set by the outbox: every attempt"),
    ],
    ids=[
        "crlf-value",
        "non-ascii-value",
        "padded-value",
        "bad-name",
        "crlf-name",
        "transfer-encoding",
        "content-length",
        "host",
        "connection",
        "upgrade",
        "idempotency-key",
        "idempotency-key-any-case",
    ],
)
def test_a_webhook_header_no_http_request_can_carry_is_refused_at_dispatch(
    app_on: AppOn, user: User, clock: FakeClock, name: str, value: str, path: str, message: str
) -> None:
    """Before, the row was stored and tried three times over (h11 or the ASCII encoder
    refusing it each time) before it was dead.  A framing or routing header (the HTTP
    client's own) was stored and sent: ``Transfer-Encoding: chunked`` beside the client's
    ``Content-Length`` made a request the receiver reads one way and a proxy another
    (request smuggling; the receiver here read the chunk framing as the JSON body), a
    ``Content-Length`` that is not the body's was retried to death, and ``Host`` sent the
    request to another virtual host than its URL names.  A step's own ``Idempotency-Key``
    was replaced by the row's id without a word: the receiver got another key than the
    step set."""
    app = app_on([f], clock=clock)
    failure = failure_of(app.dispatch(hook_headers, Letter([name], value), user=user), "validation_error")
    (problem,) = failure.details
    assert (problem["path"], problem["column"]) == (path, "kumiko_outbox.message.headers")
    assert problem["message"].startswith(message)
    assert app.outbox() == []


@attrs.frozen
class Tagged:
    url: str
    tag: Any


hook_tagged = f.write_handler(
    "hook-tagged",
    f.pipeline(Tagged)
    .send_webhook(url=lambda c: c.payload.url, headers=lambda c: {"X-Tag": c.payload.tag})
    .return_(lambda c: ok(None)),
)


@pytest.mark.parametrize(
    "tag", [None, True, b"v1", ["a", "b"], {"k": 1}], ids=["none", "bool", "bytes", "list", "dict"]
)
def test_a_header_value_whose_text_is_no_header_is_refused_at_dispatch(
    app_on: AppOn, user: User, clock: FakeClock, tag: Any
) -> None:
    """The type says ``str``; an optional payload field that is ``None`` still reaches it
    at run time.  Before, its Python text was sent (``X-Tag: None``, ``X-Tag: True``,
    ``X-Tag: ['a', 'b']``; bytes as their base64), where httpx itself refuses anything
    but a text or bytes."""
    app = app_on([f], clock=clock)
    failure = failure_of(
        app.dispatch(hook_tagged, Tagged("http://127.0.0.1:9/hook", tag), user=user), "validation_error"
    )
    (problem,) = failure.details
    assert (problem["path"], problem["column"]) == ("$.tag", "kumiko_outbox.message.headers")
    assert problem["message"] == f"is not an HTTP header value (a text or a number), not {type(tag).__name__}"
    assert app.outbox() == []


def test_a_number_or_a_uuid_as_a_header_value_is_sent_as_its_text(
    app_on: AppOn, user: User, clock: FakeClock, receiver: Receiver
) -> None:
    tag = uuid.uuid4()
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook_tagged, Tagged(receiver.url(), 42), user=user))
    ok_data(app.dispatch(hook_tagged, Tagged(receiver.url(), tag), user=user))
    assert app.run_worker(once=True)["sent"] == 2
    assert sorted(r.headers["x-tag"] for r in receiver.requests) == sorted(["42", str(tag)])


def test_headers_past_8_kib_are_refused_at_dispatch_and_up_to_it_sent(
    app_on: AppOn, user: User, clock: FakeClock, receiver: Receiver
) -> None:
    """A receiver refuses a request head past its limit (nginx 8 KiB a line, Node 16 KiB
    in all: ``431``) at every attempt.  Before, a 100 KB header was queued, and its row
    tried until it was dead."""
    app = app_on([f], clock=clock)
    failure = failure_of(
        app.dispatch(hook_tagged, Tagged(receiver.url(), "a" * 100_000), user=user), "validation_error"
    )
    (problem,) = failure.details
    assert (problem["path"], problem["column"]) == ("$.tag", "kumiko_outbox.message.headers")
    assert problem["message"] == (
        f"the step's headers take {100_000 + len('X-Tag') + 4} bytes, more than the {HEADERS_MAX} a webhook's "
        "may (receivers refuse larger ones: 431): send large values in the body"
    )
    assert app.outbox() == []

    largest = "b" * (HEADERS_MAX - len("X-Tag") - 4)
    ok_data(app.dispatch(hook_tagged, Tagged(receiver.url(), largest), user=user))
    assert app.run_worker(once=True)["sent"] == 1
    assert receiver.requests[0].headers["x-tag"] == largest


def test_an_empty_header_value_is_sent(app_on: AppOn, user: User, clock: FakeClock, receiver: Receiver) -> None:
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook_to, Letter([receiver.url()], ""), user=user))
    assert app.run_worker(once=True)["sent"] == 1
    assert receiver.requests[0].headers["x-note"] == ""


def test_header_auth_refuses_a_name_that_is_no_http_header_name() -> None:
    with pytest.raises(ValueError, match="is not an HTTP header name"):
        header_auth("X-Key\r\nX-Evil", "CRM")


def test_httpx_request_log_line_shows_the_url_masked(
    app_on: AppOn, user: User, clock: FakeClock, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx logs every request at INFO with its URL whole: an App logging at INFO (say
    ``logging.basicConfig(level=logging.INFO)``) wrote the URL's password and query
    values (credentials, masked everywhere the outbox shows a URL) to its logs."""
    url = receiver.url("/hook?token=t0ps3cret&x=1").replace("127.0.0.1", "bob:hunter2@127.0.0.1")
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(url), user=user))
    with caplog.at_level(logging.INFO):
        assert app.run_worker(once=True)["sent"] == 1

    assert "hunter2" not in caplog.text and "t0ps3cret" not in caplog.text
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    shown = receiver.base.replace("//", "//bob:***@") + "/hook?token=***&x=***"
    assert lines == [f'HTTP Request: POST {shown} "HTTP/1.1 200 OK"']
    assert receiver.requests[0].headers["authorization"] == "Basic Ym9iOmh1bnRlcjI="  # still sent, to the peer


def test_a_stored_row_with_a_framing_header_is_sent_without_it(
    app_on: AppOn, user: User, clock: FakeClock, receiver: Receiver
) -> None:
    """A row written before such headers were refused: delivery leaves them to the client,
    and the Idempotency-Key to the outbox (the row's id, as every attempt before sent)."""
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))
    framing = {
        "Transfer-Encoding": "chunked",
        "Content-Length": "5",
        "Host": "internal.example",
        "idempotency-key": "my-own",
        "X-Note": "kept",
    }
    with app.engine.begin() as conn:
        row_id, message = conn.execute(sa.select(outbox.c.id, outbox.c.message)).one()
        conn.execute(sa.update(outbox).values(message={**message, "headers": framing}))

    assert app.run_worker(once=True)["sent"] == 1

    (seen,) = receiver.requests
    assert "transfer-encoding" not in seen.headers and seen.headers["host"] == receiver.base.removeprefix("http://")
    assert seen.headers["content-length"] == str(len(seen.body)) and seen.headers["x-note"] == "kept"
    assert json.loads(seen.body) == {"n": 1}  # before, the chunk framing was read as the body
    assert seen.all("Idempotency-Key") == [str(row_id)]


@pytest.mark.parametrize("method", ["GET\r\nX-Evil: 1", "PO ST", "", "GET/"])
def test_a_method_that_is_no_http_token_is_a_boot_error(tmp_path: Path, method: str) -> None:
    """Before, the App booted and every row was tried to death (h11 refusing the method)."""
    g = Feature("hostile_method", requires=["webhook.send"])
    g.write_handler(
        "h", g.pipeline(Hook).send_webhook(url="http://x.example/", method=method).return_(lambda c: ok(None))
    )
    with pytest.raises(BootError, match=r"send_webhook method=.* is not an HTTP method"):
        App([g], database_url=f"sqlite:///{tmp_path / 'boot.sqlite3'}")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("to", "a@example.com, victim@example.com", "must be one mail address"),
        ("to", "list:a@example.com,victim@example.com;", "must be one mail address"),
        ("to", "Victim <v@example.com>; b@example.com", "must be one mail address"),
        ("to", "not an address", "must be one mail address"),
        ("to", "a@", "must be one mail address"),
        ("to", "=?utf-8?q?a=40x.example=2C_v=40y.example?= <c@example.com>", "must not hold an RFC 2047"),
        ("sender", "shop@example.com, x@evil.example", "must be one mail address"),
        ("to", "", "must be one mail address"),
        ("to", "anna@" + "ü" * 64 + ".example", "has a domain no mail server can be found for"),
        ("sender", "shop@xn--ü.example", "has a domain no mail server can be found for"),
        ("to", "a@" + "x" * 64 + ".example", "has a domain no mail server can be found for"),
    ],
    ids=[
        "comma",
        "group",
        "semicolon",
        "no-at",
        "no-domain",
        "encoded-word",
        "two-senders",
        "empty",
        "idna-long-label",
        "idna-unencodable",
        "long-label",
    ],
)
def test_a_recipient_or_sender_that_is_not_one_address_is_refused_at_dispatch(
    app_on: AppOn, user: User, clock: FakeClock, tmp_path: Path, field: str, value: str, message: str
) -> None:
    """Recipient injection without a line break: one payload field that parses as several
    addresses sent the mail to all of them (the encoded word decoded to two addresses in
    the written file); ``a@`` made the email package raise at every attempt."""
    problem = _refused_mail_field(
        app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail"))), user, field, value
    )
    assert problem.startswith(message)


def test_a_mail_to_no_one_is_a_validation_error_naming_the_field(app_on: AppOn, user: User, clock: FakeClock) -> None:
    """An empty list of recipients (or an empty one in it) comes from the caller's data as
    a bad address does.  Before, both were an ``internal_error`` (a ``StepRefused`` logged
    as a bug, with an error id), the caller told nothing of which field."""
    app = app_on([f], clock=clock)
    failure = failure_of(app.dispatch(letter, Letter([], "Hello"), user=user), "validation_error")
    assert failure.details == [
        {
            "path": "$.to",
            "message": "must name at least one recipient",
            "column": "kumiko_outbox.message.to",
            "step": "0 mail.send",
        }
    ]
    assert app.outbox() == []


def test_a_stored_mail_to_several_addresses_in_one_field_is_dead_unsent(
    app_on: AppOn, user: User, clock: FakeClock, tmp_path: Path
) -> None:
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    ok_data(app.dispatch(letter, Letter(["a@example.com"], "Hello"), user=user))
    with app.engine.begin() as conn:
        (message,) = conn.execute(sa.select(outbox.c.message)).scalars()
        conn.execute(sa.update(outbox).values(message={**message, "to": ["a@example.com, victim@example.com"]}))

    assert app.run_worker(once=True)["dead"] == 1

    assert _only(app).last_error == (
        "the mail address 'a@example.com, victim@example.com' must be one mail address "
        "(name@example.com or Name <name@example.com>)"
    )
    assert not (tmp_path / "mail").exists() or list((tmp_path / "mail").glob("*.eml")) == []


def test_a_receivers_endless_reason_phrase_is_kept_and_logged_cut_short(
    app_on: AppOn, user: User, clock: FakeClock, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A reason phrase is the receiver's to make as long as HTTP lets it (here 60 KB).
    Before, it was stored whole as ``last_error`` and written whole again in the log
    line of the dead row (a SMTP server's replies, a ``Location`` likewise)."""
    receiver.respond = lambda _i, _p: (500, {})
    receiver.reasons["/hook"] = "Trouble " + "x" * 60_000
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))
    for _ in range(3):  # the default policy: three attempts, then dead
        app.run_worker(once=True)
        clock.advance(seconds=60)

    item = _only(app)
    assert item.status == "dead"
    assert item.last_error == f"HTTP 500 Trouble {'x' * (ERROR_MAX - 17)}... ({60_017 - ERROR_MAX} more characters)"
    (line,) = [r.getMessage() for r in caplog.records if "is dead" in r.getMessage()]
    assert len(line) < ERROR_MAX + 200


def test_terminal_escapes_in_a_receivers_reason_phrase_are_kept_and_logged_escaped(
    app_on: AppOn, user: User, clock: FakeClock, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """HTTP lets a reason phrase hold control characters.  Before, they were stored as
    sent: ``kumiko-typed outbox`` wrote them to the operator's terminal (here: red text,
    a new window title, a cleared screen), and the dead row's log line and httpx's
    response line (INFO) carried them."""
    caplog.set_level(logging.INFO)
    receiver.respond = lambda _i, _p: (500, {})
    receiver.reasons["/hook"] = "\x1b[31mOops\x1b]0;pwned\x07 \x1b[2J"
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))
    for _ in range(3):
        app.run_worker(once=True)
        clock.advance(seconds=60)

    item = _only(app)
    assert item.status == "dead"
    assert item.last_error == "HTTP 500 \\x1b[31mOops\\x1b]0;pwned\\x07 \\x1b[2J"
    assert not any("\x1b" in r.getMessage() for r in caplog.records)
    assert [
        r.getMessage().endswith('"HTTP/1.1 500 \\x1b[31mOops\\x1b]0;pwned\\x07 \\x1b[2J"')
        for r in caplog.records
        if r.name == "httpx"
    ] == [True] * 3


class _Opaque:
    """A resolver's own object: no JSON form."""


hook_body = f.write_handler(
    "hook-body",
    f.pipeline(Tagged)
    .send_webhook(url=lambda c: c.payload.url, body=lambda c: {"tag": c.payload.tag, "items": [1, _Opaque()]})
    .return_(lambda c: ok(None)),
)


def test_a_webhook_body_holding_an_object_without_json_form_is_a_validation_error(
    app_on: AppOn, user: User, clock: FakeClock
) -> None:
    """Before, jsonable's TypeError escaped the step: an internal_error (a 500) with an
    error id, for what is the resolver's value, not a fault of the library."""
    app = app_on([f], clock=clock)
    failure = failure_of(app.dispatch(hook_body, Tagged("http://127.0.0.1:9/hook", "x"), user=user), "validation_error")
    (problem,) = failure.details
    assert (problem["path"], problem["column"]) == ("$", "kumiko_outbox.message")
    assert problem["message"] == "holds a value of type _Opaque, which has no JSON form: convert it first"
    assert "_Opaque" in failure.message and "object at 0x" not in failure.message
    assert app.outbox() == []
