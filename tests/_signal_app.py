"""An app for ``kumiko-typed worker _signal_app:make_app`` (tests/outbox/test_worker_signals.py)
whose process sends itself SIGTERM from inside its connection pool, in the main thread, so
that the CLI's handler runs there while the pool is in the middle of a checkout.

``KUMIKO_TEST_SIGNAL`` says when:

* ``first-connect``: during the engine's first connection, which the main thread makes
  (another thread's first connection waits until the main thread's is under way).
  SQLAlchemy runs the connect listeners of an engine's first connection under a lock of
  the pool's: a handler that needs a new pool connection then waits for itself.
* ``checkout:N``: during the main thread's Nth checkout from the pool.

The feature queues one webhook per ``hook`` dispatch (the test's receiver).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import sqlalchemy as sa
from _support import Hook

from kumiko_typed import App, Feature, ok

feature = Feature("signals", requires=["webhook.send"])
hook = feature.write_handler(
    "hook",
    feature.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, body=lambda c: {}).return_(lambda c: ok(None)),
)


def make_app(database_url: str) -> App:
    app = App([feature], database_url=database_url)
    when = os.environ.get("KUMIKO_TEST_SIGNAL", "")
    if when == "first-connect":
        _signal_at_first_connect(app.engine)
    elif when.startswith("checkout:"):
        _signal_at_checkout(app.engine, int(when.removeprefix("checkout:")))
    return app


def _in_main() -> bool:
    return threading.current_thread() is threading.main_thread()


def _terminate() -> None:
    print(f"sending SIGTERM in {threading.current_thread().name}", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # its handler runs now, in this (the main) thread


def _signal_at_first_connect(engine: sa.Engine) -> None:
    main_connecting = threading.Event()
    sent: list[bool] = []

    @sa.event.listens_for(engine, "do_connect")
    def wait_for_main(*_: Any) -> None:
        if not _in_main():
            main_connecting.wait(30)

    @sa.event.listens_for(engine, "connect")
    def terminate(*_: Any) -> None:
        if _in_main() and not sent:
            sent.append(True)
            main_connecting.set()
            _terminate()


def _signal_at_checkout(engine: sa.Engine, n: int) -> None:
    seen: list[bool] = []

    @sa.event.listens_for(engine, "checkout")
    def terminate(*_: Any) -> None:
        if _in_main():
            seen.append(True)
            if len(seen) == n:
                _terminate()
