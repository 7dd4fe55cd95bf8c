"""The App's default clock on PostgreSQL: this machine's clock, corrected to the database
server's.

Workers on several machines compare times that other machines wrote: an outbox row's
lease (the claimer's time plus ``CLAIM_LEASE``), a run's wake time, a cron cursor.  With
each machine's own clock, one running six minutes fast took a row another worker was still
delivering (its lease looked run out), and woke runs and fired cron ticks early.  Read
against one clock, the server's, workers agree whatever their machines' clocks say; so do
procrastinate and DBOS, which compare in SQL with ``now()``.  Here the schedule stays in
Python (``App(clock=...)`` is what tests move), so the App reads the server's time before a
dispatch, a manual start or a worker's pass, at most every ``READ_EVERY``, and keeps the
difference to this machine's clock: a clock set wrong is corrected at the first reading,
one stepped since the last (NTP, by hand) at the next call, and between readings this
machine's clock still counts (a process paused past its lease sees that it is late).

SQLite has no server: its file is on this machine, so there its clock is this machine's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

__all__ = ["READ_EVERY", "SKEW_LOGGED", "STEPPED", "ServerClock"]

logger = logging.getLogger("kumiko_typed")

#: How often the server's time is read again (on this machine's monotonic clock).
READ_EVERY: Final = 60.0
#: This machine's clock moved this much more or less than its monotonic clock since the
#: last reading: it was stepped, and the server's time is read again at once.
STEPPED: Final = 1.0
#: A difference from the server's clock worth a warning: the App corrects it, but what
#: else runs on this machine (the application's own code, its logs) reads that clock.
SKEW_LOGGED: Final = timedelta(seconds=5)


class ServerClock:
    """Callable as the App's clock: ``host()`` plus the difference to the server's clock
    measured at the last :meth:`follow` (none before the first)."""

    def __init__(self, engine: Engine, host: Callable[[], datetime]) -> None:
        self._engine = engine
        self._host = host
        self._offset = timedelta(0)
        #: This machine's monotonic and wall clocks at the last reading.
        self._read_at: tuple[float, datetime] | None = None

    def __call__(self) -> datetime:
        return self._host() + self._offset

    def follow(self) -> None:
        """Read the server's time if the last reading is ``READ_EVERY`` old or this
        machine's clock was stepped since (called before a dispatch, a manual start and a
        worker's pass, holding no connection).  The server's time is taken as that of the
        middle of the round trip: off by at most half of it."""
        read_at = self._read_at
        if read_at is not None:
            elapsed = time.monotonic() - read_at[0]
            moved = (self._host() - read_at[1]).total_seconds()
            if elapsed < READ_EVERY and abs(moved - elapsed) < STEPPED:
                return
        try:
            offset = self._read()
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            # A pooled connection killed while idle (a server restart): SQLAlchemy made the
            # pool anew, so this reading, which writes nothing, is made again, as a
            # dispatch's transaction would be (``once_more_if_lost``).
            offset = self._read()
        if abs(offset) >= SKEW_LOGGED and abs(offset - self._offset) >= SKEW_LOGGED:
            ahead = -offset.total_seconds()
            logger.warning(
                "this machine's clock is %.1f s %s the database server's: the App keeps the server's time",
                abs(ahead),
                "ahead of" if ahead > 0 else "behind",
                extra={"kumiko_clock_ahead": ahead},
            )
        self._offset = offset
        self._read_at = (time.monotonic(), self._host())

    def _read(self) -> timedelta:
        """The server's clock minus this machine's, now."""
        with self._engine.connect() as conn:
            before = self._host()
            server: datetime = conn.exec_driver_sql("SELECT clock_timestamp()").scalar_one()
            after = self._host()
        return server.astimezone(UTC) - (before + (after - before) / 2)
