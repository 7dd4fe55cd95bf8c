"""``app.run_worker()`` in a thread of the test, keeping what it raised: how the worker
tests watch a worker go on through a fault, or stop with an error."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from kumiko_typed import App

__all__ = ["Worker", "await_first_passes"]

#: Bounds a hang only.
BOUND = 30


def await_first_passes(caplog: pytest.LogCaptureFixture, thread: threading.Thread) -> None:
    """Until each side of the looping worker in ``thread`` (its workflows, its deliveries)
    logged a pass: it has got through once, so it outlives an outage that comes next,
    where a side whose first pass meets one stops the worker as for a wrong URL.  A fixed
    sleep let a loaded machine bring the outage on first.  Sets ``caplog`` to DEBUG
    (an idle pass is logged at DEBUG)."""
    caplog.set_level(logging.DEBUG, logger="kumiko_typed")
    deadline = time.monotonic() + BOUND
    while len({r.threadName for r in caplog.records if r.getMessage().startswith("worker pass:")}) < 2:
        assert thread.is_alive(), "the worker stopped before each side got through once"
        assert time.monotonic() < deadline, f"not within {BOUND} s: a pass of each side of the worker"
        time.sleep(0.02)


class Worker:
    """``app.run_worker()`` in a thread, keeping what it raised."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.raised: list[BaseException] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            self.app.run_worker(poll_interval=0.05)
        except BaseException as exc:
            self.raised.append(exc)

    def stop(self) -> None:
        self.app.stop_worker()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
