"""Faults of the outbox's peers an outside reviewer injects: an SMTP server that refuses
some of a mail's recipients (permanently, or for now, as greylisting does); a webhook
receiver answering a redirect without a ``Location``; retry policies that could only
misbehave at delivery.  Real peers on 127.0.0.1 (aiosmtpd,
an HTTP server); time is a hand-moved clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from _receiver import Receiver
from _support import Hook, RefusingSmtp, ok_data, smtp_server

from kumiko_typed import App, BootError, Feature, OutboxItem, RetryPolicy, SmtpTransport, User, ok
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


@attrs.frozen
class Letter:
    to: list[str]


f = Feature("outbox_faults", requires=["mail.send", "webhook.send"])
hook = f.write_handler(
    "hook",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}).return_(lambda c: ok(None)),
)
letter = f.write_handler(
    "letter",
    f.pipeline(Letter).send_mail(to=lambda c: c.payload.to, subject="Hi", body="Hello").return_(lambda c: ok(None)),
)


@pytest.fixture
def smtp() -> Iterator[tuple[RefusingSmtp, int]]:
    handler = RefusingSmtp({})
    # Without SMTPUTF8, as many servers are (aiosmtpd's Controller offers it by default).
    with smtp_server(handler, enable_SMTPUTF8=False) as port:
        yield handler, port


def _only(app: App) -> OutboxItem:
    (item,) = app.outbox()
    return item


def test_a_recipient_the_smtp_server_refuses_for_good_is_no_silent_send(
    app_on: AppOn, user: User, smtp: tuple[RefusingSmtp, int]
) -> None:
    """Before, ``smtplib`` returned the refused recipients of a mail some others took,
    and the row was marked sent: the refused one was lost without a word.  A permanent
    refusal (5xx) is not retried (the others have the mail): the row is dead, naming it."""
    handler, port = smtp
    handler.refuse["nobody@example.com"] = "550 5.1.1 No such user"
    app = app_on([f], clock=FakeClock(T0), mail=SmtpTransport("127.0.0.1", port, timeout=5))
    ok_data(app.dispatch(letter, Letter(["ann@example.com", "nobody@example.com"]), user=user))

    assert app.run_worker(once=True)["dead"] == 1
    item = _only(app)
    assert (item.status, item.attempts) == ("dead", 1)
    assert item.last_error == (
        "SMTP refused 1 of 2 recipient(s), the others have the mail: nobody@example.com (550 5.1.1 No such user)"
    )
    (envelope,) = handler.envelopes
    assert envelope.rcpt_tos == ["ann@example.com"]


def test_a_recipient_the_smtp_server_refuses_for_now_is_tried_again(
    app_on: AppOn, user: User, smtp: tuple[RefusingSmtp, int]
) -> None:
    """Greylisting: ``450`` for one recipient is an attempt that failed; the next one
    sends again, with the same Message-ID (a recipient that had it can drop it)."""
    handler, port = smtp
    handler.refuse["bob@example.com"] = "450 4.7.1 Greylisted, try again later"
    clock = FakeClock(T0)
    app = app_on([f], clock=clock, mail=SmtpTransport("127.0.0.1", port, timeout=5))
    ok_data(app.dispatch(letter, Letter(["ann@example.com", "bob@example.com"]), user=user))

    assert app.run_worker(once=True)["retried"] == 1
    item = _only(app)
    assert (item.status, item.attempts) == ("pending", 1)
    assert item.last_error == (
        "SMTP refused 1 of 2 recipient(s): bob@example.com (450 4.7.1 Greylisted, try again later)"
    )
    del handler.refuse["bob@example.com"]
    clock.advance(seconds=10)
    assert app.run_worker(once=True)["sent"] == 1
    first, second = handler.envelopes
    assert (first.rcpt_tos, second.rcpt_tos) == (["ann@example.com"], ["ann@example.com", "bob@example.com"])
    assert b"Message-ID" in first.original_content
    assert _message_id(first) == _message_id(second) == f"<{item.id}@kumiko-typed>"


@pytest.mark.parametrize(
    ("code", "status"), [("550 5.1.1 No such user", "dead"), ("450 4.7.1 Greylisted, try again later", "pending")]
)
def test_a_mail_whose_every_recipient_is_refused_is_dead_at_once_only_if_for_good(
    app_on: AppOn, user: User, smtp: tuple[RefusingSmtp, int], code: str, status: str
) -> None:
    """Before, a mail no recipient could get (``550`` for each) was tried again until its
    attempts ran out, with ``SMTP SMTPRecipientsRefused: {'nobody@...': (550, b'...')}``
    as its error: only a mail some recipients took was dead at once."""
    handler, port = smtp
    handler.refuse.update({"nobody@example.com": code, "noone@example.com": code})
    app = app_on([f], clock=FakeClock(T0), mail=SmtpTransport("127.0.0.1", port, timeout=5))
    ok_data(app.dispatch(letter, Letter(["nobody@example.com", "noone@example.com"]), user=user))

    app.run_worker(once=True)
    item = _only(app)
    assert (item.status, item.attempts) == (status, 1)
    assert item.last_error == (
        f"SMTP refused 2 of 2 recipient(s): nobody@example.com ({code}), noone@example.com ({code})"
    )
    assert handler.envelopes == []


@pytest.mark.parametrize(
    ("refusing", "reply", "status", "error"),
    [
        (
            "data",
            "554 5.7.1 Message rejected as spam",
            "dead",
            "SMTP refused the mail: 554 5.7.1 Message rejected as spam",
        ),
        ("data", "451 4.3.0 Try again later", "pending", "SMTP refused the mail: 451 4.3.0 Try again later"),
        ("sender", "553 5.7.1 Sender not allowed", "dead", "SMTP refused the sender: 553 5.7.1 Sender not allowed"),
        (
            "sender",
            "452 4.3.1 Insufficient storage",
            "pending",
            "SMTP refused the sender: 452 4.3.1 Insufficient storage",
        ),
    ],
)
def test_a_mail_the_server_refuses_for_good_is_dead_at_once(
    app_on: AppOn, user: User, smtp: tuple[RefusingSmtp, int], refusing: str, reply: str, status: str, error: str
) -> None:
    """A 5xx answer to the mail's sender or content is for good (RFC 5321 4.2.1: the same
    request is not to be repeated): before, it was sent again until its attempts ran out.
    A 4xx one is tried again.  The error is the server's reply, not smtplib's repr."""
    handler, port = smtp
    setattr(handler, f"{refusing}_reply", reply)
    app = app_on([f], clock=FakeClock(T0), mail=SmtpTransport("127.0.0.1", port, timeout=5))
    ok_data(app.dispatch(letter, Letter(["ann@example.com"]), user=user))

    app.run_worker(once=True)
    item = _only(app)
    assert (item.status, item.attempts, item.last_error) == (status, 1, error)
    assert handler.envelopes == []


def test_a_mail_to_an_international_domain_goes_through_a_server_without_smtputf8(
    app_on: AppOn, user: User, smtp: tuple[RefusingSmtp, int]
) -> None:
    """The domain goes in its ASCII form (IDNA): before, smtplib asked the server for
    SMTPUTF8, which this one (as many) does not offer, and the mail was tried until dead
    (``SMTPNotSupportedError``).  The recipient's inbox is the same."""
    handler, port = smtp
    app = app_on([f], clock=FakeClock(T0), mail=SmtpTransport("127.0.0.1", port, timeout=5))
    ok_data(app.dispatch(letter, Letter(["Anna <anna@bücher.example>"]), user=user))

    assert app.run_worker(once=True)["sent"] == 1
    (envelope,) = handler.envelopes
    assert envelope.rcpt_tos == ["anna@xn--bcher-kva.example"]
    assert b"To: Anna <anna@xn--bcher-kva.example>" in bytes(envelope.original_content).splitlines()


