"""What starts a workflow run: an event, a cron schedule, or a manual call."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Generic, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

__all__ = ["CronTick", "Trigger", "cron", "manual", "on_event"]

P = TypeVar("P")
E = TypeVar("E")


@attrs.frozen
class CronTick:
    """The payload of a cron-triggered run: the tick's nominal time, in UTC (whatever the
    schedule's time zone: ``scheduled_at.astimezone(ZoneInfo(...))`` gives its wall time)."""

    scheduled_at: datetime


@attrs.frozen
class Trigger(Generic[P]):
    """How a workflow starts; ``payload_type`` is what its pipeline receives."""

    kind: Literal["event", "cron", "manual"]
    payload_type: type[P]
    cron: str | None = None
    #: The zone a cron expression's wall times are read in (an IANA name).
    timezone: str = "UTC"
    #: How old a missed cron tick may be and still start a run (``None``: any age).
    catch_up: timedelta | None = None

    def ticks(self, after: datetime) -> Iterator[datetime]:
        """A cron trigger's ticks after ``after`` (aware), in UTC, without end.

        The expression is read in ``timezone``'s wall time, as a cron daemon on a machine
        set to it would: a time the spring change skips fires at the first time after it
        (``30 2 * * *`` at 03:00 that day), and a time the autumn change repeats fires once,
        at its first occurrence; both unless the hour field is ``*`` (then each real hour
        counts: ``0 * * * *`` fires 25 times on the autumn day, 23 on the spring day)."""
        from croniter import croniter  # only cron workflows need it

        assert self.cron is not None
        zone = ZoneInfo(self.timezone)
        every_hour = self.cron.split()[1] == "*"
        times = croniter(self.cron, after.astimezone(zone))
        while True:
            tick = times.get_next(datetime).astimezone(UTC)
            if every_hour or tick.astimezone(zone).fold == 0:  # fold 1: the repeated wall time
                yield tick

    def newest_tick(self, after: datetime, before: datetime) -> datetime | None:
        """The newest tick after ``after`` and before ``before`` (both excluded), if any.

        Found with :meth:`ticks` (so with its daylight-saving rules, which croniter's
        backward steps do not share), from ever earlier starts: a minute before
        ``before``, two, four...  It never walks the ticks of the whole span, which is
        what a bounded catch-up after a month-long outage must not do."""
        span = timedelta(minutes=1)
        while True:
            start = max(after, before - span)
            newest = None
            for tick in self.ticks(start):
                if tick >= before:
                    break
                newest = tick
            if newest is not None or start == after:
                return newest
            span *= 2


def on_event(event: type[E]) -> Trigger[E]:
    """Start one run per appended ``event`` (at most one per workflow and event id)."""
    return Trigger("event", event)


def manual(payload: type[P]) -> Trigger[P]:
    """Start runs explicitly with ``app.start_workflow(workflow, payload, user=...)``."""
    return Trigger("manual", payload)


def cron(expression: str, *, timezone: str = "UTC", catch_up: timedelta | None = None) -> Trigger[CronTick]:
    """Start one run per tick of a five-field cron ``expression``, read in ``timezone``'s
    wall time (an IANA name: ``"Europe/Berlin"``; daylight saving as :meth:`Trigger.ticks`
    says).

    ``catch_up`` bounds what a worker starts for the ticks missed while no worker ran (or
    the workflow was not deployed).  ``None`` (the default): every missed tick, each
    once.  A ``timedelta``: of the due ticks a worker finds, the newest always starts (a
    worker finds every tick a little late: its poll interval, a long pass); an older one
    starts only if it is at most ``catch_up`` old then, else it is skipped for good, by
    every worker, and the schedule goes on after it.  ``timedelta(0)``: only the newest
    missed tick, as Celery beat runs a missed schedule once; ``timedelta(hours=1)``: after
    a day's outage, the last hour's ticks (or, if none fell in it, the newest one)."""
    if not isinstance(expression, str):  # typed, but a number had no .split()
        raise ValueError(f"cron expression must be a text such as '0 9 * * *', not {expression!r}")
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"cron expression {expression!r} must have five fields (minute hour day month weekday)")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(
            f"cron timezone {timezone!r} is not a time zone this machine knows: give an IANA name "
            "such as 'Europe/Berlin' (where the system has no zone database, pip install tzdata)"
        ) from None
    if catch_up is not None and (not isinstance(catch_up, timedelta) or catch_up < timedelta(0)):
        # A number of seconds was easy to give (APScheduler's misfire_grace_time is one).
        raise ValueError(
            f"cron catch_up must be a timedelta of zero or more, such as timedelta(hours=1) "
            f"(timedelta(0): only the newest missed tick; None: every missed tick), not {catch_up!r}"
        )
    return Trigger("cron", CronTick, expression, timezone, catch_up)
