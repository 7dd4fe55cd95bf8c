"""What starts a workflow run: an event, a cron schedule, or a manual call."""

from __future__ import annotations

from datetime import datetime
from typing import Generic, Literal, TypeVar

import attrs

__all__ = ["CronTick", "Trigger", "cron", "manual", "on_event"]

P = TypeVar("P")
E = TypeVar("E")


@attrs.frozen
class CronTick:
    """The payload of a cron-triggered run: the tick's nominal time."""

    scheduled_at: datetime


@attrs.frozen
class Trigger(Generic[P]):
    """How a workflow starts; ``payload_type`` is what its pipeline receives."""

    kind: Literal["event", "cron", "manual"]
    payload_type: type[P]
    cron: str | None = None


def on_event(event: type[E]) -> Trigger[E]:
    """Start one run per appended ``event`` (at most one per workflow and event id)."""
    return Trigger("event", event)


def manual(payload: type[P]) -> Trigger[P]:
    """Start runs explicitly with ``app.start_workflow(workflow, payload, user=...)``."""
    return Trigger("manual", payload)


def cron(expression: str) -> Trigger[CronTick]:
    """Start one run per tick of a five-field cron ``expression`` (UTC)."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"cron expression {expression!r} must have five fields (minute hour day month weekday)")
    return Trigger("cron", CronTick, expression)
