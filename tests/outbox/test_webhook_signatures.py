"""``send_webhook(..., auth=signed("KEY"))`` signs each attempt as Standard Webhooks
specifies, checked here by the spec's own verifier (the ``standardwebhooks`` package) on
what a real HTTP receiver on 127.0.0.1 got: ``webhook-id`` is the outbox row's id on every
attempt, ``webhook-timestamp`` the attempt's time, and the key never leaves the worker (not
in the request, not in the database, not in an error).  Before, a receiver could only be
given the secret itself (``bearer``, ``header_auth``).  Both databases."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import ok_data
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from kumiko_typed import App, Feature, User, ok, signed
from kumiko_typed._tables import outbox as outbox_table
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
KEY = "whsec_" + base64.b64encode(bytes(range(32))).decode()


@attrs.frozen
class Order:
    url: str
    note: str = ""


f = Feature("signed_hooks", requires=["webhook.send"])
hook = f.write_handler(
    "hook",
    f.pipeline(Order)
    .send_webhook(
        url=lambda c: c.payload.url,
        # A step's own header of a signature's name is replaced, as an auth= header is.
        headers={"webhook-signature": "v1,forged", "X-Trace": "t-1"},
        body=lambda c: {"note": c.payload.note, "total": 12},
        auth=signed("HOOK_KEY"),
    )
    .return_(lambda c: ok(None)),
)
empty = f.write_handler(
    "empty",
    f.pipeline(Order)
    .send_webhook(url=lambda c: c.payload.url, method="DELETE", auth=signed("HOOK_KEY"))
    .return_(lambda c: ok(None)),
)


def _app(app_on: AppOn, secret: str, clock: FakeClock | None = None) -> App:
    kwargs: dict[str, object] = {"secrets": {"HOOK_KEY": secret}.get}
    if clock is not None:
        kwargs["clock"] = clock
    return app_on([f], **kwargs)


def test_each_attempt_is_signed_and_verifies_with_the_specs_library(
    app_on: AppOn, user: User, receiver: Receiver
) -> None:
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    receiver.respond = lambda i, _p: (503, {}) if i == 0 else (200, {})
    app = _app(app_on, KEY, clock)
    ok_data(app.dispatch(hook, Order(receiver.url(), "grüße"), user=user))
    (item,) = app.outbox()
    before = int(time.time())
    app.run_worker(once=True)
    clock.advance(minutes=5)
    app.run_worker(once=True)
    after = int(time.time())

    assert [r.headers["webhook-id"] for r in receiver.requests] == [str(item.id)] * 2  # the same on every attempt
    for request in receiver.requests:
        assert Webhook(KEY).verify(request.body, request.headers) == {"note": "grüße", "total": 12}
        assert before <= int(request.headers["webhook-timestamp"]) <= after  # the attempt's own time
        assert request.all("webhook-signature") == [request.headers["webhook-signature"]]  # the step's is gone
        assert request.headers["x-trace"] == "t-1"
        assert request.headers["idempotency-key"] == str(item.id)
    assert app.outbox()[0].status == "sent"


def test_a_changed_body_or_another_key_does_not_verify(app_on: AppOn, user: User, receiver: Receiver) -> None:
    app = _app(app_on, KEY)
    ok_data(app.dispatch(hook, Order(receiver.url(), "x"), user=user))
    app.run_worker(once=True)
    (request,) = receiver.requests
    other = "whsec_" + base64.b64encode(b"another key of 32 bytes, really.").decode()
    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(KEY).verify(request.body.replace(b"12", b"13"), request.headers)


def test_a_request_without_a_body_signs_the_empty_body(app_on: AppOn, user: User, receiver: Receiver) -> None:
    app = _app(app_on, KEY.removeprefix("whsec_").rstrip("="))  # prefix and padding are optional
    ok_data(app.dispatch(empty, Order(receiver.url()), user=user))
    app.run_worker(once=True)
    (request,) = receiver.requests
    assert (request.method, request.body) == ("DELETE", b"")
    Webhook(KEY).verify(request.body, request.headers, json_parse=False)


def test_the_key_never_leaves_the_worker(app_on: AppOn, user: User, receiver: Receiver) -> None:
    app = _app(app_on, KEY)
    ok_data(app.dispatch(hook, Order(receiver.url()), user=user))
    with app.engine.connect() as conn:
        (message,) = conn.scalars(sa.select(outbox_table.c.message))
    # Stored by name only, and not as "auth": a worker of an earlier release would send an
    # "auth" secret as a header value.
    assert (message["auth"], message["sign"]) == (None, {"secret_ref": "HOOK_KEY"})
    app.run_worker(once=True)
    (request,) = receiver.requests
    key_forms = {KEY, KEY.removeprefix("whsec_")}
    seen = json.dumps(request.raw_headers) + request.body.decode()
    assert not any(form in seen for form in key_forms)


@pytest.mark.parametrize(
    "secret",
    [
        "hunter2!",
        "whsec_====",
        "whsec_$$$$",
        "   ",
        f"{KEY} whsec_$$$$",
        # Decoded leniently, these were other keys (the quotes, the prefix's "_" and the
        # letters of "whsec" read as key; "-" and "_" dropped): every signature wrong.
        f'"{KEY}"',  # quoted, as an env file may leave it
        "whsec_" + base64.urlsafe_b64encode(b"\xfb\xff" * 16).decode(),  # the URL-safe alphabet
    ],
)
def test_a_secret_that_is_no_signing_key_fails_the_attempt_without_showing_it(
    app_on: AppOn, user: User, receiver: Receiver, secret: str
) -> None:
    app = _app(app_on, secret)
    ok_data(app.dispatch(hook, Order(receiver.url()), user=user))
    assert app.run_worker(once=True)["retried"] == 1
    assert receiver.requests == []
    (item,) = app.outbox()
    assert item.last_error is not None
    assert item.last_error == (
        "secret 'HOOK_KEY' is not a signing key: give it as whsec_ followed by base64 "
        "(the form Standard Webhooks' tools make, e.g. whsec_ + base64 of 32 random bytes; "
        "several separated by blanks while rotating)"
    )
    assert "$$$$" not in item.last_error and KEY.removeprefix("whsec_") not in item.last_error


def test_while_a_key_is_rotated_each_signs_and_either_verifies(app_on: AppOn, user: User, receiver: Receiver) -> None:
    new = "whsec_" + base64.b64encode(b"the next key, also of 32 bytes..").decode()
    app = _app(app_on, f"{KEY}  {new}")  # the old key and the new, as the secret holds them
    ok_data(app.dispatch(hook, Order(receiver.url(), "x"), user=user))
    app.run_worker(once=True)
    (request,) = receiver.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for key in (KEY, new):  # a receiver on the old key and one already on the new
        assert Webhook(key).verify(request.body, request.headers) == {"note": "x", "total": 12}
