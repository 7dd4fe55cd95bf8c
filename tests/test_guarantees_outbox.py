"""Outbox guarantees (DESIGN §7) that no other test would notice losing (issue 20): a 4xx
answer is not a delivery, a secret quoted by the HTTP client's error is redacted from
``last_error``, and (PostgreSQL) a worker blocked in a slow delivery does not hold up
another worker.  Against a real HTTP server on 127.0.0.1 (``receiver``); time is a
hand-moved clock."""

from __future__ import annotations

import http
import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs
import httpx
import pytest
from _clock import Clock
from _outbox_worker import enqueue
from _outbox_worker import feature as fanout_feature
from _receiver import Receiver

from kumiko_typed import App, Feature, Ok, OutboxItem, User, bearer, ok

AppOn = Callable[..., App]
T0 = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


@attrs.frozen
class Hook:
    url: str


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
def clock() -> Clock:
    return Clock(T0)


def _only(app: App) -> OutboxItem:
    (item,) = app.outbox()
    return item


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive UTC datetimes."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


# --- 5. a 4xx answer is not a delivery ----------------------------------------------------------


@pytest.mark.parametrize("status", [404, 401, 422])
def test_a_4xx_answer_is_not_a_delivery(
    app_on: AppOn, user: User, receiver: Receiver, clock: Clock, status: int
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
    app_on: AppOn, user: User, clock: Clock, caplog: pytest.LogCaptureFixture
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
    assert marker not in item.last_error
    assert marker not in caplog.text


# --- 7. outbox workers do not wait on each other (PostgreSQL) ----------------------------------


@pytest.mark.postgres
def test_a_worker_blocked_in_a_slow_delivery_does_not_stall_another_worker(
    fresh_postgres_url: str, receiver: Receiver
) -> None:
    """11 due rows (more than one claim batch); worker 1 claims a batch and blocks in its
    first delivery.  Worker 2's pass delivers the row left over, and returns."""
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
        enqueue(first, receiver.url(), 11)
        one = threading.Thread(target=work, args=("first", first), daemon=True)
        two = threading.Thread(target=work, args=("second", second), daemon=True)
        one.start()
        assert entered.wait(30), "worker 1 never reached the slow delivery"
        began = time.monotonic()
        two.start()
        two.join(8)  # under the 10 s timeout of worker 1's request
        took = time.monotonic() - began
        release.set()
        one.join(60)
        two.join(60)
        assert took < 8, f"worker 2's pass waited {took:.1f} s for worker 1"
        assert (counts["second"]["sent"], counts["first"]["sent"]) == (1, 10)
        assert {i.status for i in first.outbox()} == {"sent"}
        keys = [r.headers["idempotency-key"] for r in receiver.requests]
        assert len(keys) == len(set(keys)) == 11
    finally:
        release.set()
        first.dispose()
        second.dispose()
