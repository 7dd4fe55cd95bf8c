"""Ids that sort in the order they were made: RFC 9562's UUIDv7 (Python 3.14's
``uuid.uuid7``), its 12 bits after the millisecond a counter (the RFC's method 3), so two
made in one millisecond by one process sort as made too.  An outbox row's id is one: rows
queued at one instant of the App's clock (a test's clock standing still, one transaction's
rows) are listed and delivered in the order they were queued; processes apart sort by
the millisecond each made its id in."""

from __future__ import annotations

import os
import threading
import time
import uuid

__all__ = ["ordered_uuid"]


class _Stamps:
    """The last (millisecond << 12 | counter) given out: the next is above it, even when
    the machine's clock steps back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> int:
        with self._lock:
            self._last = max((time.time_ns() // 1_000_000) << 12, self._last + 1)
            return self._last


_STAMPS = _Stamps()


def ordered_uuid() -> uuid.UUID:
    """A new version 7 UUID, above every one this process made before."""
    stamp = _STAMPS.next()
    random = int.from_bytes(os.urandom(8)) & ((1 << 62) - 1)
    # 48 bits of milliseconds, the version (7), 12 bits of counter, the variant (10), 62 random.
    return uuid.UUID(int=(stamp >> 12) << 80 | 7 << 76 | (stamp & 0xFFF) << 64 | 2 << 62 | random)
