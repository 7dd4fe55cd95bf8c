"""The worker: fires workflow triggers (events, cron), wakes event waits, resumes due
runs and delivers due outbox rows — in one pass, or in a loop until stopped.

Looping, it runs the two kinds of work as two sides (``_worker_side``), the workflows
in the calling thread and the deliveries in a thread of their own, so that neither
waits for the other: a delivery waits on its peer up to the HTTP client's timeout, and
a steady stream of new rows keeps a delivery pass going; in one loop either would hold
up every wake-up and start, as a long resume backlog would hold up deliveries.  A stop
(or an error that stops one side) halts both; ``run`` returns once both have ended.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import SingletonThreadPool

from ._outbox import Deliverer, deliver_due
from ._poison import refusal
from ._wake import Bell, Halt
from ._worker_batches import counted
from ._worker_side import COUNTS, Side, log_pass, outlived
from ._workflow_cron import CronTriggers
from ._workflow_engine import WorkflowEngine
from ._workflow_feed import EventFeed

__all__ = ["Worker"]

logger = logging.getLogger("kumiko_typed")

#: The keys of ``done`` a delivery transaction's ``(sent, retried, dead)`` are added to.
_DELIVERY_COUNTS = ("sent", "retried", "dead")


class Worker:
    def __init__(
        self,
        engine: Engine,
        workflows: WorkflowEngine,
        deliverer: Deliverer,
        clock: Callable[[], datetime],
        follow: Callable[[], None],
    ) -> None:
        self._engine = engine
        self._workflows = workflows
        self._feed = EventFeed(workflows)
        self._cron = CronTriggers(workflows)
        self._deliverer = deliverer
        self._clock = clock
        #: Corrects the default clock to the database server's (``_server_clock``): each
        #: side calls it before its pass, holding no connection.
        self._follow = follow
        #: Set by a stop, or by a side that failed: both sides end.
        self._halt = Halt()

    def run(self, *, once: bool, poll_interval: float) -> dict[str, int]:
        self._halt.enter()
        try:
            return self.one_pass() if once else self._loop(poll_interval)
        finally:
            self._halt.leave()

    def stop(self) -> None:
        """Safe in a signal handler, whatever the interrupted thread holds: a flag and a
        byte on a socket (``_wake``), no lock, no database, no waiting."""
        self._halt.set()

    def _loop(self, poll_interval: float) -> dict[str, int]:
        # Each side's bell ends its idle sleep (the workflow side rings the delivery side's
        # after a pass that did work, which may have queued rows); the halt's, both sides'.
        with Bell() as halt_bell, Bell() as workflow_bell, Bell() as delivery_bell:
            self._halt.attach(halt_bell)
            try:
                return self._sides(poll_interval, halt_bell, workflow_bell, delivery_bell)
            finally:
                self._halt.detach(halt_bell)

    def _sides(self, poll_interval: float, halt_bell: Bell, workflow_bell: Bell, delivery_bell: Bell) -> dict[str, int]:
        if isinstance(self._engine.pool, SingletonThreadPool):
            # A connection per thread: an in-memory SQLite database, which only the thread
            # that made it sees.  The deliveries get no thread; one side does it all.
            alone = Side(lambda done: self._everything(self._halt.is_set, done), workflow_bell, halt_bell)
            alone.run(self._engine, self._halt, poll_interval)
            return alone.counts
        workflows = Side(
            lambda done: self._workflow_pass(self._halt.is_set, done), workflow_bell, halt_bell, rings=delivery_bell
        )
        deliveries = Side(lambda done: self._delivery_pass(self._halt.is_set, done), delivery_bell, halt_bell)
        failures: list[BaseException] = []

        def side(which: Side) -> None:
            try:
                which.run(self._engine, self._halt, poll_interval)
            except BaseException as exc:  # raised by run() below, once both sides ended
                failures.append(exc)
                self._halt.set()

        thread = threading.Thread(target=side, args=(deliveries,), name="kumiko-worker-deliveries")
        thread.start()
        try:
            side(workflows)  # returns once the worker halts: a stop, or a side's error
        finally:
            self._halt.set()  # already, unless an interrupt cut side() short
            thread.join()  # a delivery in flight ends (up to the HTTP timeout) and is recorded
        if failures:
            for later in failures[1:]:  # its message only: the first one is raised, with its traceback
                reason = later.orig if isinstance(later, DBAPIError) else later
                logger.error("the worker's other side failed too: %s: %s", type(later).__name__, reason)
            raise failures[0]
        return {key: workflows.counts[key] + deliveries.counts[key] for key in COUNTS}

    def one_pass(self) -> dict[str, int]:
        """Everything due now, in order: what a resumed run queues is delivered in the same
        pass.  A stop does not cut it short; the database may, as it may a looping
        worker's first pass: what that outlives (SQLite locked past its busy timeout, a
        lost connection, a lock timeout) ends this pass with a warning, the rest due for
        the next one, with the counts of what it committed (a cron job's next call is the
        loop's next pass)."""
        done = dict.fromkeys(COUNTS, 0)
        try:
            self._everything(_never, done)
        except DBAPIError as exc:
            if not outlived(exc, worked=False):
                raise
            logger.warning("worker pass cut short, the rest is due for the next one: %s", refusal(exc))
        log_pass(done)
        return done

    def _everything(self, stopping: Callable[[], bool], done: dict[str, int]) -> None:
        """The workflow work, then the deliveries, counted into ``done``."""
        self._workflow_pass(stopping, done)
        self._delivery_pass(stopping, done)

    def _workflow_pass(self, stopping: Callable[[], bool], done: dict[str, int]) -> None:
        """The workflow side's work, its runs counted into ``done`` as each transaction
        commits; ``stopping`` is asked between its transactions, so a stop does not wait
        for a long backlog (what is left stays due)."""
        self._follow()
        self._feed.consume(stopping, done)
        self._cron.fire(stopping, done)
        self._workflows.resume_due(stopping, done)

    def _delivery_pass(self, stopping: Callable[[], bool], done: dict[str, int]) -> None:
        self._follow()
        for _ in counted(deliver_due(self._engine, self._deliverer, self._clock, stopping), done, *_DELIVERY_COUNTS):
            pass


def _never() -> bool:
    return False
