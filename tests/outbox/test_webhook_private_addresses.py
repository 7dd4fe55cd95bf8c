"""``App(webhook_private_addresses=False)``: a webhook whose host is (or resolves to) a
private, loopback, link-local or reserved address is not sent, and its row is dead at the
first attempt, directly and through the environment's proxy.  Before, a URL a tenant gave
reached whatever the worker's network reaches (the cloud's metadata service at
169.254.169.254, an admin port on localhost).  Real receiver and proxy on 127.0.0.1, both
databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import pytest
from _proxy import Proxy
from _receiver import Receiver
from _support import Hook, hook_feature, ok_data

from kumiko_typed import App, BootError, User
from kumiko_typed._private_addresses import PrivateHost, is_private, public_only

AppOn = Callable[..., App]

f, hook = hook_feature("inside")
REFUSAL = (
    "a private, loopback, link-local or reserved address, "
    "which App(webhook_private_addresses=False) sends no webhook to"
)


def _queue(app: App, url: str) -> None:
    ok_data(app.dispatch(hook, Hook(url), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))


def _port(receiver: Receiver) -> int:
    return httpx.URL(receiver.url()).port or 80


@pytest.mark.parametrize(
    ("host", "shown"),
    [("127.0.0.1", "127.0.0.1"), ("localhost", "127.0.0.1"), ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1")],
)
def test_a_webhook_to_an_inside_address_is_dead_at_once_and_never_sent(
    app_on: AppOn, receiver: Receiver, host: str, shown: str
) -> None:
    app = app_on([f], webhook_private_addresses=False)
    _queue(app, f"http://{host}:{_port(receiver)}/admin")

    assert app.run_worker(once=True)["dead"] == 1
    assert receiver.requests == []
    (item,) = app.outbox()
    assert (item.status, item.attempts) == ("dead", 1)
    assert item.last_error is not None
    name = host.strip("[]")
    assert item.last_error.startswith(f"{name} resolves to "), item.last_error
    assert shown in item.last_error and item.last_error.endswith(REFUSAL)


def test_by_default_an_inside_address_is_sent_to(app_on: AppOn, receiver: Receiver) -> None:
    app = app_on([f])
    _queue(app, receiver.url("/local"))
    assert app.run_worker(once=True)["sent"] == 1
    assert len(receiver.to("/local")) == 1


def test_through_a_proxy_the_host_is_refused_before_the_proxy_sees_the_request(
    app_on: AppOn, receiver: Receiver, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy itself is on 127.0.0.1 (an inside address, as proxies are): the check is on
    the webhook's host, not on the connection to the proxy."""
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    app = app_on([f], webhook_private_addresses=False)
    _queue(app, receiver.url("/via-proxy"))

    assert app.run_worker(once=True)["dead"] == 1
    assert (proxy.requests, receiver.requests) == ([], [])
    (item,) = app.outbox()
    assert item.last_error is not None and item.last_error.endswith(REFUSAL)


def test_no_proxy_naming_the_host_is_checked_as_direct(
    app_on: AppOn, receiver: Receiver, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    app = app_on([f], webhook_private_addresses=False)
    _queue(app, receiver.url())
    assert app.run_worker(once=True)["dead"] == 1
    assert (proxy.requests, receiver.requests) == ([], [])


def test_a_client_of_ones_own_cannot_be_checked_and_is_a_boot_problem(db_url: str) -> None:
    with httpx.Client() as client, pytest.raises(BootError, match="checked by the App's own HTTP client only"):
        App([f], database_url=db_url, http=client, webhook_private_addresses=False)


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # the cloud's metadata service
        "100.64.0.1",  # shared (carrier-grade NAT)
        "127.0.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "192.0.2.1",  # documentation
        "::1",
        "::",
        "fe80::1%eth0",  # a link-local address as the lookup gives it, with its interface
        "::ffff:10.0.0.1%eth0",
        "fc00::1",
        "ff02::1",
        "2001:db8::1",
        "::ffff:10.0.0.1",  # IPv4-mapped
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        # Public to Python before 3.11.10 and 3.12.4, whatever they embed:
        "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
        "::ffff:0:a00:1",  # IPv4-translated (SIIT) 10.0.0.1
        "64:ff9b:1::a9fe:a9fe",  # local-use NAT64
        "64:ff9b:1:a9:fe:a9fe::",  # local-use NAT64, a /48 prefix's placing
    ],
)
def test_inside_addresses(address: str) -> None:
    assert is_private(address)


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
        "::808:808",
        "::ffff:0:808:808",
    ],
)
def test_public_addresses(address: str) -> None:
    assert not is_private(address)


def test_a_name_with_public_and_inside_addresses_is_connected_to_its_public_ones_only() -> None:
    found = [("10.0.0.1", 443), ("8.8.8.8", 443), ("::1", 443), ("2606:4700:4700::1111", 443)]
    assert public_only("mixed.example", found) == [("8.8.8.8", 443), ("2606:4700:4700::1111", 443)]


def test_a_name_with_only_inside_addresses_is_refused_naming_each_once() -> None:
    found = [("10.0.0.1", 443), ("::1", 443), ("10.0.0.1", 80)]
    with pytest.raises(PrivateHost) as raised:
        public_only("inside.example", found)
    assert str(raised.value) == f"inside.example resolves to 10.0.0.1, ::1: {REFUSAL}"
