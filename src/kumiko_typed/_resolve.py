"""Name lookups within a delivery's deadline (webhooks and SMTP).

``getaddrinfo`` (and ``gethostbyaddr``, behind ``socket.getfqdn``) cannot be interrupted
or given a timeout: a resolver that hangs holds the caller for its own timeouts (glibc's:
5 s per try and name server, so half a minute and more).  A lookup of a name (not an
address literal) runs in a daemon thread of its own, waited for at most the time the
delivery has left; a lookup given up on ends in that thread when the resolver gives up,
and holds nothing of the delivery.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["addresses", "local_name"]

T = TypeVar("T")


def addresses(host: str, port: int, seconds: float | None) -> list[tuple[str, int]]:
    """The (address, port) pairs a TCP connection to ``host`` tries, in the resolver's
    order; ``TimeoutError`` unless they are known within ``seconds`` (``None``: no limit),
    ``OSError`` (or the ``UnicodeError`` of a name IDNA cannot encode) if ``host`` does not
    resolve."""
    try:  # an address literal: no lookup, no thread
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError):
        found = _within(lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM), seconds, host)
    return [(str(sockaddr[0]), int(sockaddr[1])) for *_, sockaddr in found]


#: This machine's name as SMTP's EHLO gives it, once found.
_local: list[str] = []


def local_name(seconds: float) -> str:
    """This machine's name for SMTP's ``EHLO``, as ``smtplib`` finds it (its fully
    qualified name, else its address in brackets), looked up once per process within
    ``seconds`` (``TimeoutError`` otherwise, and the next call tries again).  smtplib looks
    it up itself for every client it makes, with a reverse lookup that no deadline cut."""
    if not _local:
        _local.append(_within(_fqdn, seconds, "this machine's name"))
    return _local[0]


def _fqdn() -> str:
    fqdn = socket.getfqdn()
    if "." in fqdn:
        return fqdn
    try:
        return f"[{socket.gethostbyname(socket.gethostname())}]"
    except OSError:
        return "[127.0.0.1]"


def _within(lookup: Callable[[], T], seconds: float | None, what: str) -> T:
    outcome: list[Any] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            outcome.append(lookup())
        except Exception as exc:  # handed to the waiting thread, raised there
            outcome.append(exc)
        done.set()

    threading.Thread(target=look_up, name="kumiko-resolve", daemon=True).start()
    if not done.wait(seconds):
        raise TimeoutError(f"resolving {what!r} took longer than the {seconds:.3g} s left")
    (result,) = outcome
    if isinstance(result, Exception):
        raise result
    value: T = result
    return value
