"""``send_webhook`` refuses a URL it can never deliver (another scheme, no host, a
malformed one) inside the handler's transaction: a ``validation_error`` naming the field
and the fix, and nothing the handler wrote stays — before, the row was written, and went
dead at its first delivery attempt after the caller had been told ``Ok``.  A literal URL
that can never be delivered fails the boot.  A row an older release wrote is still
refused at delivery.  On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import Hook, failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, BootError, Entity, Feature, Ok, User, ok
from kumiko_typed._tables import outbox
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
FIX = "give an absolute http:// or https:// URL with a host"


class WuNote(Entity):
    __tablename__ = "wu_note"
    text: Mapped[str] = mapped_column(sa.String(200))


@attrs.frozen
class Nested:
    target: Hook


f = Feature("wu", requires=["webhook.send"])
f.entity(WuNote)
hook = f.write_handler(
    "hook",
    f.pipeline(Hook)
    .create("note", WuNote, data=lambda c: WuNote(text=c.payload.url))  # written before the refusal
    .send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1})
    .return_(lambda c: ok(None)),
)
nested = f.write_handler(
    "nested", f.pipeline(Nested).send_webhook(url=lambda c: c.payload.target.url).return_(lambda c: ok(None))
)
computed = f.write_handler(
    "computed",
    f.pipeline(Hook)
    .compute("where", lambda c: c.payload.url.replace("http", "ftp", 1))
    .send_webhook(url=lambda c: c.steps["where"])
    .return_(lambda c: ok(None)),
)

BAD = {
    "scheme": ("ftp://127.0.0.1/upload", "only http and https URLs are delivered, not 'ftp' (ftp://127.0.0.1/upload)"),
    "file": ("file:///etc/passwd", "only http and https URLs are delivered, not 'file' (file:///etc/passwd)"),
    "no-scheme": ("127.0.0.1/hook", "only http and https URLs are delivered, not 'no scheme' (127.0.0.1/hook)"),
    "empty": ("", "only http and https URLs are delivered, not 'no scheme' ()"),
    "no-host": ("http:///x", "the URL 'http:///x' names no host"),
    "blank": (" http://127.0.0.1/x", "the URL 'http://127.0.0.1/x' contains whitespace or control characters"),
    "line-break": ("http://127.0.0.1/x\r\nHost: evil", "the URL 'http://127.0.0.1/xHost: evil' contains"),
    "bad-port": ("http://127.0.0.1:99999/x", "the URL is malformed (its host or port cannot be read)"),
    "bad-ipv6": ("http://[::1/x", "the URL is malformed (its host or port cannot be read)"),
    # Queued before, and every attempt failed at the lookup ("label empty or too long").
    "port-zero": ("http://127.0.0.1:0/x", "the URL 'http://127.0.0.1:0/x' names port 0, on which nothing listens"),
    "empty-label": ("http://crm..example/x", "the URL's host 'crm..example' has an empty label or one longer"),
    "leading-dot": ("https://.crm.example/x", "the URL's host '.crm.example' has an empty label"),
    "long-label": (f"http://{'a' * 64}.example/x", f"the URL's host '{'a' * 64}.example' has an empty label"),
}


def _rows(app: App, table: Any) -> int:
    with app.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


@pytest.mark.parametrize("name", BAD)
def test_a_url_that_cannot_be_delivered_is_refused_and_nothing_is_written(app_on: AppOn, user: User, name: str) -> None:
    url, reason = BAD[name]
    app = app_on([f])
    failure = failure_of(app.dispatch(hook, Hook(url), user=user), "validation_error")
    (detail,) = failure.details  # type: ignore[misc]
    assert detail["path"] == "$.url" and detail["column"] == "kumiko_outbox.message.url"
    assert detail["message"].startswith(reason) and detail["message"].endswith(f"; {FIX}")
    named = "(kumiko_outbox.message.url, from $.url)"
    assert failure.message == f"step 1 webhook.send: the webhook URL cannot be delivered: {detail['message']} {named}"
    assert (_rows(app, outbox), _rows(app, WuNote.__table__)) == (0, 0)
    assert app.run_worker(once=True)["dead"] == 0


def test_http_and_https_in_any_case_are_written_and_delivered(app_on: AppOn, user: User, receiver: Receiver) -> None:
    app = app_on([f])
    assert app.dispatch(hook, Hook(receiver.url().replace("http://", "HTTP://")), user=user) == Ok(None)
    assert app.dispatch(hook, Hook("https://127.0.0.1:9/hook"), user=user) == Ok(None)  # refused by no one but TCP
    # A name that could resolve is the lookup's to answer: a last dot, a 63-character label.
    assert app.dispatch(hook, Hook(f"http://{'a' * 63}.example./hook"), user=user) == Ok(None)
    assert app.dispatch(hook, Hook("http://[::1]:9/hook"), user=user) == Ok(None)
    assert app.run_worker(once=True)["sent"] == 1
    assert [r.path for r in receiver.requests] == ["/hook"]
    assert _rows(app, WuNote.__table__) == 4


def test_the_refusal_names_a_nested_field_or_none_for_a_computed_url(app_on: AppOn, user: User) -> None:
    app = app_on([f])
    failure = failure_of(app.dispatch(nested, Nested(Hook("gopher://x/")), user=user), "validation_error")
    assert [d["path"] for d in failure.details] == ["$.target.url"]  # type: ignore[index,union-attr]
    failure = failure_of(app.dispatch(computed, Hook("http://x/"), user=user), "validation_error")
    assert [d["path"] for d in failure.details] == ["$"]  # type: ignore[index,union-attr]
    assert _rows(app, outbox) == 0


def test_a_host_name_longer_than_a_lookup_takes_is_refused(app_on: AppOn, user: User) -> None:
    """254 characters or more (RFC 1035), every label short: queued before, and failed at
    every lookup."""
    app = app_on([f])
    failure = failure_of(
        app.dispatch(nested, Nested(Hook(f"http://{'a.' * 127}example/x")), user=user), "validation_error"
    )
    (detail,) = failure.details  # type: ignore[misc]
    assert detail["path"] == "$.target.url"
    assert detail["message"].endswith(f"(or is longer than 253), which no lookup resolves; {FIX}")
    assert app.dispatch(nested, Nested(Hook(f"http://{'a.' * 123}example./x")), user=user) == Ok(None)  # 253
    assert _rows(app, outbox) == 1


def test_a_refused_url_is_shown_without_its_password_or_query_values(
    app_on: AppOn, user: User, caplog: pytest.LogCaptureFixture
) -> None:
    app = app_on([f])
    with caplog.at_level(logging.INFO, logger="kumiko_typed"):
        for url in (
            "ftp://bob:hunter2@example.com/x?token=t0ps3cret",
            " http://bob:hunter2@example.com/x?token=t0ps3cret",
            "http://bob:hunter2@/x?token=t0ps3cret",
            "http://bob:hunter2@example.com:http/x?token=t0ps3cret",
        ):
            failure = failure_of(app.dispatch(hook, Hook(url), user=user), "validation_error")
            told = f"{failure.message} {failure.details}"
            assert "hunter2" not in told and "t0ps3cret" not in told, told
    assert "hunter2" not in caplog.text and "t0ps3cret" not in caplog.text


@pytest.mark.parametrize("url", ["ftp://crm.example/hook", "crm.example/hook", "https:///hook"])
def test_a_literal_url_that_cannot_be_delivered_fails_the_boot(tmp_path: Path, url: str) -> None:
    g = Feature("wu_boot", requires=["webhook.send"])
    g.write_handler("h", g.pipeline(Hook).send_webhook(url=url).return_(lambda c: ok(None)))
    with pytest.raises(BootError) as err:
        App([g], database_url=f"sqlite:///{tmp_path / 'boot.sqlite3'}")
    assert "handler wu_boot:h, step 0 (webhook.send): send_webhook url=: " in str(err.value)
    assert FIX in str(err.value)


def test_a_literal_http_url_boots(tmp_path: Path) -> None:
    g = Feature("wu_ok", requires=["webhook.send"])
    g.write_handler("h", g.pipeline(Hook).send_webhook(url="https://crm.example/hook").return_(lambda c: ok(None)))
    App([g], database_url=f"sqlite:///{tmp_path / 'boot.sqlite3'}").dispose()


def test_a_row_written_before_urls_were_checked_is_dead_after_one_attempt(
    app_on: AppOn, user: User, receiver: Receiver
) -> None:
    """An older release wrote the row unchecked: delivery still refuses it, for good."""
    clock = FakeClock()
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))
    with app.engine.begin() as conn:
        (message,) = conn.execute(sa.select(outbox.c.message)).scalars()
        conn.execute(sa.update(outbox).values(message={**message, "url": "ftp://127.0.0.1/upload"}))
    counts = app.run_worker(once=True)
    assert (counts["sent"], counts["retried"], counts["dead"]) == (0, 0, 1)
    (item,) = app.outbox()
    assert (item.status, item.attempts) == ("dead", 1)
    assert item.last_error == f"only http and https URLs are delivered, not 'ftp' (ftp://127.0.0.1/upload); {FIX}"
    clock.advance(days=1)
    assert app.run_worker(once=True)["dead"] == 0
    assert receiver.requests == []


def test_another_tenants_refusal_leaves_this_tenants_rows(
    app_on: AppOn, make_user: Callable[..., User], receiver: Receiver
) -> None:
    app = app_on([f])
    alice, bob = make_user(), make_user()
    assert app.dispatch(hook, Hook(receiver.url()), user=alice) == Ok(None)
    failure_of(app.dispatch(hook, Hook("ftp://x/" + uuid.uuid4().hex), user=bob), "validation_error")
    assert [i.target for i in app.outbox()] == [receiver.url()]
