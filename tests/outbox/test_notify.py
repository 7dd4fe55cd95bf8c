"""LISTEN/NOTIFY: an idle PostgreSQL worker wakes when a dispatch commits, not at its poll."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from _receiver import Receiver
from _support import Hook
from _worker_thread import Passes

from kumiko_typed import App, Feature, RetryPolicy, User, ok

pytestmark = pytest.mark.postgres


def test_an_idle_worker_wakes_on_commit_and_on_stop(
    fresh_postgres_url: str, receiver: Receiver, worker_passes: Passes
) -> None:
    receiver.respond = lambda _i, _p: (500, {})
    feature = Feature("notify", requires=["webhook.send"])
    handler = feature.write_handler(
        "hook",
        feature.pipeline(Hook)
        .send_webhook(url=lambda c: c.payload.url, retry=RetryPolicy(times=1))
        .return_(lambda c: ok(1)),
    )
    app = App([feature], database_url=fresh_postgres_url)
    app.create_all()
    worker = App([feature], database_url=fresh_postgres_url)
    counts: dict[str, int] = {}
    thread = threading.Thread(target=lambda: counts.update(worker.run_worker(poll_interval=60)))
    thread.start()
    try:
        worker_passes.await_first(thread)  # each side found nothing and waits (up to 60 s)
        started = time.monotonic()
        # One try, answered 500: the row goes dead at its first attempt.
        app.dispatch(handler, Hook(receiver.url()), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4()))
        while app.outbox()[0].status == "pending" and time.monotonic() - started < 30:
            time.sleep(0.05)
        assert app.outbox()[0].status == "dead"
        assert time.monotonic() - started < 30  # far below the 60 s poll
    finally:
        stopping = time.monotonic()
        worker.stop_worker()
        thread.join(90)
    assert not thread.is_alive()
    assert time.monotonic() - stopping < 30  # far below the 60 s poll
    assert counts["dead"] == 1 and len(receiver.requests) == 1
    app.dispose()
    worker.dispose()
