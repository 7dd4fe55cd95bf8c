"""A looping worker asked to stop does not first work through a whole backlog: the
workflow side asks between its transactions (docs/operations.md, "Two sides"), and what
is left stays due for the next pass.  Both databases."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
from _worker_thread import Passes

from kumiko_typed import App, Feature, User, manual
from kumiko_typed._workflow_engine import BATCH
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@attrs.frozen
class Begin:
    n: int


def test_a_stop_asked_by_a_resumed_run_ends_the_loop_after_that_batch(app_on: Callable[..., App], user: User) -> None:
    clock = FakeClock(T0)
    apps: list[App] = []
    f: Feature[Any] = Feature("backlog")
    flow = f.workflow(
        "nap",
        trigger=manual(Begin),
        pipeline=f.workflow_pipeline(Begin)
        .wait("PT1M")
        .compute("stopped", lambda c: apps[0].stop_worker() is None),  # as a SIGTERM would, mid-pass
    )
    app = app_on([f], clock=clock)
    apps.append(app)
    runs = [app.start_workflow(flow, Begin(n), user=user) for n in range(3 * BATCH + 5)]
    clock.advance(minutes=2)

    counts = app.run_worker(poll_interval=0.05)  # returns once stopped

    statuses = [info.status for info in map(app.get_run, runs) if info is not None]
    assert counts["resumed"] == statuses.count("completed") == BATCH  # the batch under way, no more
    assert statuses.count("suspended") == 2 * BATCH + 5
    assert app.run_worker(once=True)["resumed"] == 2 * BATCH + 5  # left due, not lost


def test_an_idle_worker_with_a_poll_interval_of_a_month_waits_and_stops(
    app_on: Callable[..., App], worker_passes: Passes
) -> None:
    """A poll interval past epoll's limit (2**31 - 1 ms, 24.8 days) is still a positive
    number of seconds: both sides raised OverflowError at their first idle wait, and
    ``kumiko-typed worker --poll-interval 3000000`` printed its traceback."""
    app = app_on([Feature("idle")])
    outcome: list[object] = []

    def work() -> None:
        try:
            outcome.append(app.run_worker(poll_interval=30 * 86400.0))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    worker_passes.await_first(thread)  # both sides passed, each on to its idle wait
    assert outcome == []
    app.stop_worker()
    thread.join(30)
    assert not thread.is_alive()
    assert outcome == [{"started": 0, "resumed": 0, "sent": 0, "retried": 0, "dead": 0}]
