"""The worker: passes that fire workflow triggers (events, cron), wake event waits,
resume due runs and deliver due outbox rows — once, or in a loop until stopped.

Idle, it sleeps a poll interval; on PostgreSQL a NOTIFY sent at the commit of new
work (``_notify``) ends the sleep early.  A pass the database interrupts (busy, a
restart) is retried after a poll interval: what it committed stays, the rest is done
again by the next pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError, OperationalError

from ._notify import CHANNEL, Listener
from ._outbox import Deliverer, deliver_due
from ._transient import transient
from ._workflow_cron import CronTriggers
from ._workflow_engine import WorkflowEngine
from ._workflow_feed import EventFeed

__all__ = ["Worker"]

logger = logging.getLogger("kumiko_typed")

COUNTS = ("started", "resumed", "sent", "retried", "dead")


class Worker:
    def __init__(
        self,
        engine: Engine,
        workflows: WorkflowEngine,
        deliverer: Deliverer,
        clock: Callable[[], datetime],
    ) -> None:
        self._engine = engine
        self._workflows = workflows
        self._feed = EventFeed(workflows)
        self._cron = CronTriggers(workflows)
        self._deliverer = deliverer
        self._clock = clock
        self._stop = threading.Event()

    def run(self, *, once: bool, poll_interval: float) -> dict[str, int]:
        total = dict.fromkeys(COUNTS, 0)
        postgres = self._engine.dialect.name == "postgresql"
        listener = Listener(self._engine, idle=self._stop.wait) if not once and postgres else None
        try:
            return self._loop(total, once, poll_interval, listener)
        finally:
            # Cleared on the way out, not the way in: a stop asked for just before the
            # loop started (a signal during start-up) still stops it.
            self._stop.clear()
            if listener is not None:
                listener.close()

    def stop(self) -> None:
        self._stop.set()
        if self._engine.dialect.name == "postgresql":
            with self._engine.connect() as conn:  # wake a listener now rather than at its next poll
                conn.execute(text("SELECT pg_notify(:channel, 'stop')"), {"channel": CHANNEL})
                conn.commit()

    def _loop(
        self, total: dict[str, int], once: bool, poll_interval: float, listener: Listener | None
    ) -> dict[str, int]:
        worked = False
        while True:
            try:
                this_pass = self.one_pass()
            except DBAPIError as exc:
                # What a pass committed stays; the rest is done again by the next pass.  A
                # worker that has worked also outlives an unreachable server (a restart);
                # one that never got through stops at once (a wrong URL, no tables).
                outage = worked and isinstance(exc, OperationalError)
                if once or not (transient(exc) or outage):
                    raise
                logger.warning("worker pass failed, next one in %.1f s: %s", poll_interval, exc.orig)
                self._stop.wait(poll_interval)
                if self._stop.is_set():
                    return total
                continue
            worked = True
            for key, value in this_pass.items():
                total[key] += value
            if once or self._stop.is_set():
                return total
            if not any(this_pass.values()):
                if listener is not None:
                    listener.wait(poll_interval)  # a NOTIFY from a commit ends the wait early
                else:
                    self._stop.wait(poll_interval)

    def one_pass(self) -> dict[str, int]:
        started, woken = self._feed.consume()
        started += self._cron.fire()
        resumed = woken + self._workflows.resume_due()
        counts = deliver_due(self._engine, self._deliverer, self._clock)
        done = {
            "started": started,
            "resumed": resumed,
            "sent": counts.sent,
            "retried": counts.retried,
            "dead": counts.dead,
        }
        level = logging.INFO if any(done.values()) else logging.DEBUG
        if logger.isEnabledFor(level):  # an idle loop passes every poll interval
            summary = " ".join(f"{k}={v}" for k, v in done.items())
            logger.log(level, "worker pass: %s", summary, extra={"kumiko_counts": done})
        return done
