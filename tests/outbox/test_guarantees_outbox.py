"""Outbox guarantees (DESIGN §7) that no other test would notice losing (issue 20): a 4xx
answer is not a delivery, a secret quoted by the HTTP client's error is redacted from
``last_error``, and (PostgreSQL) a worker blocked in a slow delivery does not hold up
another worker.  Against a real HTTP server on 127.0.0.1 (``receiver``); time is a
hand-moved clock."""

from __future__ import annotations

import http
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import attrs
import httpx
import pytest
from _outbox_worker import enqueue
from _outbox_worker import feature as fanout_feature
from _receiver import Receiver
from _support import Hook, failure_of

from kumiko_typed import App, Feature, MaildirTransport, Ok, OutboxItem, SmtpTransport, User, bearer, ok
from kumiko_typed._outbox import claim_size
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


f = Feature("gto", requires=["webhook.send"])
hook = f.write_handler(
    "hook",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}).return_(lambda c: ok(None)),
)
hook_bearer = f.write_handler(
    "hook-bearer",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, auth=bearer("CRM")).return_(lambda c: ok(None)),
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def _only(app: App) -> OutboxItem:
    (item,) = app.outbox()
    return item


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive UTC datetimes."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


# --- 5. a 4xx answer is not a delivery ----------------------------------------------------------


@pytest.mark.parametrize("status", [404, 401, 422])
def test_a_4xx_answer_is_not_a_delivery(
    app_on: AppOn, user: User, receiver: Receiver, clock: FakeClock, status: int
) -> None:
    receiver.respond = lambda _i, _p: (status, {})
    error = f"HTTP {status} {http.HTTPStatus(status).phrase}"  # "HTTP 404 Not Found"
    app = app_on([f], clock=clock)
    assert app.dispatch(hook, Hook(receiver.url()), user=user) == Ok(None)

    for attempt, wait in ((1, 10), (2, 20)):  # the default policy: 10 s, then 20 s
        counts = app.run_worker(once=True)
        assert (counts["sent"], counts["retried"]) == (0, 1)
        item = _only(app)
        assert (item.status, item.attempts, item.last_error) == ("pending", attempt, error)
        assert _utc(item.next_attempt_at) == clock.now + timedelta(seconds=wait)
        clock.advance(seconds=wait)

    assert app.run_worker(once=True)["dead"] == 1  # the third and last attempt
    item = _only(app)
    assert (item.status, item.attempts, item.last_error) == ("dead", 3, error)
    assert len(receiver.requests) == 3


# --- 6. secrets are redacted from last_error ----------------------------------------------------


class QuotingTransport(httpx.BaseTransport):
    """An HTTP stack whose error quotes the request's Authorization value, plainly and as
    Python reprs (where a backslash in it is doubled)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        value = request.headers["Authorization"]
        raise httpx.ConnectError(f"refused {value} (as {value!r}; raw {request.headers.raw!r})", request=request)


def test_a_secret_quoted_by_the_http_clients_error_is_redacted_from_last_error(
    app_on: AppOn, user: User, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    marker = uuid.uuid4().hex
    secret = f"tok\\en-{marker}"  # a backslash: its repr differs from the plain text
    with httpx.Client(transport=QuotingTransport()) as client:
        app = app_on([f], clock=clock, http=client, secrets={"CRM": secret}.get)
        assert app.dispatch(hook_bearer, Hook("http://127.0.0.1:9/hook"), user=user) == Ok(None)
        assert app.run_worker(once=True)["retried"] == 1

    item = _only(app)
    assert item.status == "pending"
    assert item.last_error is not None
    assert item.last_error.startswith("ConnectError: refused Bearer ***")
    assert item.last_error.count("***") == 3  # plain, repr, and the raw headers' bytes repr
    assert item.last_error.count("Bearer ***'") == 2  # the reprs lose no character either side
    assert marker not in item.last_error
    assert marker not in caplog.text


# --- 7. outbox workers do not wait on each other (PostgreSQL) ----------------------------------


@pytest.mark.postgres
def test_a_worker_blocked_in_a_slow_delivery_does_not_stall_another_worker(
    fresh_postgres_url: str, receiver: Receiver
) -> None:
    """One row more than a claim takes; worker 1 claims a batch and blocks in its first
    delivery.  Worker 2's pass delivers the row left over, and returns."""
    rows = claim_size(4) + 1  # the App's default delivery_concurrency
    entered, release = threading.Event(), threading.Event()

    def respond(index: int, _path: str) -> tuple[int, dict[str, str]]:
        if index == 0:
            entered.set()
            release.wait(60)
        return 200, {}

    receiver.respond = respond
    first = App([fanout_feature], database_url=fresh_postgres_url)
    second = App([fanout_feature], database_url=fresh_postgres_url)
    counts: dict[str, dict[str, int]] = {}

    def work(name: str, app: App) -> None:
        counts[name] = app.run_worker(once=True)

    try:
        first.create_all()
        enqueue(first, receiver.url(), rows)
        one = threading.Thread(target=work, args=("first", first), daemon=True)
        two = threading.Thread(target=work, args=("second", second), daemon=True)
        one.start()
        assert entered.wait(30), "worker 1 never reached the slow delivery"
        began = time.monotonic()
        two.start()
        two.join(20)  # under the 30 s webhook timeout that would end worker 1's request
        took = time.monotonic() - began
        release.set()
        one.join(60)
        two.join(60)
        assert took < 20, f"worker 2's pass waited {took:.1f} s for worker 1"
        assert (counts["second"]["sent"], counts["first"]["sent"]) == (1, rows - 1)
        assert {i.status for i in first.outbox()} == {"sent"}
        keys = [r.headers["idempotency-key"] for r in receiver.requests]
        assert len(keys) == len(set(keys)) == rows
    finally:
        release.set()
        first.dispose()
        second.dispose()


