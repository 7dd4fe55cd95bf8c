"""LISTEN/NOTIFY: an idle PostgreSQL worker wakes when a dispatch commits, not at its poll."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from _support import Hook

from kumiko_typed import App, Feature, User, ok

pytestmark = pytest.mark.postgres


def test_an_idle_worker_wakes_on_commit_and_on_stop(fresh_postgres_url: str) -> None:
    feature = Feature("notify", requires=["webhook.send"])
    handler = feature.write_handler(
        "hook", feature.pipeline(Hook).send_webhook(url=lambda c: c.payload.url).return_(lambda c: ok(1))
    )
    app = App([feature], database_url=fresh_postgres_url)
    app.create_all()
    worker = App([feature], database_url=fresh_postgres_url)
    counts: dict[str, int] = {}
    thread = threading.Thread(target=lambda: counts.update(worker.run_worker(poll_interval=60)))
    thread.start()
    try:
        time.sleep(1.0)  # the worker finds nothing and waits (up to 60 s)
        started = time.monotonic()
        # ftp:// is refused at delivery without a network call: the row goes dead at once.
        app.dispatch(handler, Hook("ftp://example.invalid/x"), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4()))
        while app.outbox()[0].status == "pending" and time.monotonic() - started < 30:
            time.sleep(0.05)
        assert app.outbox()[0].status == "dead"
        assert time.monotonic() - started < 10  # far below the 60 s poll
    finally:
        stopping = time.monotonic()
        worker.stop_worker()
        thread.join(90)
    assert not thread.is_alive()
    assert time.monotonic() - stopping < 10
    assert counts["dead"] == 1
    app.dispose()
    worker.dispose()
