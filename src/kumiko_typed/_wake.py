"""Waking a sleeping worker side without ever blocking whoever wakes it.

A stop usually comes from a signal handler, which Python runs in the main thread between
two bytecodes of whatever that thread was doing: inside the connection pool (its locks,
its first-connect lock), inside a ``threading.Event``'s ``wait`` (whose ``set`` takes the
same lock), inside a write to stderr.  A handler that takes such a lock waits for itself
forever; one that takes a pool connection may wait for the pool.  So a stop only sets a
flag and sends a byte on a non-blocking socket pair (what ``signal.set_wakeup_fd`` does
for the interpreter itself): no lock, no wait, no database.  A sleeping side waits with a
selector on the pair's other end and, on PostgreSQL, its LISTEN connection's socket, so
the byte ends its sleep at once.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from collections.abc import Iterable
from typing import Final, Self

__all__ = ["Bell", "Halt", "sleep"]

#: The longest one select() waits (a day): well inside epoll's limit.
_SLICE: Final = 86400.0


class Bell:
    """Rung from any thread or a signal handler; a sleeper selects on :meth:`fileno`.
    Rings before a :meth:`clear` are forgotten; one rung since keeps every sleep short."""

    def __init__(self) -> None:
        self._ear, self._mouth = socket.socketpair()
        self._ear.setblocking(False)
        self._mouth.setblocking(False)

    def ring(self) -> None:
        with contextlib.suppress(OSError):  # full: a ring is pending; closed: no one sleeps
            self._mouth.send(b"\0")

    def clear(self) -> None:
        try:
            while self._ear.recv(4096):
                pass
        except OSError:  # drained (or closed)
            pass

    def fileno(self) -> int:
        return self._ear.fileno()

    def close(self) -> None:
        self._mouth.close()
        self._ear.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Halt:
    """The worker's stop: a flag the sides read between transactions, and, while a loop
    runs, a bell that is never cleared, so every sleep of every side ends at once."""

    def __init__(self) -> None:
        self._set = False
        self.bell: Bell | None = None

    def set(self) -> None:
        """Async-signal-safe: an attribute store and, at most, one non-blocking send."""
        self._set = True
        bell = self.bell
        if bell is not None:
            bell.ring()

    def is_set(self) -> bool:
        return self._set

    def bells(self) -> list[Bell]:
        """What a sleep selects on to end when the worker halts."""
        return [] if self.bell is None else [self.bell]

    def clear(self) -> None:
        self._set = False


def sleep(timeout: float, bells: Iterable[Bell], socket_fd: int | None = None) -> bool:
    """Up to ``timeout`` seconds, until a bell rings (or rang since its last clear) or
    ``socket_fd`` can be read.  True: ``socket_fd`` can be read."""
    with selectors.DefaultSelector() as selector:
        for bell in bells:
            selector.register(bell, selectors.EVENT_READ)
        if socket_fd is not None:
            selector.register(socket_fd, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        # In slices: epoll takes a timeout of at most 2**31 - 1 ms (24.8 days) and raised
        # OverflowError beyond, so a worker's --poll-interval of a month crashed it.
        while not (ready := selector.select(min(timeout, _SLICE))):
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                break
    return socket_fd is not None and any(key.fd == socket_fd for key, _ in ready)