# --- delivery details a mutation run (mutmut) found untested ---------------------------------
# Not storage: these run on SQLite only.


@attrs.frozen
class Letter:
    to: str


mailer = Feature("gto_mail", requires=["mail.send"])
letter = mailer.write_handler(
    "letter",
    mailer.pipeline(Letter).send_mail(to=lambda c: c.payload.to, subject="Hi", body="Body").return_(lambda c: ok(None)),
)
hook_dotted_ref = f.write_handler(
    "hook-dotted-ref",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, auth=bearer("crm.eu-1")).return_(lambda c: ok(None)),
)


def _deliver_one(app: App, handler: Any, payload: object, user: User) -> OutboxItem:
    assert app.dispatch(handler, payload, user=user) == Ok(None)
    app.run_worker(once=True)
    return _only(app)


def test_the_default_secret_resolver_reads_the_ref_upper_cased_with_underscores(
    make_app: Callable[..., App], user: User, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUMIKO_SECRET_CRM_EU_1", "from-env")
    item = _deliver_one(make_app([f]), hook_dotted_ref, Hook(receiver.url()), user)
    assert item.status == "sent"
    assert receiver.requests[0].headers["authorization"] == "Bearer from-env"


REFUSED = "only http and https URLs are delivered,"
FIX = "give an absolute http:// or https:// URL with a host"


def test_https_is_delivered_and_not_refused(make_app: Callable[..., App], user: User) -> None:
    item = _deliver_one(make_app([f]), hook, Hook("https://127.0.0.1:9/hook"), user)
    assert item.status == "pending"  # tried (and failing), not refused
    assert item.last_error is not None and item.last_error.startswith("ConnectError: ")


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("127.0.0.1/no-scheme", f"{REFUSED} not 'no scheme' (127.0.0.1/no-scheme)"),
        ("ftp://127.0.0.1/x", f"{REFUSED} not 'ftp' (ftp://127.0.0.1/x)"),
        ("http:///x", "the URL 'http:///x' names no host"),
    ],
)
def test_other_schemes_are_refused_by_name_before_anything_is_queued(
    make_app: Callable[..., App], user: User, url: str, error: str
) -> None:
    app = make_app([f])
    failure = failure_of(app.dispatch(hook, Hook(url), user=user), "validation_error")
    named = "(kumiko_outbox.message.url, from $.url)"
    assert failure.message.endswith(f"the webhook URL cannot be delivered: {error}; {FIX} {named}")
    assert app.outbox() == []


def test_a_secret_unfit_for_a_header_is_refused_with_the_rule(
    make_app: Callable[..., App], user: User, receiver: Receiver
) -> None:
    item = _deliver_one(make_app([f], secrets={"CRM": "line\nbreak"}.get), hook_bearer, Hook(receiver.url()), user)
    assert item.last_error == (
        "secret 'CRM' cannot be sent in the Authorization header: it must be printable ASCII without line breaks"
    )


class EchoingTransport:
    """An application's own mail transport whose error quotes each secret it looked up in
    every spelling an echo may use: plain, as a str and a bytes repr, percent-encoded."""

    def __init__(self, *refs: str) -> None:
        self.refs = refs

    def send(self, _message: Any, secrets: Callable[[str], str], /) -> None:
        forms = []
        for value in (secrets(ref) for ref in self.refs):
            forms += [value, repr(value), repr(value.encode()), quote(value, safe=""), quote(value), quote_plus(value)]
        raise RuntimeError(" ".join(forms))


