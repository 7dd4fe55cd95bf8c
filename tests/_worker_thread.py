"""``app.run_worker()`` in a thread of the test, keeping what it raised: how the worker
tests watch a worker go on through a fault, or stop with an error."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from kumiko_typed import App

__all__ = ["Passes", "Worker"]

#: Bounds a hang only.
BOUND = 30


class Passes:
    """The passes of the looping workers of a test, as logged (``caplog`` at DEBUG from
    here on: an idle pass is logged at DEBUG); the ``worker_passes`` fixture, taken before
    the workers start."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog
        caplog.set_level(logging.DEBUG, logger="kumiko_typed")

    def await_first(self, *threads: threading.Thread) -> None:
        """Until each side (its workflows, its deliveries) of the looping worker in each of
        ``threads`` got through a pass.  A side that did outlives an outage that comes
        next, where one whose first pass meets it stops the worker as for a wrong URL; and
        it is in its idle wait, or soon is.  A fixed sleep let a loaded machine bring the
        outage, or the test's next step, first."""
        deadline = time.monotonic() + BOUND
        while len(self._sides()) < 2 * len(threads):
            assert all(t.is_alive() for t in threads), "a worker stopped before each of its sides got through once"
            assert time.monotonic() < deadline, f"not within {BOUND} s: a pass of each side of each worker"
            time.sleep(0.02)

    def _sides(self) -> set[int]:
        return {r.thread for r in self.caplog.records if r.getMessage().startswith("worker pass:") and r.thread}


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
