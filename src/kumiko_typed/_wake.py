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
import threading
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
    """The worker's stop: a flag the sides read between transactions, and the halt bell of
    every loop running, never cleared, so every sleep of every side ends at once.  One App
    may run several loops at once (threads of one process): a stop stops them all, and the
    flag is cleared only when the last run of them returns (before, the first loop to
    return cleared it, and a stop rang only the bell of the loop started last: the others
    went on, and ``stop_worker`` never ended them)."""

    def __init__(self) -> None:
        self._set = False
        self._bells: tuple[Bell, ...] = ()
        self._runs = 0
        #: Taken by the runs only as they begin and end, never by :meth:`set`.
        self._lock = threading.Lock()

    def set(self) -> None:
        """Async-signal-safe: an attribute store and, per loop, one non-blocking send."""
        self._set = True
        for bell in self._bells:
            bell.ring()

    def is_set(self) -> bool:
        return self._set

    def enter(self) -> None:
        with self._lock:
            self._runs += 1

    def leave(self) -> None:
        """The flag is cleared on the way out of the last run, not on the way in: a stop
        asked for just before a loop started (a signal during start-up) still stops it."""
        with self._lock:
            self._runs -= 1
            if self._runs == 0:
                self._set = False

    def attach(self, bell: Bell) -> None:
        """Ring ``bell`` at a stop; one set before the loop attached it is the flag's,
        which the sides read first."""
        with self._lock:
            self._bells = (*self._bells, bell)

    def detach(self, bell: Bell) -> None:
        with self._lock:
            self._bells = tuple(b for b in self._bells if b is not bell)


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