def test_every_spelling_of_every_secret_is_redacted_the_longest_first(make_app: Callable[..., App], user: User) -> None:
    """A secret inside another one (ordered so that neither sorting by text nor shortest
    first would redact the outer one whole) and a secret whose repr, bytes repr and three
    percent-encodings all differ; redacting raises no warning either."""
    marker = uuid.uuid4().hex
    inner = f"zz-{marker}"
    outer = f"A{inner}-tail-{marker}"
    odd = f"p\u00e4\\ss/w o+{marker}"  # non-ASCII, a backslash, a slash, a blank, a plus
    secrets = {"INNER": inner, "OUTER": outer, "ODD": odd}.get
    app = make_app([mailer], mail=EchoingTransport("INNER", "OUTER", "ODD"), secrets=secrets)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        item = _deliver_one(app, letter, Letter("a@example.com"), user)
    assert item.status == "pending"
    assert item.last_error == "RuntimeError: " + " ".join(["***", "'***'", "b'***'", "***", "***", "***"] * 3)
    # A socket another test left to the garbage collector may be collected meanwhile (its
    # ResourceWarning lands here): the claim is about what redacting raises.
    assert [str(w.message) for w in caught if not issubclass(w.category, ResourceWarning)] == []


def test_maildir_makes_missing_parents_and_writes_its_temp_file_hidden_inside_the_folder(
    make_app: Callable[..., App], user: User, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename is atomic only within one file system, and a maildir reader skips dot
    files: the temp file lives in the folder, hidden, whatever the system temp dir is."""
    folder = tmp_path / "not" / "yet" / "mail"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-temp-dir"))
    visible: list[list[str]] = []
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        visible.append(sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    item = _deliver_one(make_app([mailer], mail=MaildirTransport(str(folder))), letter, Letter("a@example.com"), user)
    assert (item.status, item.last_error) == ("sent", None)
    assert visible == [[]]  # nothing a reader would pick up before the rename
    assert [p.name for p in folder.iterdir()] == [f"{item.id}.eml"]


class _Logins:
    """An aiosmtpd authenticator accepting anyone, recording (login, password)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, _server: Any, _session: Any, _envelope: Any, _mechanism: str, data: Any) -> Any:
        from aiosmtpd.smtp import AuthResult

        self.seen.append((data.login.decode(), data.password.decode()))
        return AuthResult(success=True)


class _Accept:
    async def handle_DATA(self, _server: Any, _session: Any, _envelope: Any) -> str:
        return "250 accepted"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("password_ref", "password"), [("SMTP_PW", "pw-123"), (None, "")])
def test_smtp_logs_in_with_the_username_and_the_resolved_password(
    make_app: Callable[..., App], user: User, password_ref: str | None, password: str
) -> None:
    from aiosmtpd.controller import Controller

    port, logins = _free_port(), _Logins()
    controller = Controller(_Accept(), hostname="127.0.0.1", port=port, authenticator=logins, auth_require_tls=False)
    controller.start()
    try:
        transport = SmtpTransport("127.0.0.1", port, username="shop", password_ref=password_ref, timeout=5)
        app = make_app([mailer], mail=transport, secrets={"SMTP_PW": "pw-123"}.get)
        item = _deliver_one(app, letter, Letter("a@example.com"), user)
    finally:
        controller.stop()
    assert (item.status, item.last_error) == ("sent", None)
    assert logins.seen == [("shop", password)]


def test_an_smtp_server_that_never_answers_times_out_as_configured(make_app: Callable[..., App], user: User) -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        transport = SmtpTransport("127.0.0.1", silent.getsockname()[1], timeout=0.5)
        app = make_app([mailer], mail=transport)
        assert app.dispatch(letter, Letter("a@example.com"), user=user) == Ok(None)
        worker = threading.Thread(target=app.run_worker, kwargs={"once": True}, daemon=True)
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "the SMTP connection waited past its timeout"
    item = _only(app)
    assert item.status == "pending"
    # A server that takes the connection and never greets is what a plain client meets on a
    # port speaking TLS from the start: the error says so.
    assert item.last_error == (
        "SMTP SMTPServerDisconnected: Connection unexpectedly closed: timed out; "
        "no greeting came: a port that speaks TLS from the start (465) needs implicit_tls=True"
    )


class _QuotingTransport:
    """A transport whose error quotes the secret as is."""

    def send(self, _message: Any, secrets: Callable[[str], str], /) -> None:
        raise RuntimeError(f"rejected {secrets('PW')}")


@pytest.mark.parametrize("odd", ["\udcff", "\ud800"], ids=["escaped-byte", "other-surrogate"])
def test_a_secret_with_a_lone_surrogate_is_redacted_not_a_crash(
    make_app: Callable[..., App], user: User, odd: str
) -> None:
    """``os.environ`` hands out undecodable bytes as lone surrogates (``surrogateescape``);
    such a secret cannot be percent-encoded as UTF-8, and redacting it must not raise."""
    secret = f"pw-{odd}-" + uuid.uuid4().hex
    app = make_app([mailer], mail=_QuotingTransport(), secrets={"PW": secret}.get)
    item = _deliver_one(app, letter, Letter("a@example.com"), user)
    assert (item.status, item.last_error) == ("pending", "RuntimeError: rejected ***")
