"""Two ``app.run_worker()`` loops of one App at once (threads of one process, as a user
runs two workers without a second process): ``app.stop_worker()`` stops both.  Before,
the stop rang only the sleep of the loop started last, and that loop, returning, cleared
the stop for the other, which went on polling for ever."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import attrs
from _worker_thread import Passes

from kumiko_typed import App, Feature, User, manual

USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


@attrs.frozen
class Nap:
    seconds: int


naps = Feature("loops")
nap = naps.workflow("nap", trigger=manual(Nap), pipeline=naps.workflow_pipeline(Nap).wait(lambda c: c.now))


def test_one_stop_ends_every_loop_of_the_app(app_on: Callable[..., App], worker_passes: Passes) -> None:
    app = app_on([naps])
    run_id = app.start_workflow(nap, Nap(0), user=USER)
    raised: list[BaseException] = []

    def loop() -> None:
        try:
            app.run_worker(poll_interval=60)  # idle, each sleeps until a bell rings
        except BaseException as exc:
            raised.append(exc)

    loops = [threading.Thread(target=loop, daemon=True) for _ in range(2)]
    for thread in loops:
        thread.start()
    deadline = time.monotonic() + 30
    while (run := app.get_run(run_id)) is not None and run.status != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
    worker_passes.await_first(*loops)  # both loops run (a loop not yet begun would miss the stop)
    app.stop_worker()
    for thread in loops:
        thread.join(60)
    assert [thread.is_alive() for thread in loops] == [False, False]
    assert raised == []
    assert run is not None and run.status == "completed"
    # The stop was used up by the loops it stopped: the next loop runs until its own stop.
    again = threading.Thread(target=loop, daemon=True)
    again.start()
    time.sleep(0.5)
    assert again.is_alive()
    app.stop_worker()
    again.join(60)
    assert not again.is_alive()
