"""Cron triggers: each due tick of a cron workflow starts one run.

A cursor row per workflow holds its last tick (locked while a pass fires ticks); the
run's trigger key is the tick, so even a reset cursor starts no second run for it."""

from __future__ import annotations

from datetime import datetime

from croniter import croniter
from sqlalchemy import select, update

from ._tables import consumers
from ._triggers import CronTick
from ._workflow_engine import SYSTEM_USER, Definition, WorkflowEngine

__all__ = ["CronTriggers"]


class CronTriggers:
    def __init__(self, engine: WorkflowEngine) -> None:
        self.engine = engine
        self.workflows: list[Definition] = [d for d in engine.defs.values() if d.workflow.trigger.kind == "cron"]

    def fire(self) -> int:
        """Start one run per due tick of each cron workflow (no backfill before the first pass)."""
        engine = self.engine
        started = 0
        for d in self.workflows:
            expression = d.workflow.trigger.cron
            assert expression is not None
            name = f"cron:{d.name}"
            with engine.sessions() as session, session.begin():
                now = engine.clock()
                last = session.execute(
                    select(consumers.c.tick).where(consumers.c.name == name).with_for_update()
                ).scalar_one_or_none()
                if last is None:  # no backfill: the first tick counts from now
                    session.execute(engine.new_consumer, {"name": name, "position": 0, "tick": now})
                    continue
                if last.tzinfo is None:
                    last = last.replace(tzinfo=now.tzinfo)
                ticks = croniter(expression, last)
                tick: datetime = ticks.get_next(datetime)
                while tick <= now:
                    if engine.create(session, d, CronTick(tick), SYSTEM_USER, f"cron:{tick.isoformat()}"):
                        started += 1
                    last = tick
                    tick = ticks.get_next(datetime)
                session.execute(update(consumers).where(consumers.c.name == name).values(tick=last))
        return started
