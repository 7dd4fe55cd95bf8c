"""A worker process for tests/workflows/test_port_hotel.py.

    python tests/_hotel_worker.py DATABASE_URL once|crash N

``once`` runs worker passes until one does nothing and prints their counts as JSON.
``crash`` runs passes that die (``os._exit(137)``, no clean-up, the transaction open)
right after the database accepted the N-th ``guest-checked-out`` event of the process.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import sqlalchemy as sa

from examples.ports.hotel import VALUE_TYPES, hotel
from kumiko_typed import App
from kumiko_typed.testing import MemoryMail


def main(url: str, mode: str, after: str = "0") -> None:
    app = App([hotel], database_url=url, value_types=VALUE_TYPES, mail=MemoryMail())
    if mode == "crash":
        seen = [0]

        @sa.event.listens_for(app.engine, "after_cursor_execute")
        def die(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
            if "kumiko_events" in statement and "guest-checked-out" in repr(parameters):
                seen[0] += 1
                if seen[0] >= int(after):
                    os._exit(137)

    passes = []
    while True:
        counts = app.run_worker(once=True)
        passes.append(counts)
        if not any(counts.values()):
            break
    print(json.dumps(passes), flush=True)
    app.dispose()


if __name__ == "__main__":
    main(*sys.argv[1:4])
