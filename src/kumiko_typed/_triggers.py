"""What starts a workflow run: an event, a cron schedule, or a manual call."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
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


def on_event(event: type[E]) -> Trigger[E]:
    """Start one run per appended ``event`` (at most one per workflow and event id)."""
    return Trigger("event", event)


def manual(payload: type[P]) -> Trigger[P]:
    """Start runs explicitly with ``app.start_workflow(workflow, payload, user=...)``."""
    return Trigger("manual", payload)


def cron(expression: str, *, timezone: str = "UTC") -> Trigger[CronTick]:
    """Start one run per tick of a five-field cron ``expression``, read in ``timezone``'s
    wall time (an IANA name: ``"Europe/Berlin"``; daylight saving as :meth:`Trigger.ticks`
    says)."""
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
    return Trigger("cron", CronTick, expression, timezone)