def test_a_non_ascii_local_part_to_a_server_without_smtputf8_is_dead_at_once(
    app_on: AppOn, user: User, smtp: tuple[RefusingSmtp, int]
) -> None:
    """Before, smtplib's ``SMTPNotSupportedError`` was a failed attempt like a refused
    connection: the mail was tried again, against the same server, until its attempts ran
    out, and the error did not say what the server lacks.  Nothing reaches the server."""
    handler, port = smtp
    app = app_on([f], clock=FakeClock(T0), mail=SmtpTransport("127.0.0.1", port, timeout=5))
    ok_data(app.dispatch(letter, Letter(["Jörg <jörg@example.com>", "ann@example.com"]), user=user))

    assert app.run_worker(once=True)["dead"] == 1
    item = _only(app)
    assert (item.status, item.attempts) == ("dead", 1)
    assert item.last_error == (
        "the SMTP server does not offer SMTPUTF8, which jörg@example.com need(s) (a non-ASCII local part): "
        "send through a server that offers it, then requeue the mail"
    )
    assert handler.envelopes == []


def test_a_non_ascii_local_part_goes_through_a_server_with_smtputf8(app_on: AppOn, user: User) -> None:
    handler = RefusingSmtp({})
    with smtp_server(handler, enable_SMTPUTF8=True) as port:
        app = app_on([f], clock=FakeClock(T0), mail=SmtpTransport("127.0.0.1", port, timeout=5))
        ok_data(app.dispatch(letter, Letter(["Jörg <jörg@bücher.example>"]), user=user))
        assert app.run_worker(once=True)["sent"] == 1
    (envelope,) = handler.envelopes
    assert envelope.rcpt_tos == ["jörg@xn--bcher-kva.example"]


