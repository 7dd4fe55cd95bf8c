"""The environment's proxies for the App's own client, read as httpx's default client
reads them.

httpx ignores ``HTTP_PROXY`` and the others once a client is given a transport, and the
App's client has one (:class:`DeadlineTransport`, for the per-attempt deadline).  So the
App reads them itself and mounts a deadline transport per proxy: the environment is read
by :func:`urllib.request.getproxies` (public stdlib, and what httpx reads too: upper or
lower case names, lower case first, ``HTTP_PROXY`` ignored under CGI), and the rules that
turn it into URL patterns are httpx's own (``httpx._utils.get_environment_proxies``,
private, so repeated here): ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` per scheme, a
proxy without a scheme is ``http://``; in ``NO_PROXY`` ``*`` turns every proxy off, an
IPv4 or IPv6 address or ``localhost`` is that host, an entry with ``://`` that URL
pattern, and any other name is that domain and its subdomains (``example.com``: not
``badexample.com``; ``.example.com``: subdomains only).  httpx matches the patterns
(``httpx.Client(mounts=...)``), the most specific first, as for its own.

:func:`urllib.request.proxy_bypass` was not taken: its matching differs from httpx's
(it reads ``host:port`` entries and, on macOS and Windows, the system's exceptions), and
the App's client should send where a default ``httpx.Client`` would.
"""

from __future__ import annotations

import base64
import ipaddress
import urllib.request
from collections.abc import Callable

import httpx

from ._http_deadline import DeadlineTransport

__all__ = ["proxy_mounts"]


def _environment() -> dict[str, str | None]:
    """URL pattern -> proxy URL (``None``: no proxy), as httpx makes it of the environment."""
    info = urllib.request.getproxies()
    patterns: dict[str, str | None] = {}
    for scheme in ("http", "https", "all"):
        if info.get(scheme):
            url = info[scheme]
            patterns[f"{scheme}://"] = url if "://" in url else f"http://{url}"
    for host in (h.strip() for h in info.get("no", "").split(",")):
        if host == "*":
            return {}
        if not host:
            continue
        if "://" in host:
            patterns[host] = None
        elif _is_ip(host, 4) or host.lower() == "localhost":
            patterns[f"all://{host}"] = None
        elif _is_ip(host, 6):
            patterns[f"all://[{host}]"] = None
        else:
            patterns[f"all://*{host}"] = None
    return patterns


def _is_ip(host: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(host.split("/", maxsplit=1)[0]).version == version
    except ValueError:
        return False


def proxy_mounts(
    remember: Callable[[str], None], *, public_only: bool = False
) -> dict[str, httpx.BaseTransport | None]:
    """The mounts that send the App's webhooks through the environment's proxies, each with
    the per-attempt deadline (``None``: direct, through the client's own transport).  The
    password of a proxy URL, and the ``Proxy-Authorization`` token made of it, go to
    ``remember`` (the delivery's redaction): a proxy that echoes them in an answer does
    not put them in a stored error.  ``public_only``: as :class:`DeadlineTransport`'s."""
    transports: dict[str, httpx.BaseTransport] = {}  # one per proxy: ALL_PROXY may be HTTP_PROXY
    mounts: dict[str, httpx.BaseTransport | None] = {}
    for pattern, url in _environment().items():
        if url is None:
            mounts[pattern] = None
            continue
        if url not in transports:
            transports[url] = _transport(url, remember, public_only)
        mounts[pattern] = transports[url]
    return mounts


def _transport(url: str, remember: Callable[[str], None], public_only: bool) -> httpx.BaseTransport:
    try:
        proxy = httpx.Proxy(url)  # takes user:password out of the URL into .auth
    except (ValueError, httpx.InvalidURL):
        return _Refused("the environment's proxy URL cannot be used (httpx reads only http://, https:// and socks5://)")
    if proxy.auth is not None:
        user, password = proxy.auth
        if password:
            remember(password)
        remember(base64.b64encode(f"{user}:{password}".encode()).decode("ascii"))
    if proxy.url.scheme not in ("http", "https"):
        return _Refused(
            f"the environment names a {proxy.url.scheme}:// proxy; the App's own client speaks to "
            "http:// and https:// proxies only: pass App(http=httpx.Client(...)) for it"
        )
    return DeadlineTransport(proxy, public_only=public_only)


class _Refused(httpx.BaseTransport):
    """A proxy the App's client cannot use: every delivery it would carry fails with the
    reason (stored with the row), instead of going round the proxy unasked."""

    def __init__(self, reason: str) -> None:
        self._reason = reason

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        raise httpx.ProxyError(self._reason)
