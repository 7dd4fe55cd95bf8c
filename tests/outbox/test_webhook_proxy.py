"""The App's own client sends webhooks through the environment's proxies (``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) as httpx's default client does, although it
has a transport of its own (which makes httpx ignore them): before, behind a corporate
proxy the webhooks went round it.  The per-attempt deadline holds through the proxy too,
and a proxy's credentials are sent but never stored.  A real forward proxy and a real
receiver on 127.0.0.1, both databases."""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from _proxy import Proxy
from _receiver import Receiver
from _support import Hook, hook_feature, ok_data

from kumiko_typed import App, RetryPolicy, User
from kumiko_typed._http_proxy import _environment
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 2, 3, 4, 5, tzinfo=UTC)

f, hook = hook_feature("proxied", RetryPolicy(times=2, base_delay=timedelta(seconds=5)))


def _queue(app: App, url: str) -> None:
    ok_data(app.dispatch(hook, Hook(url), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_a_webhook_goes_through_the_environments_proxy(
    app_on: AppOn, receiver: Receiver, proxy: Proxy, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """Before: the App's client ignored the variable and the proxy saw nothing."""
    monkeypatch.setenv(variable, proxy.url)
    app = app_on([f], clock=FakeClock(T0))
    _queue(app, receiver.url("/through"))

    assert app.run_worker(once=True)["sent"] == 1
    assert [(p.method, p.target) for p in proxy.requests] == [("POST", receiver.url("/through"))]
    (seen,) = receiver.to("/through")
    assert seen.body == b'{"n":1}'
    assert "idempotency-key" in seen.headers  # the request itself, passed on whole


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "*", "example.com, 127.0.0.1", "http://127.0.0.1"])
def test_no_proxy_naming_the_receiver_sends_direct(
    app_on: AppOn, receiver: Receiver, proxy: Proxy, monkeypatch: pytest.MonkeyPatch, no_proxy: str
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    app = app_on([f], clock=FakeClock(T0))
    _queue(app, receiver.url("/direct"))

    assert app.run_worker(once=True)["sent"] == 1
    assert proxy.requests == []
    assert len(receiver.to("/direct")) == 1


def test_no_proxy_for_another_host_still_sends_through_the_proxy(
    app_on: AppOn, receiver: Receiver, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``127.0.0.10`` is another address (not a prefix), ``27.0.0.1`` no domain of it."""
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.10,27.0.0.1,localhost,example.com")
    app = app_on([f], clock=FakeClock(T0))
    _queue(app, receiver.url())

    assert app.run_worker(once=True)["sent"] == 1
    assert len(proxy.requests) == 1


@pytest.mark.parametrize(
    "env",
    [
        {"HTTP_PROXY": "proxy.corp:3128"},
        {"HTTPS_PROXY": "http://p:1", "ALL_PROXY": "socks5://s:2", "NO_PROXY": "example.com,.internal,::1"},
        {"http_proxy": "http://a:1", "HTTP_PROXY": "http://b:2", "no_proxy": "localhost, 10.0.0.1 ,"},
        {"HTTP_PROXY": "http://p:1", "NO_PROXY": "a.com,*"},
        {"ALL_PROXY": "http://u:pw@p:1", "NO_PROXY": "https://secure.example.com,192.168.0.0/16"},
        {"HTTP_PROXY": "http://p:1", "REQUEST_METHOD": "GET"},  # CGI: HTTP_PROXY is the client's header
        {},
    ],
)
def test_the_environment_is_read_as_httpx_reads_it(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """The same URL patterns as httpx's own reading (private there, so compared here: a
    new httpx that reads differently fails this test, not a user's delivery)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    assert _environment() == httpx._utils.get_environment_proxies()


def test_a_proxy_trickling_its_answer_is_cut_at_the_deadline(
    app_on: AppOn, receiver: Receiver, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy.trickle = True  # the status line one byte every 0.2 s
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    app = app_on([f], clock=FakeClock(T0), webhook_timeout=timedelta(seconds=1))
    _queue(app, receiver.url())

    began = time.monotonic()
    assert app.run_worker(once=True)["retried"] == 1
    assert time.monotonic() - began < 8  # a guard only: the trickle would last some 8 s
    (item,) = app.outbox()
    assert item.last_error == "the receiver did not answer within 1 s (App(webhook_timeout=...))"
    assert len(proxy.requests) == 1


def test_a_proxy_trickling_its_connect_answer_is_cut_at_the_deadline(
    app_on: AppOn, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An https:// webhook goes through a ``CONNECT`` tunnel: its answer is bounded too
    (the proxy answers only once it reached the origin, here a closed port)."""
    proxy.trickle = True
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    app = app_on([f], clock=FakeClock(T0), webhook_timeout=timedelta(seconds=1))
    target = f"https://{proxy.address}/hook"  # the proxy itself: a port that is surely open
    _queue(app, target)

    began = time.monotonic()
    assert app.run_worker(once=True)["retried"] == 1
    assert time.monotonic() - began < 8
    (item,) = app.outbox()
    assert item.last_error == "the receiver did not answer within 1 s (App(webhook_timeout=...))"
    assert [p.method for p in proxy.requests] == ["CONNECT"]


def test_an_https_webhook_goes_through_the_proxys_connect_tunnel(
    app_on: AppOn, tls_receiver: Receiver, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS end to end with the receiver (its certificate checked), the proxy a tunnel."""
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    app = app_on([f], clock=FakeClock(T0))
    _queue(app, tls_receiver.url("/tls"))

    assert app.run_worker(once=True)["sent"] == 1
    assert [(p.method, p.target) for p in proxy.requests] == [("CONNECT", tls_receiver.base.removeprefix("https://"))]
    assert len(tls_receiver.to("/tls")) == 1


PASSWORD = "s3cr@t:pw"  # a test value; its "@" and ":" percent-encoded in the URL
TOKEN = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()


def test_the_proxys_credentials_are_sent(
    app_on: AppOn, receiver: Receiver, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy.credentials = TOKEN
    monkeypatch.setenv("HTTP_PROXY", f"http://alice:s3cr%40t%3Apw@{proxy.address}")
    app = app_on([f], clock=FakeClock(T0))
    _queue(app, receiver.url("/authed"))

    assert app.run_worker(once=True)["sent"] == 1
    assert [p.proxy_authorization for p in proxy.requests] == [TOKEN]
    (seen,) = receiver.to("/authed")
    assert "proxy-authorization" not in seen.headers  # the proxy's, not passed on


def test_the_proxys_credentials_never_reach_the_stored_error_or_the_logs(
    app_on: AppOn, receiver: Receiver, proxy: Proxy, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A proxy refusing them echoes what it got (password and token) in its reason."""
    proxy.credentials = "Basic something-else"
    monkeypatch.setenv("HTTP_PROXY", f"http://alice:s3cr%40t%3Apw@{proxy.address}")
    app = app_on([f], clock=FakeClock(T0))
    _queue(app, receiver.url())

    with caplog.at_level(logging.DEBUG):
        assert app.run_worker(once=True)["retried"] == 1
    (item,) = app.outbox()
    assert item.last_error is not None
    assert item.last_error.startswith("HTTP 407 Proxy Authentication Required")
    assert "***" in item.last_error
    token = TOKEN.removeprefix("Basic ")
    for text in (item.last_error, caplog.text):
        assert PASSWORD not in text and "s3cr%40t" not in text and token not in text
    assert receiver.requests == []


def test_an_unusable_proxy_fails_the_delivery_with_the_reason_instead_of_going_round_it(
    app_on: AppOn, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "socks5://bob:hunter2@127.0.0.1:1")
    app = app_on([f], clock=FakeClock(T0))
    _queue(app, receiver.url())

    assert app.run_worker(once=True)["retried"] == 1
    (item,) = app.outbox()
    assert item.last_error is not None
    assert "socks5:// proxy" in item.last_error and "hunter2" not in item.last_error
    assert receiver.requests == []
