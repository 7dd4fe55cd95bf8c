"""An overall deadline for one webhook delivery, which httpx's timeouts are not.

httpx's timeouts bound each network operation: a receiver that sends one byte of its
answer every fraction of a second never lets a read time out, and holds the delivery
for as long as it likes (past the claim's lease, another worker delivers the row
again).  httpx has no total timeout for a synchronous request, so the App's own client
sends through :class:`DeadlineTransport`: an httpcore connection pool whose *network
backend* (httpcore's public extension point for custom networking) gives every connect,
TLS handshake, write and read at most the time left until the deadline of the delivery
under way in the calling thread (:func:`deadline`).  No thread is interrupted and no
socket is closed from outside: the operation that would outlast the deadline times
out itself, and httpcore drops its connection as after any timeout.

Name resolution is the system resolver's, waited for within the deadline too (see
:mod:`._resolve`), and each of a name's addresses is tried with the time left.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

import attrs
import httpcore
import httpx

from ._private_addresses import is_private, public_only, refused
from ._resolve import addresses

__all__ = ["Budget", "DeadlineTransport", "deadline", "in_delivery"]

T = TypeVar("T")


@attrs.define
class Budget:
    """The deadline of one delivery (``time.monotonic()``), and whether an operation ran
    into it (``expired``): then the attempt failed for want of time, whatever the error
    the HTTP stack made of it."""

    until: float
    expired: bool = False
    #: Whether a network operation went through :class:`DeadlineTransport` (and so can be
    #: cut at the deadline): not on a client of the application's own.
    enforced: bool = False

    def narrow(self, seconds: float) -> None:
        """Bring the deadline forward to ``seconds`` from now, if that is sooner."""
        self.until = min(self.until, time.monotonic() + seconds)


_budget: ContextVar[Budget | None] = ContextVar("kumiko_delivery_budget", default=None)


def in_delivery() -> bool:
    """Whether the calling thread is inside :func:`deadline`: delivering a webhook."""
    return _budget.get() is not None


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[Budget]:
    """Every network operation of :class:`DeadlineTransport` in this thread, while the
    block runs, ends by ``seconds`` from now."""
    budget = Budget(time.monotonic() + seconds)
    token = _budget.set(budget)
    try:
        yield budget
    finally:
        _budget.reset(token)


def _within(op: Callable[[float | None], T], timeout: float | None, late: type[httpcore.TimeoutException]) -> T:
    """``op(timeout)``, its timeout cut to the time the delivery under way has left."""
    budget = _budget.get()
    if budget is None:  # not inside a delivery: the client's own timeouts only
        return op(timeout)
    budget.enforced = True
    left = budget.until - time.monotonic()
    if left <= 0:
        budget.expired = True
        raise late("the delivery's deadline has passed")
    try:
        return op(left if timeout is None else min(timeout, left))
    except httpcore.TimeoutException:
        if timeout is None or left <= timeout:  # the deadline was the limit, not the timeout
            budget.expired = True
        raise


#: The most one socket write sends while its time left stays the same.
_WRITE_PIECE = 64 * 1024


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return _within(lambda t: self._stream.read(max_bytes, t), timeout, httpcore.ReadTimeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # In pieces: one write sends until its buffer is out, each send with the whole
        # timeout, so a receiver reading just fast enough kept one big body going for
        # many times the deadline.  A piece's time left is taken anew.
        view = memoryview(buffer)
        for start in range(0, len(view), _WRITE_PIECE):
            piece = bytes(view[start : start + _WRITE_PIECE])
            _within(functools.partial(self._stream.write, piece), timeout, httpcore.WriteTimeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = _within(
            lambda t: self._stream.start_tls(ssl_context, server_hostname, t), timeout, httpcore.ConnectTimeout
        )
        return _Stream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """Connects within the delivery's deadline; with ``public_only``, only to addresses
    :func:`is_private` does not refuse (checked on the addresses connected to, after the
    lookup: no later lookup can answer otherwise)."""

    def __init__(self, *, public_only: bool = False) -> None:
        self._backend = httpcore.SyncBackend()
        self._public_only = public_only

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        budget = _budget.get()
        if budget is None and not self._public_only:  # not in a delivery: the client's own timeouts
            return _Stream(self._backend.connect_tcp(host, port, timeout, local_address, socket_options))
        # The lookup and each address in turn, all within the deadline: ``create_connection``
        # gives every address the whole timeout, so a name with three addresses that do
        # not answer held a connect three times the deadline, and a hanging resolver as
        # long as its own timeouts.
        found = _within(functools.partial(_addresses, host, port), timeout, httpcore.ConnectTimeout)
        if self._public_only:
            found = public_only(host, found)
        *others, last = found  # getaddrinfo answers with an address or raises
        for address in others:
            try:
                return self._connect(address, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout):
                if budget is not None and budget.expired:
                    raise  # the next address, as create_connection tries it, while time is left
        return self._connect(last, timeout, local_address, socket_options)

    def _connect(
        self,
        address: tuple[str, int],
        timeout: float | None,
        local_address: str | None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None,
    ) -> httpcore.NetworkStream:
        def connect(t: float | None) -> httpcore.NetworkStream:
            return self._backend.connect_tcp(*address, t, local_address, socket_options)

        return _Stream(_within(connect, timeout, httpcore.ConnectTimeout))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _addresses(host: str, port: int, timeout: float | None) -> list[tuple[str, int]]:
    """``host``'s addresses, looked up within ``timeout``, errors as httpcore's connect's."""
    try:
        return addresses(host, port, timeout)
    except TimeoutError as exc:
        raise httpcore.ConnectTimeout(str(exc)) from exc
    except (OSError, UnicodeError) as exc:
        raise httpcore.ConnectError(str(exc)) from exc


