"""Name resolution within a delivery's deadline (webhooks and SMTP).

``getaddrinfo`` cannot be interrupted or given a timeout: a resolver that hangs holds the
caller for its own timeouts (glibc's: 5 s per try and name server, so half a minute
and more).  A name (not an address literal) is looked up in a daemon thread of its own,
waited for at most the time the delivery has left; a lookup given up on ends in that
thread when the resolver gives up, and holds nothing of the delivery.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

__all__ = ["addresses"]


def addresses(host: str, port: int, seconds: float | None) -> list[tuple[str, int]]:
    """The (address, port) pairs a TCP connection to ``host`` tries, in the resolver's
    order; ``TimeoutError`` unless they are known within ``seconds`` (``None``: no limit), ``OSError`` (or the
    ``UnicodeError`` of a name IDNA cannot encode) if ``host`` does not resolve."""
    try:  # an address literal: no lookup, no thread
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError):
        found = _looked_up(host, port, seconds)
    return [(str(sockaddr[0]), int(sockaddr[1])) for *_, sockaddr in found]


def _looked_up(host: str, port: int, seconds: float | None) -> list[Any]:
    outcome: list[Any] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            outcome.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except Exception as exc:  # handed to the waiting thread, raised there
            outcome.append(exc)
        done.set()

    threading.Thread(target=look_up, name="kumiko-resolve", daemon=True).start()
    if not done.wait(seconds):
        raise TimeoutError(f"resolving {host!r} took longer than the {seconds:.3g} s left")
    (result,) = outcome
    if isinstance(result, Exception):
        raise result
    return list(result)
