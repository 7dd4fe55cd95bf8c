"""One side of a looping worker: its passes, its idle sleep and what it does when a pass
fails.  A looping worker runs two, each in a thread of its own (``_worker``).

Idle, a side sleeps a poll interval; its bell (rung by the other side after work that
may concern it) and the worker's halt bell (rung by a stop, ``_wake``) end the sleep, and
so, on PostgreSQL, does a NOTIFY on the side's own LISTEN connection.  A pass the
database interrupts (busy, a restart) is retried after a poll interval: what it committed
stays, the rest is done again by the next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from ._notify import Listener
from ._poison import refusal
from ._transient import transient, unreachable
from ._wake import Bell, Halt, sleep

__all__ = ["COUNTS", "Side", "log_pass", "outlived"]

logger = logging.getLogger("kumiko_typed")

COUNTS = ("started", "resumed", "sent", "retried", "dead")


def log_pass(done: dict[str, int]) -> None:
    """One line per pass: INFO if it did something, else DEBUG (an idle loop passes every
    poll interval).  Every line has all the counts, so lines add up to the totals."""
    level = logging.INFO if any(done.values()) else logging.DEBUG
    if logger.isEnabledFor(level):
        summary = " ".join(f"{k}={v}" for k, v in done.items())
        logger.log(level, "worker pass: %s", summary, extra={"kumiko_counts": done})


def outlived(exc: DBAPIError, worked: bool) -> bool:
    """Whether a worker goes on after a pass the database cut short (``worked``: a pass
    of it got through before).  Before one did, an unreachable server is as a wrong host
    or port in the URL: not outlived, for the supervisor to see; nor is an error no
    retry cures (no such table).  After one did, any operational error is an outage."""
    if not worked and unreachable(exc):
        return False
    return transient(exc) or (worked and isinstance(exc, OperationalError))


class Side:
    """Passes of ``work`` until ``halt`` is set, sleeping after each idle one (until its
    ``bell`` or its loop's ``halt_bell`` rings); after one that did something it rings
    ``rings`` (the other side's bell), if given."""

    def __init__(
        self,
        work: Callable[[dict[str, int]], None],
        bell: Bell,
        halt_bell: Bell,
        rings: Bell | None = None,
    ) -> None:
        self._work = work
        self._bell = bell
        self._halt_bell = halt_bell
        self._rings = rings
        self.counts = dict.fromkeys(COUNTS, 0)

    def run(self, engine: Engine, halt: Halt, poll_interval: float) -> None:
        """Raises what stops the worker: any error but a transient one, or an outage after
        this side got through once (a wrong URL, a missing table stop it at once)."""
        bells = [self._bell, self._halt_bell]
        postgres = engine.dialect.name == "postgresql"
        listener = Listener(engine) if postgres else None
        try:
            worked = False
            while not halt.is_set():
                self._bell.clear()  # rung before this pass: the pass sees what rang it
                done = dict.fromkeys(COUNTS, 0)
                try:
                    self._work(done)
                except DBAPIError as exc:
                    if any(done.values()):  # what it committed before the database cut it short
                        log_pass(done)
                        self._count(done)
                    if not outlived(exc, worked):
                        raise
                    # A connection lost under a pass had reached the server: the URL and the
                    # server are right, and a restart refusing the next ones is an outage.
                    worked = worked or (exc.connection_invalidated and not unreachable(exc))
                    # The reason's first line: a driver's DETAIL and CONTEXT lines may quote rows.
                    logger.warning("worker pass failed, next one in %.1f s: %s", poll_interval, refusal(exc))
                    sleep(poll_interval, [self._halt_bell])
                    continue
                worked = True
                log_pass(done)
                self._count(done)
                if any(done.values()):
                    if self._rings is not None:
                        self._rings.ring()
                elif listener is not None:
                    listener.wait(poll_interval, bells)  # a NOTIFY from a commit ends the wait early
                else:
                    sleep(poll_interval, bells)
        finally:
            if listener is not None:
                listener.close()

    def _count(self, done: dict[str, int]) -> None:
        for key, value in done.items():
            self.counts[key] += value
