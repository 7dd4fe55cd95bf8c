"""What the ports' worker processes (tests/_hotel_worker.py, _tickets_worker.py,
_library_worker.py) share: dying right after the database accepted an event, as a
killed worker does, and draining the due work."""

from __future__ import annotations

import json
import os
from typing import Any

import sqlalchemy as sa

from kumiko_typed import App


def die_after_event(app: App, event_type: str, count: int = 1) -> None:
    """End the process (``os._exit(137)``: no clean-up, the transaction open) right after
    the database accepted the ``count``-th ``event_type`` event this process appends."""
    seen = [0]

    @sa.event.listens_for(app.engine, "after_cursor_execute")
    def die(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if "kumiko_events" in statement and event_type in repr(parameters):
            seen[0] += 1
            if seen[0] >= count:
                os._exit(137)


def drain(app: App) -> None:
    """Worker passes until one does nothing; their counts printed as JSON."""
    passes = []
    while True:
        counts = app.run_worker(once=True)
        passes.append(counts)
        if not any(counts.values()):
            break
    print(json.dumps(passes), flush=True)
    app.dispose()