def _message_id(envelope: Any) -> str:
    for line in bytes(envelope.original_content).decode().splitlines():
        if line.lower().startswith("message-id:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Message-ID")


@pytest.mark.parametrize("status", [302, 308])
def test_a_redirect_without_a_location_is_a_failed_attempt_that_says_so(
    app_on: AppOn, user: User, receiver: Receiver, status: int
) -> None:
    """Before, the delivery read the missing header and stored ``KeyError: 'location'``
    (httpx calls every 301/302/303/307/308 a redirect, with a Location or without)."""
    receiver.respond = lambda _i, _p: (status, {})
    app = app_on([f], clock=FakeClock(T0))
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))

    assert app.run_worker(once=True)["retried"] == 1
    item = _only(app)
    assert item.status == "pending"
    assert item.last_error == f"HTTP {status} redirect without a Location (redirects are not followed)"


@pytest.mark.parametrize(("status", "reason"), [(304, "Not Modified"), (300, "Multiple Choices"), (305, "Use Proxy")])
def test_a_3xx_that_is_no_redirect_fails_with_its_own_status(
    app_on: AppOn, user: User, receiver: Receiver, status: int, reason: str
) -> None:
    """httpx (0.29) calls every 3xx a redirect: a ``304 Not Modified`` was stored as
    ``HTTP 304 redirect without a Location (redirects are not followed)``."""
    receiver.respond = lambda _i, _p: (status, {"Location": "/elsewhere"} if status == 300 else {})
    app = app_on([f], clock=FakeClock(T0))
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))

    assert app.run_worker(once=True)["retried"] == 1
    assert _only(app).last_error == f"HTTP {status} {reason}"


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: RetryPolicy(base_delay=timedelta(seconds=-10)), "base_delay must not be negative, got -10 seconds"),
        (lambda: RetryPolicy(base_delay=10), "base_delay must be a timedelta, not int"),
        (lambda: RetryPolicy(backoff="fast"), "backoff must be 'exponential' or 'linear', not 'fast'"),
    ],
)
def test_a_retry_policy_that_cannot_schedule_a_retry_is_refused_when_made(
    make: Callable[[], RetryPolicy], problem: str
) -> None:
    """Before, a negative delay made every retry due at once (all attempts in one pass), an
    ``int`` delay crashed the dispatch that queued the row (``AttributeError``), and an
    unknown backoff was taken as exponential without a word."""
    with pytest.raises((TypeError, ValueError)) as err:
        make()
    assert str(err.value) == problem


def test_a_retry_that_is_no_policy_fails_the_boot(tmp_path: Path) -> None:
    """Before, ``retry=5`` was dropped for the default policy without a word."""
    g = Feature("of_boot", requires=["webhook.send"])
    g.write_handler(
        "h", g.pipeline(Hook).send_webhook(url="https://crm.example/hook", retry=5).return_(lambda c: ok(None))
    )
    with pytest.raises(BootError) as err:
        App([g], database_url=f"sqlite:///{tmp_path / 'boot.sqlite3'}")
    assert "handler of_boot:h, step 0 (webhook.send): send_webhook retry= takes a RetryPolicy, not int" in str(
        err.value
    )
