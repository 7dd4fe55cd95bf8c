"""The view an event-started run waits from in its first segment: its trigger's place.

A run that an event starts is started by a worker's feed, which may read the event long
after it committed (a deploy, an outage, a backlog).  A ``wait_for_event`` notes what its
transaction has seen (:func:`~kumiko_typed._eventstore.frontier`) and matches only later
events, so in a run started late an event committed between the trigger and the feed's
read counted as seen: an order paid a second after it was placed, while the workers were
down, started a saga that waited for the payment already made, and timed out.

In its first segment such a run waits from its trigger's place in the event order
instead, ``(tx, position)``, the order the feed reads in: every event after the trigger
matches, as if the run had started when the trigger committed.  No event committed later
can come before it in that order (the feed reads an event only once every transaction
that began before its writer has ended), so nothing the segment's own view would match
is lost.  A run that appended an event of the awaited type itself before its wait keeps
the segment's view: from the trigger's place, the run would be handed its own event.
"""

from __future__ import annotations

import uuid
from typing import Final

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from ._eventstore import Frontier
from ._tables import events, workflow_runs

__all__ = ["EVENT_TRIGGER", "trigger_view"]

#: How a run an event started names its trigger (``workflow_runs.trigger_key``).
EVENT_TRIGGER: Final = "event:"

_TRIGGER_OF: Final = select(workflow_runs.c.trigger_key).where(workflow_runs.c.run_id == bindparam("run_id"))
_PLACE_OF: Final = select(events.c.tx, events.c.position).where(events.c.event_id == bindparam("event_id"))
# A segment's events carry its run's id as their correlation id; the (type, position)
# index finds the few of the awaited type appended since the trigger.
_OWN_SINCE: Final = (
    select(events.c.position)
    .where(
        events.c.type == bindparam("type"),
        events.c.position > bindparam("position"),
        events.c.correlation_id == bindparam("run_id"),
    )
    .limit(1)
)


def trigger_view(session: Session, run_id: uuid.UUID, awaited_type: str) -> Frontier | None:
    """The view a wait for ``awaited_type`` of run ``run_id``, in its first segment,
    waits from: its trigger event's place; ``None`` (the segment's own view) for a run
    no event started, or one that appended an event of that type itself."""
    key = session.execute(_TRIGGER_OF, {"run_id": run_id}).scalar()
    if not isinstance(key, str) or not key.startswith(EVENT_TRIGGER):
        return None  # a manual start or a cron tick: its caller or clock is its start
    try:
        event_id = uuid.UUID(key.removeprefix(EVENT_TRIGGER))
    except ValueError:
        return None
    place = session.execute(_PLACE_OF, {"event_id": event_id}).first()
    if place is None:
        return None
    own = {"type": awaited_type, "position": place.position, "run_id": run_id}
    if session.execute(_OWN_SINCE, own).first() is not None:
        return None
    if session.get_bind().dialect.name != "postgresql":
        return Frontier(0, place.position, 0)  # SQLite: one writer at a time, positions in commit order
    # Every transaction up to the trigger's counts as seen, later ones as not (a snapshot
    # "xmin:xmax:" with none running), and of the trigger's own, what came after it.
    after = place.tx + 1
    return Frontier(place.tx, place.position, -1, f"{after}:{after}:")
