"""``app.run_worker()`` in a thread of the test, keeping what it raised: how the worker
tests watch a worker go on through a fault, or stop with an error."""

from __future__ import annotations

import threading

from kumiko_typed import App

__all__ = ["Worker"]


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
