"""Cron triggers: each due tick of a cron workflow starts one run.

A cursor row per workflow holds its last tick (locked while a pass fires a batch of
ticks); the run's trigger key is the tick, so even a reset cursor starts no second run
for it.  A trigger's ``catch_up`` skips the missed ticks older than it in the same
transaction that moves the cursor past them: no worker starts them later."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from itertools import chain

from sqlalchemy import select, update

from ._deferred_checks import check_deferred
from ._tables import consumers
from ._triggers import CronTick
from ._worker_batches import batches, counted
from ._workflow_engine import SYSTEM_USER, Definition, WorkflowEngine

__all__ = ["CronTriggers"]

logger = logging.getLogger("kumiko_typed")

#: Ticks fired per transaction: a backfill commits its progress in steps of this many.
TICKS_PER_TRANSACTION = 100


class CronTriggers:
    def __init__(self, engine: WorkflowEngine) -> None:
        self.engine = engine
        self.workflows: list[Definition] = [d for d in engine.defs.values() if d.workflow.trigger.kind == "cron"]

    def fire(self, stopping: Callable[[], bool], done: dict[str, int] | None = None) -> int:
        """Start one run per due tick of each cron workflow (no backfill before the first
        pass): how many, also added to ``done["started"]`` as each transaction commits.
        ``stopping`` is asked between transactions: the cursor keeps what is left."""
        started = 0
        for d in self.workflows:
            started += sum(counted(batches(partial(self._fire_some, d), stopping), done, "started"))
        return started

    def _fire_some(self, d: Definition, careful: bool, checked: bool) -> tuple[bool, int]:
        """Start the runs of at most ``TICKS_PER_TRANSACTION`` due ticks of ``d`` in one
        transaction that moves its cursor past them: whether more ticks are due, and how
        many runs started.  A long backfill (workers down for days) thus commits as it goes,
        and never holds the cursor for the whole of it.  On PostgreSQL a cursor another
        worker holds is passed over (``SKIP LOCKED``): that worker fires these ticks.
        ``careful`` changes nothing: these runs' first segments take their savepoints at
        once (no lazy savepoints)."""
        engine = self.engine
        name = f"cron:{d.name}"
        started = 0
        with engine.sessions() as session, session.begin():
            if checked:
                check_deferred(session)
            now = engine.clock()
            last = session.execute(
                select(consumers.c.tick).where(consumers.c.name == name).with_for_update(skip_locked=engine.postgres)
            ).scalar_one_or_none()
            if last is None:
                # No cursor yet (no backfill: the first tick counts from now), or another
                # worker holds it; the insert does nothing then.
                session.execute(engine.new_consumer, {"name": name, "position": 0, "tick": now})
                return False, 0
            if last.tzinfo is None:
                last = last.replace(tzinfo=now.tzinfo)
            trigger = d.workflow.trigger
            ticks = trigger.ticks(last)
            tick = next(ticks)
            skipped: tuple[datetime, datetime] | None = None
            oldest = _oldest_kept(now, trigger.catch_up)
            if oldest is not None and tick < oldest:
                # Ticks older than the catch-up window: skipped for good, as the cursor moves
                # past them in this transaction (a worker after it starts none of them).
                newest_old = trigger.newest_tick(last, oldest)
                assert newest_old is not None  # ``tick`` is one
                first, ticks = tick, trigger.ticks(newest_old)
                tick = next(ticks)
                if tick > now:  # none in the window: the newest due tick starts, however old
                    tick, ticks = newest_old, chain([tick], ticks)
                    newest_old = trigger.newest_tick(last, newest_old)
                if newest_old is not None:
                    skipped = (first, newest_old)
            fired = 0
            while tick <= now and fired < TICKS_PER_TRANSACTION:
                if engine.create(session, d, CronTick(tick), SYSTEM_USER, f"cron:{tick.isoformat()}"):
                    started += 1
                fired += 1
                last = tick
                tick = next(ticks)
            session.execute(update(consumers).where(consumers.c.name == name).values(tick=last))
        if skipped is not None:  # committed: said once, by the worker that skipped them
            logger.warning(
                "cron workflow %s skipped its ticks from %s to %s: older than its catch_up=%s when found",
                d.name,
                skipped[0].isoformat(),
                skipped[1].isoformat(),
                trigger.catch_up,
            )
        return tick <= now, started


def _oldest_kept(now: datetime, catch_up: timedelta | None) -> datetime | None:
    """The oldest a missed tick may be and still start a run (``None``: any age); a
    ``catch_up`` reaching before year 1 bounds nothing, rather than overflow each pass."""
    if catch_up is None:
        return None
    try:
        return now - catch_up
    except OverflowError:
        return None