#: httpcore's exceptions as httpx raises them (the same names; the most specific first).
_HTTPX_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = tuple(
    (getattr(httpcore, name), getattr(httpx, name))
    for name in (
        "ConnectTimeout",
        "ReadTimeout",
        "WriteTimeout",
        "PoolTimeout",
        "TimeoutException",
        "ConnectError",
        "ReadError",
        "WriteError",
        "NetworkError",
        "ProxyError",
        "UnsupportedProtocol",
        "LocalProtocolError",
        "RemoteProtocolError",
        "ProtocolError",
    )
)


@contextlib.contextmanager
def _as_httpx() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for theirs, ours in _HTTPX_ERRORS:
            if isinstance(exc, theirs):
                raise ours(str(exc)) from exc
        raise


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            with _as_httpx():
                close()


class DeadlineTransport(httpx.BaseTransport):
    """An httpx transport (HTTP/1.1, TLS verified against certifi's or ``SSL_CERT_FILE``'s
    roots, as httpx's default) whose connections honour :func:`deadline`; through
    ``proxy`` (an http:// or https:// one) if given, as ``httpx.HTTPTransport(proxy=...)``
    builds it: the connection to the proxy, its TLS, a ``CONNECT`` tunnel and the request
    in it all go through the deadline's network backend."""

    def __init__(self, proxy: httpx.Proxy | None = None, *, public_only: bool = False) -> None:
        self._pool: httpcore.ConnectionPool
        # Through a proxy the connections made here go to the proxy (an inside address, as
        # often as not): the request's own host is checked before it is sent instead.
        self._public_only = public_only and proxy is not None
        if proxy is None:
            self._pool = httpcore.ConnectionPool(
                ssl_context=httpx.create_ssl_context(),
                max_connections=100,
                max_keepalive_connections=20,
                keepalive_expiry=5.0,
                network_backend=_Backend(public_only=public_only),
            )
        else:
            self._pool = httpcore.HTTPProxy(
                proxy_url=httpcore.URL(
                    scheme=proxy.url.raw_scheme,
                    host=proxy.url.raw_host,
                    port=proxy.url.port,
                    target=proxy.url.raw_path,
                ),
                proxy_auth=proxy.raw_auth,  # sent as Proxy-Authorization: Basic
                proxy_headers=proxy.headers.raw,
                ssl_context=httpx.create_ssl_context(),
                proxy_ssl_context=proxy.ssl_context,
                max_connections=100,
                max_keepalive_connections=20,
                keepalive_expiry=5.0,
                network_backend=_Backend(),
            )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if self._public_only:
            # The proxy looks the name up again and may be answered otherwise: a check on
            # every address the name has now narrows that, and a literal address is exact.
            host, port = url.host, url.port or (443 if url.scheme == "https" else 80)
            with _as_httpx():
                found = _within(functools.partial(_addresses, host, port), None, httpcore.ConnectTimeout)
                private = [address for address, _port in found if is_private(address)]
                if private:
                    raise refused(host, private)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx():
            response = self._pool.handle_request(core)
        body = response.stream
        assert isinstance(body, Iterable)
        return httpx.Response(
            response.status, headers=response.headers, stream=_Body(body), extensions=response.extensions
        )

    def close(self) -> None:
        self._pool.close()
