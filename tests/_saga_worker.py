"""A worker process for tests/workflows/test_port_order_saga.py.

    python tests/_saga_worker.py DATABASE_URL once|crash|loop

``once`` runs one worker pass and prints its counts as JSON.  ``crash`` runs a pass that
dies (``os._exit(137)``, no clean-up, its transaction open) right after the database
accepted the saga's ``stock-reserved`` event.  ``loop`` runs the worker until its stdin
is closed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

import sqlalchemy as sa

from examples.ports.order_saga import shop
from kumiko_typed import App


def main(url: str, mode: str) -> None:
    app = App([shop], database_url=url)
    if mode == "crash":

        @sa.event.listens_for(app.engine, "after_cursor_execute")
        def die(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
            if "kumiko_events" in statement and "stock-reserved" in repr(parameters):
                os._exit(137)

    if mode == "loop":

        def stop_at_eof() -> None:
            sys.stdin.read()
            app.stop_worker()

        threading.Thread(target=stop_at_eof, daemon=True).start()
        print("ready", flush=True)
        app.run_worker(poll_interval=0.2)
    else:
        print(json.dumps(app.run_worker(once=True)), flush=True)
    app.dispose()


if __name__ == "__main__":
    main(*sys.argv[1:3])
