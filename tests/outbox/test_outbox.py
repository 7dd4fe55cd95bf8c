"""The transactional outbox (DESIGN §7) against real peers: an HTTP server and an SMTP
server (aiosmtpd) on 127.0.0.1, and maildir folders under tmp_path.  Time is a fake
clock the tests move (``App(clock=...)``); every backoff reads it.

Storage-touching behaviour runs on SQLite and PostgreSQL (``db_url``).
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import logging
import socket
import urllib.parse
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import failure_of, ok_data
from aiosmtpd.controller import Controller

from kumiko_typed import (
    App,
    Failure,
    Feature,
    MaildirTransport,
    OutboxItem,
    RetryPolicy,
    SmtpTransport,
    User,
    bearer,
    fail,
    header_auth,
    ok,
)
from kumiko_typed._tables import outbox as outbox_table
from kumiko_typed.testing import FakeClock

T0 = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
AppOn = Callable[..., App]


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive UTC datetimes, PostgreSQL aware ones."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


# --- the feature under test -----------------------------------------------------------------


@attrs.frozen
class Hook:
    url: str
    n: int = 0


@attrs.frozen
class Mail:
    to: list[str]
    subject: str
    body: str
    sender: str | None = None


def _boom(_c: Any) -> int:
    raise RuntimeError("the handler broke after send_webhook")


def _outbox_rows_in_tx(c: Any) -> int:
    return int(c.db.execute(sa.select(sa.func.count()).select_from(outbox_table)).scalar_one())


f = Feature("outbox_t", requires=["mail.send", "webhook.send"])

hook = f.write_handler(
    "hook",
    f.pipeline(Hook)
    .send_webhook(url=lambda c: c.payload.url, headers={"X-Trace": "t-1"}, body=lambda c: {"n": c.payload.n})
    .compute("rows_in_tx", _outbox_rows_in_tx)
    .return_(lambda c: ok(c.steps["rows_in_tx"])),
)
hook_put = f.write_handler(
    "hook-put",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, method="put").return_(lambda c: ok(None)),
)
hook_bearer = f.write_handler(
    "hook-bearer",
    f.pipeline(Hook)
    .send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": c.payload.n}, auth=bearer("CRM"))
    .return_(lambda c: ok(None)),
)
hook_header = f.write_handler(
    "hook-header",
    f.pipeline(Hook)
    .send_webhook(url=lambda c: c.payload.url, auth=header_auth("X-Api-Key", "CRM"))
    .return_(lambda c: ok(None)),
)
hook_own_headers = f.write_handler(
    "hook-own-headers",
    f.pipeline(Hook)
    .send_webhook(
        url=lambda c: c.payload.url,
        headers={"authorization": "Basic bXk6b3du", "X-Kept": "yes"},
        auth=bearer("CRM"),
    )
    .return_(lambda c: ok(None)),
)
hook_bad_secret = f.write_handler(
    "hook-bad-secret",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, auth=bearer("CRM_BAD")).return_(lambda c: ok(None)),
)
hook_linear = f.write_handler(
    "hook-linear",
    f.pipeline(Hook)
    .send_webhook(
        url=lambda c: c.payload.url,
        retry=RetryPolicy(times=4, backoff="linear", base_delay=timedelta(seconds=5)),
    )
    .return_(lambda c: ok(None)),
)
hook_once = f.write_handler(
    "hook-once",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, retry=RetryPolicy(times=1)).return_(lambda c: ok(None)),
)
hook_then_fail = f.write_handler(
    "hook-then-fail",
    f.pipeline(Hook)
    .send_webhook(url=lambda c: c.payload.url)
    .send_mail(to="x@example.com", subject="s", body="b")
    .return_(lambda c: fail("unprocessable", "changed my mind")),
)
hook_then_raise = f.write_handler(
    "hook-then-raise",
    f.pipeline(Hook)
    .send_webhook(url=lambda c: c.payload.url)
    .send_mail(to="x@example.com", subject="s", body="b")
    .compute("boom", _boom)
    .return_(lambda c: ok(c.steps["boom"])),
)
mail = f.write_handler(
    "mail",
    f.pipeline(Mail)
    .send_mail(
        to=lambda c: c.payload.to,
        subject=lambda c: c.payload.subject,
        body=lambda c: c.payload.body,
        sender=lambda c: c.payload.sender or "",
    )
    .return_(lambda c: ok(None)),
)

mail_unsigned = f.write_handler(
    "mail-unsigned",
    f.pipeline(Mail).send_mail(to=lambda c: c.payload.to, subject="s", body="b").return_(lambda c: ok(None)),
)


def _only(app: App) -> OutboxItem:
    items = app.outbox()
    assert len(items) == 1, items
    return items[0]


def _work(app: App) -> dict[str, int]:
    """One worker pass; its outbox counts."""
    counts = app.run_worker(once=True)
    return {k: counts[k] for k in ("sent", "retried", "dead")}


def _idle(app: App) -> None:
    assert _work(app) == {"sent": 0, "retried": 0, "dead": 0}


def _mail_dir(tmp_path: Path) -> MaildirTransport:
    return MaildirTransport(str(tmp_path / "mail"))


# --- rows are written in the handler's transaction ------------------------------------------


def test_send_webhook_and_send_mail_write_pending_rows_in_the_handlers_transaction(
    app_on: AppOn, user: User, receiver: Receiver, tmp_path: Path, clock: FakeClock
) -> None:
    app = app_on([f], mail=_mail_dir(tmp_path), clock=clock)
    # The compute step after send_webhook sees the row through c.db: same transaction.
    assert ok_data(app.dispatch(hook, Hook(receiver.url(), 1), user=user)) == 1
    clock.advance(seconds=1)
    ok_data(app.dispatch(mail, Mail(["a@example.com"], "Hi", "Body"), user=user))

    items = app.outbox()
    assert [(i.kind, i.status, i.attempts, i.last_error) for i in items] == [
        ("webhook", "pending", 0, None),
        ("mail", "pending", 0, None),
    ]
    assert receiver.requests == []  # nothing is delivered before a worker runs
    with app.engine.connect() as conn:
        row = conn.execute(sa.select(outbox_table).where(outbox_table.c.kind == "webhook")).one()
    assert row.handler == "outbox_t:hook"
    assert row.tenant_id == user.tenant_id
    assert row.message["url"] == receiver.url()


def test_send_mail_stores_sender_only_when_given(app_on: AppOn, user: User, tmp_path: Path) -> None:
    app = app_on([f], mail=_mail_dir(tmp_path))
    ok_data(app.dispatch(mail_unsigned, Mail(["a@example.com"], "s", "b"), user=user))
    ok_data(app.dispatch(mail, Mail(["a@example.com"], "s", "b", "shop@example.com"), user=user))
    with app.engine.connect() as conn:
        messages = [r.message for r in conn.execute(sa.select(outbox_table))]
    assert sorted(str(m.get("sender", "absent")) for m in messages) == ["absent", "shop@example.com"]


@pytest.mark.parametrize(
    ("handler", "code"), [(hook_then_fail, "unprocessable"), (hook_then_raise, "internal_error")], ids=["fail", "raise"]
)
def test_a_failing_handler_leaves_no_outbox_row(
    app_on: AppOn, user: User, receiver: Receiver, tmp_path: Path, handler: Any, code: str
) -> None:
    app = app_on([f], mail=_mail_dir(tmp_path))
    result = app.dispatch(handler, Hook(receiver.url()), user=user)
    assert isinstance(result, Failure)
    assert result.code == code

    assert app.outbox() == []
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(outbox_table)) == 0
    _idle(app)
    assert receiver.requests == []
    assert not (tmp_path / "mail").exists()


# --- retries, backoff and the idempotency key -----------------------------------------------


def test_a_flaky_receiver_gets_the_same_idempotency_key_until_it_succeeds(
    app_on: AppOn, user: User, receiver: Receiver, clock: FakeClock
) -> None:
    receiver.respond = lambda i, _p: (500, {}) if i < 2 else (200, {})
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(receiver.url(), 7), user=user))
    item_id = _only(app).id

    assert _work(app) == {"sent": 0, "retried": 1, "dead": 0}
    item = _only(app)
    assert (item.status, item.attempts) == ("pending", 1)
    assert item.last_error is not None and "HTTP 500" in item.last_error
    assert _utc(item.next_attempt_at) == T0 + timedelta(seconds=10)  # base_delay * 2**0

    _idle(app)  # not due yet: the clock has not moved
    clock.advance(seconds=9.9)
    _idle(app)
    assert len(receiver.requests) == 1

    clock.advance(seconds=0.1)  # T0 + 10 s
    assert _work(app) == {"sent": 0, "retried": 1, "dead": 0}
    assert _utc(_only(app).next_attempt_at) == T0 + timedelta(seconds=30)  # + base_delay * 2**1
    clock.advance(seconds=19)
    _idle(app)

    clock.advance(seconds=1)  # T0 + 30 s: attempt N+1 = 3 succeeds
    assert _work(app) == {"sent": 1, "retried": 0, "dead": 0}
    item = _only(app)
    assert (item.status, item.attempts, item.last_error, item.next_attempt_at) == ("sent", 3, None, None)

    assert len(receiver.requests) == 3
    assert {r.headers["idempotency-key"] for r in receiver.requests} == {str(item_id)}
    first = receiver.requests[0]
    assert first.method == "POST"
    assert first.headers["x-trace"] == "t-1"
    assert first.headers["content-type"] == "application/json"
    assert json.loads(first.body) == {"n": 7}
    assert all(r.body == first.body for r in receiver.requests)

    clock.advance(days=1)
    _idle(app)  # sent is final
    assert len(receiver.requests) == 3


def test_the_default_policy_is_three_exponential_attempts_then_dead_with_the_last_error(
    app_on: AppOn, user: User, receiver: Receiver, clock: FakeClock
) -> None:
    statuses = [500, 502, 503]
    receiver.respond = lambda i, _p: (statuses[i], {})
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))

    assert _work(app)["retried"] == 1
    for wait in (10, 20):
        clock.advance(seconds=wait - 1)
        _idle(app)
        clock.advance(seconds=1)
        counts = _work(app)
        assert counts["retried" if wait == 10 else "dead"] == 1, counts

    item = _only(app)
    assert (item.status, item.attempts, item.next_attempt_at) == ("dead", 3, None)
    assert item.last_error == "HTTP 503 Service Unavailable"  # the LAST error is kept
    clock.advance(days=30)
    _idle(app)
    assert len(receiver.requests) == 3
    assert len({r.headers["idempotency-key"] for r in receiver.requests}) == 1


def test_linear_backoff_from_the_steps_retry_policy(
    app_on: AppOn, user: User, receiver: Receiver, clock: FakeClock
) -> None:
    receiver.respond = lambda _i, _p: (503, {})
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook_linear, Hook(receiver.url()), user=user))

    _work(app)
    due = T0
    for attempt in (1, 2, 3):  # times=4: three pauses of 5, 10, 15 seconds
        due += timedelta(seconds=5 * attempt)
        assert _utc(_only(app).next_attempt_at) == due
        clock.now = due - timedelta(seconds=1)
        _idle(app)
        clock.now = due
        _work(app)
        assert _only(app).attempts == attempt + 1

    item = _only(app)
    assert (item.status, item.attempts) == ("dead", 4)
    assert item.last_error is not None and "HTTP 503" in item.last_error
    assert len(receiver.requests) == 4


# --- what counts as a failure ---------------------------------------------------------------


def test_a_redirect_is_a_failure_and_is_never_followed(
    app_on: AppOn, user: User, receiver: Receiver, clock: FakeClock
) -> None:
    target = receiver.url("/target")
    receiver.respond = lambda _i, path: (302, {"Location": target}) if path == "/hook" else (200, {})
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))

    for _ in range(3):
        _work(app)
        clock.advance(minutes=5)
    item = _only(app)
    assert (item.status, item.attempts) == ("dead", 3)
    assert item.last_error is not None
    assert "302" in item.last_error and "redirect" in item.last_error and target in item.last_error
    assert len(receiver.to("/hook")) == 3
    assert receiver.to("/target") == []


def test_redirects_are_not_followed_even_with_a_client_that_follows_them(
    make_app: Callable[..., App], user: User, receiver: Receiver
) -> None:
    import httpx

    receiver.respond = lambda _i, path: (307, {"Location": receiver.url("/target")}) if path == "/hook" else (200, {})
    with httpx.Client(follow_redirects=True) as client:
        app = make_app([f], http=client)
        ok_data(app.dispatch(hook_put, Hook(receiver.url()), user=user))
        assert _work(app)["retried"] == 1
    assert [r.method for r in receiver.to("/hook")] == ["PUT"]
    assert receiver.to("/target") == []


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/upload", "file:///etc/passwd", "127.0.0.1/no-scheme"])
def test_a_non_http_url_is_refused_by_the_handler_and_never_queued(app_on: AppOn, user: User, url: str) -> None:
    """Refused in the handler's transaction (tests/outbox/test_webhook_urls.py), not
    queued to go dead at its first attempt after the caller was told ``Ok``."""
    app = app_on([f])
    failure = failure_of(app.dispatch(hook, Hook(url), user=user), "validation_error")
    assert "only http and https" in failure.message and url in failure.message
    assert app.outbox() == []
    _idle(app)


def test_a_missing_secret_is_a_clear_error_and_nothing_is_sent(
    app_on: AppOn, user: User, receiver: Receiver, clock: FakeClock
) -> None:
    secrets = {"OTHER": "other-secret-value"}
    app = app_on([f], clock=clock, secrets=secrets.get)
    ok_data(app.dispatch(hook_bearer, Hook(receiver.url()), user=user))

    assert _work(app)["retried"] == 1
    item = _only(app)
    assert item.last_error is not None
    # The App reads its secrets through secrets=, not the environment: the hint named the
    # variable KUMIKO_SECRET_CRM, which setting would not have fixed.
    assert item.last_error == "secret 'CRM' is not set (the App's secrets= resolver returned nothing for it)"
    assert "other-secret-value" not in item.last_error
    assert receiver.requests == []  # never sent without its authentication

    secrets["CRM"] = "arrived-later"  # resolved at delivery: the retry picks it up
    clock.advance(seconds=10)
    assert _work(app)["sent"] == 1
    assert receiver.requests[0].headers["authorization"] == "Bearer arrived-later"


def test_a_resolver_answering_bytes_is_a_failed_attempt_of_that_row_alone(
    app_on: AppOn, user: User, receiver: Receiver, clock: FakeClock
) -> None:
    """A ``secrets=`` resolver returning bytes (a vault's binary secret) sent
    ``Authorization: Bearer b'...'``, and the bytes kept among the values to redact made
    every later error of the App's deliveries raise: the worker's pass failed, and no row
    of any secret was recorded again.  Now that row's attempt fails, naming the resolver."""
    receiver.respond = lambda _i, path: (503 if path == "/other" else 204, {})
    app = app_on([f], clock=clock, secrets={"CRM": b"tok-12345678"}.get)
    ok_data(app.dispatch(hook_bearer, Hook(receiver.url()), user=user))
    ok_data(app.dispatch(hook, Hook(receiver.url("/other")), user=user))

    assert _work(app) == {"sent": 0, "retried": 2, "dead": 0}
    errors = sorted(item.last_error or "" for item in app.outbox())
    assert errors == [
        "HTTP 503 Service Unavailable",
        "secret 'CRM': the App's secrets= resolver returned bytes, not a str",
    ]
    assert [r.path for r in receiver.requests] == ["/other"]  # nothing sent with a wrong credential


def test_a_secret_that_cannot_be_a_header_value_is_an_error_naming_the_ref_not_the_value(
    make_app: Callable[..., App], user: User, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    value = "tok\nSECRET-" + uuid.uuid4().hex
    app = make_app([f], secrets={"CRM_BAD": value}.get)
    ok_data(app.dispatch(hook_bad_secret, Hook(receiver.url()), user=user))

    _work(app)
    item = _only(app)
    assert item.last_error is not None
    assert "'CRM_BAD'" in item.last_error and "Authorization" in item.last_error
    assert "SECRET-" not in item.last_error
    assert "SECRET-" not in caplog.text
    assert receiver.requests == []


# --- authentication headers from the secret resolver ----------------------------------------


def test_bearer_and_header_auth_come_from_the_apps_secret_resolver_at_delivery(
    app_on: AppOn, user: User, receiver: Receiver
) -> None:
    secrets = {"CRM": "at-dispatch"}
    app = app_on([f], secrets=secrets.get)
    ok_data(app.dispatch(hook_bearer, Hook(receiver.url("/bearer")), user=user))
    ok_data(app.dispatch(hook_header, Hook(receiver.url("/header")), user=user))
    secrets["CRM"] = "tok-123"  # the value at delivery time is the one sent

    assert _work(app)["sent"] == 2
    (bearer_req,) = receiver.to("/bearer")
    (header_req,) = receiver.to("/header")
    assert bearer_req.headers["authorization"] == "Bearer tok-123"
    assert header_req.headers["x-api-key"] == "tok-123"
    assert "authorization" not in header_req.headers


def test_a_steps_own_headers_do_not_duplicate_the_auth_header(
    make_app: Callable[..., App], user: User, receiver: Receiver
) -> None:
    app = make_app([f], secrets={"CRM": "tok-123"}.get)
    ok_data(app.dispatch(hook_own_headers, Hook(receiver.url()), user=user))
    assert _work(app)["sent"] == 1

    (request,) = receiver.requests
    assert request.all("Idempotency-Key") == [str(_only(app).id)]
    assert request.all("Authorization") == ["Bearer tok-123"]
    assert request.all("X-Kept") == ["yes"]


def test_the_default_secret_resolver_reads_kumiko_secret_env(
    app_on: AppOn, user: User, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUMIKO_SECRET_CRM", "from-the-env")
    app = app_on([f])
    ok_data(app.dispatch(hook_bearer, Hook(receiver.url()), user=user))
    ok_data(app.dispatch(hook_bad_secret, Hook(receiver.url("/bad")), user=user))
    monkeypatch.delenv("KUMIKO_SECRET_CRM_BAD", raising=False)

    assert _work(app) == {"sent": 1, "retried": 1, "dead": 0}
    assert receiver.to("/hook")[0].headers["authorization"] == "Bearer from-the-env"
    errors = [i.last_error for i in app.outbox() if i.status == "pending"]
    assert errors == ["secret 'CRM_BAD' is not set (the default resolver reads KUMIKO_SECRET_CRM_BAD)"]


# --- secrets never reach the database or the log --------------------------------------------


def _database_text(app: App) -> bytes:
    """SQLite: every byte of the database file (and journal/WAL if any).  PostgreSQL: every row
    of every table in the database, as text."""
    if app.engine.dialect.name == "sqlite":
        app.engine.dispose()
        path = Path(str(app.engine.url.database))
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    chunks: list[str] = []
    with app.engine.connect() as conn:
        names = conn.scalars(
            sa.text(
                "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            )
        ).all()
        assert "public.kumiko_outbox" in names
        for name in names:
            chunks += conn.scalars(sa.text(f"SELECT t::text FROM {name} AS t")).all()
    return "\n".join(chunks).encode()


def test_no_trace_of_a_secret_in_the_database_or_the_log(
    app_on: AppOn, user: User, receiver: Receiver, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "kumiko-SECRET-" + uuid.uuid4().hex
    receiver.respond = lambda _i, path: (500, {}) if path == "/fails" else (200, {})
    app = app_on([f], clock=clock, secrets={"CRM": secret, "CRM_BAD": secret + "\r\nX-Evil: 1"}.get)
    ok_data(app.dispatch(hook_bearer, Hook(receiver.url("/ok")), user=user))
    ok_data(app.dispatch(hook_bearer, Hook(receiver.url("/fails")), user=user))
    ok_data(app.dispatch(hook_bad_secret, Hook(receiver.url("/bad")), user=user))
    for _ in range(3):
        _work(app)
        clock.advance(minutes=10)

    by_status = sorted((i.status, i.attempts) for i in app.outbox())
    assert by_status == [("dead", 3), ("dead", 3), ("sent", 1)]
    # The secret did travel where it belongs: the delivered and the failed requests carried it.
    assert receiver.to("/ok")[0].headers["authorization"] == f"Bearer {secret}"
    assert {r.headers["authorization"] for r in receiver.to("/fails")} == {f"Bearer {secret}"}
    assert receiver.to("/bad") == []

    dump = _database_text(app)
    assert b"secret_ref" in dump and b"CRM" in dump  # the reference is what is stored
    assert secret.encode() not in dump
    assert secret not in caplog.text
    for record in caplog.records:
        assert secret not in record.getMessage()


def test_a_secret_a_peer_echoes_back_is_redacted_before_it_is_stored_or_logged(
    app_on: AppOn, user: User, receiver: Receiver, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver may quote the credential it got: in its reason phrase, in a redirect's
    Location, percent-encoded.  None of it may reach kumiko_outbox.last_error (the database
    file, the table's contents) or the framework's log."""
    caplog.set_level(logging.DEBUG)
    secret = "kumiko-SECRET-" + uuid.uuid4().hex + "/+=~!"
    encoded = urllib.parse.quote(secret, safe="")
    answers = {
        "/reason": (401, {}),
        "/raw-location": (302, {"Location": f"http://127.0.0.1:9/login?token={secret}"}),
        "/encoded-location": (307, {"Location": f"/login?token={encoded}"}),
        "/lower-encoded-location": (303, {"Location": f"/login?token={encoded.lower()}"}),
        "/header-reason": (403, {}),
    }
    receiver.respond = lambda _i, path: answers[path]
    receiver.reasons["/reason"] = f"Unauthorized: Bearer {secret}"
    receiver.reasons["/header-reason"] = f"key {secret} refused"
    app = app_on([f], clock=clock, secrets={"CRM": secret}.get)
    for path in ("/reason", "/raw-location", "/encoded-location", "/lower-encoded-location"):
        ok_data(app.dispatch(hook_bearer, Hook(receiver.url(path)), user=user))
    ok_data(app.dispatch(hook_header, Hook(receiver.url("/header-reason")), user=user))
    for _ in range(3):
        _work(app)
        clock.advance(minutes=10)

    items = app.outbox()
    assert sorted((i.status, i.attempts) for i in items) == [("dead", 3)] * 5
    errors = sorted(str(i.last_error) for i in items)
    assert all("***" in e for e in errors), errors
    assert any(e.startswith("HTTP 401 Unauthorized: Bearer ***") for e in errors), errors
    assert any(e.startswith("HTTP 302 redirect to http://127.0.0.1:9/login?token=***") for e in errors), errors
    assert {r.headers["authorization"] for r in receiver.to("/reason")} == {f"Bearer {secret}"}
    assert {r.headers["x-api-key"] for r in receiver.to("/header-reason")} == {secret}

    dump = _database_text(app)
    for form in (secret, encoded, encoded.lower(), secret.split("/")[0]):
        assert form.encode() not in dump, form
        framework_logs = [r.getMessage() for r in caplog.records if r.name.startswith("kumiko_typed")]
        assert not [m for m in framework_logs if form in m]


@pytest.mark.parametrize("url", [" {}", "\t{}", "{}\n", "{} ", "\u00a0{}"])
def test_a_url_with_blanks_around_it_is_refused_not_queued(
    app_on: AppOn, user: User, receiver: Receiver, url: str
) -> None:
    """httpx would strip the blank and send it (or fail the same way on every attempt)."""
    app = app_on([f])
    failure = failure_of(app.dispatch(hook_linear, Hook(url.format(receiver.url())), user=user), "validation_error")
    assert "contains whitespace or control characters" in failure.message
    assert app.outbox() == []
    _idle(app)
    assert receiver.requests == []


# --- mail: SMTP and maildir -----------------------------------------------------------------


class _Collect:
    def __init__(self) -> None:
        self.envelopes: list[Any] = []

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _parse(raw: bytes) -> EmailMessage:
    parsed = email.parser.BytesParser(policy=email.policy.default).parsebytes(raw)
    assert isinstance(parsed, EmailMessage)
    return parsed


def test_smtp_delivers_to_a_real_server_with_a_stable_message_id(app_on: AppOn, user: User, clock: FakeClock) -> None:
    port = _free_port()
    app = app_on([f], clock=clock, mail=SmtpTransport("127.0.0.1", port, timeout=5))
    ok_data(
        app.dispatch(
            mail,
            Mail(["ann@example.com", "bob@example.com"], "Stock is low", "Only 3 left.\n", "shop@example.com"),
            user=user,
        )
    )
    item_id = _only(app).id

    # No server yet: the attempt fails and is retried.
    assert _work(app)["retried"] == 1
    item = _only(app)
    assert item.last_error is not None and item.last_error.startswith("SMTP ")

    handler = _Collect()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        clock.advance(seconds=10)
        assert _work(app)["sent"] == 1
    finally:
        controller.stop()

    (envelope,) = handler.envelopes
    assert envelope.mail_from == "shop@example.com"
    assert envelope.rcpt_tos == ["ann@example.com", "bob@example.com"]
    message = _parse(envelope.original_content)
    assert message["From"] == "shop@example.com"
    assert message["To"] == "ann@example.com, bob@example.com"
    assert message["Subject"] == "Stock is low"
    assert message["Message-ID"] == f"<{item_id}@kumiko-typed>"
    assert message["Idempotency-Key"] == str(item_id)
    assert message.get_content().replace("\r\n", "\n") == "Only 3 left.\n"  # SMTP lines end in CRLF
    item = _only(app)
    assert (item.status, item.attempts, item.last_error) == ("sent", 2, None)


def test_maildir_writes_one_rfc5322_file_per_message(
    app_on: AppOn, user: User, tmp_path: Path, clock: FakeClock
) -> None:
    folder = tmp_path / "outgoing"
    app = app_on([f], mail=MaildirTransport(str(folder)), clock=clock)
    ok_data(app.dispatch(mail, Mail(["ann@example.com"], "First", "One"), user=user))
    clock.advance(seconds=1)  # app.outbox() is oldest first
    ok_data(app.dispatch(mail, Mail(["bob@example.com", "cy@example.com"], "Zweite Nachricht", "Grüße\n"), user=user))
    assert not folder.exists()  # nothing before a worker runs

    assert _work(app)["sent"] == 2
    ids = [i.id for i in app.outbox()]
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{i}.eml" for i in ids)  # no temp files left

    first = _parse((folder / f"{ids[0]}.eml").read_bytes())
    assert first["From"] == "kumiko-typed@localhost"
    assert first["To"] == "ann@example.com"
    assert first["Subject"] == "First"
    assert first["Message-ID"] == f"<{ids[0]}@kumiko-typed>"
    assert first["Idempotency-Key"] == str(ids[0])
    assert first.get_content().rstrip("\n") == "One"

    second = _parse((folder / f"{ids[1]}.eml").read_bytes())
    assert second["To"] == "bob@example.com, cy@example.com"
    assert second["Subject"] == "Zweite Nachricht"
    assert second.get_content() == "Grüße\n"


def test_the_app_default_is_a_maildir_kumiko_mail_under_the_working_directory(
    app_on: AppOn, user: User, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app = app_on([f])
    assert app.mail == MaildirTransport()
    assert MaildirTransport().folder == "kumiko-mail"
    ok_data(app.dispatch(mail, Mail(["ann@example.com"], "Default", "Hello"), user=user))
    _work(app)

    (item,) = app.outbox()
    assert item.status == "sent"
    files = list((tmp_path / "kumiko-mail").iterdir())
    assert [p.name for p in files] == [f"{item.id}.eml"]
    message = _parse(files[0].read_bytes())
    assert (message["Subject"], message.get_content()) == ("Default", "Hello\n")


# --- app.outbox() ---------------------------------------------------------------------------


def test_app_outbox_lists_kind_status_attempts_and_last_error(
    app_on: AppOn, user: User, receiver: Receiver, tmp_path: Path, clock: FakeClock
) -> None:
    receiver.respond = lambda _i, path: (500, {}) if path in ("/down", "/gone") else (200, {})
    app = app_on([f], mail=_mail_dir(tmp_path), clock=clock)
    for handler, url in (
        (hook, receiver.url("/up")),
        (hook, receiver.url("/down")),
        (hook_once, receiver.url("/gone")),
    ):
        ok_data(app.dispatch(handler, Hook(url), user=user))
        clock.advance(seconds=1)  # oldest first
    ok_data(app.dispatch(mail, Mail(["ann@example.com"], "s", "b"), user=user))

    before = app.outbox()
    assert all(isinstance(i, OutboxItem) for i in before)
    expected = [("webhook", "pending", 0)] * 3 + [("mail", "pending", 0)]
    assert [(i.kind, i.status, i.attempts) for i in before] == expected
    assert len({i.id for i in before}) == 4

    assert _work(app) == {"sent": 2, "retried": 1, "dead": 1}
    after = {i.id: i for i in app.outbox()}
    assert [after[i.id].id for i in before] == [i.id for i in before]  # same rows, same order
    summary = [(after[i.id].kind, after[i.id].status, after[i.id].attempts) for i in before]
    assert summary == [("webhook", "sent", 1), ("webhook", "pending", 1), ("webhook", "dead", 1), ("mail", "sent", 1)]
    errors = [after[i.id].last_error for i in before]
    assert errors[0] is None and errors[3] is None
    assert errors[1] == errors[2] == "HTTP 500 Internal Server Error"  # /gone: its only try


def test_a_receivers_cookie_is_not_sent_back_with_another_delivery(
    app_on: AppOn, user: User, receiver: Receiver
) -> None:
    """The App's own client keeps no cookies: a Set-Cookie from one tenant's receiver
    would otherwise ride along on the next delivery to that host, another tenant's."""
    receiver.respond = lambda i, _p: (200, {"Set-Cookie": "session=tenant-a-secret; Path=/"} if i == 0 else {})
    app = app_on([f])
    ok_data(app.dispatch(hook, Hook(receiver.url("/first")), user=user))
    assert _work(app)["sent"] == 1
    other_tenant = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    ok_data(app.dispatch(hook, Hook(receiver.url("/second")), user=other_tenant))
    assert _work(app)["sent"] == 1
    (second,) = receiver.to("/second")
    assert "cookie" not in second.headers, second.headers
