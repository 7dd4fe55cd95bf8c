"""The outbox on a database out of disk: a webhook step's row is not inserted (the
dispatch is ``unavailable`` and writes nothing, on both databases); and a worker whose
delivery went out but whose record of it (the row marked sent, or its retry scheduled)
the full database refused records it at its next pass, once there is space, instead of
sending the message again when the claim's lease runs out (PostgreSQL: a trigger raising
53100 on the outbox table, fired only after the receiver got the request)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from _exhaustion import Full
from _receiver import Receiver
from _support import Hook, failure_of, hook_feature
from _worker_thread import Worker

from kumiko_typed import App, User
from kumiko_typed._outbox import CLAIM_LEASE
from kumiko_typed._outbox_types import RetryPolicy

AppOn = Callable[..., App]
USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def test_a_webhook_step_on_a_full_database_is_unavailable_and_inserts_no_row(app_on: AppOn, receiver: Receiver) -> None:
    f, hook = hook_feature("rxo")
    app = app_on([f])
    full = Full(app, tables=("kumiko_outbox",))
    full.on()
    # Longer than a SQLite page: the row needs pages a full file has not.
    failure = failure_of(app.dispatch(hook, Hook(receiver.url("/" + "p" * 20_000)), user=USER), "unavailable")
    assert "out of disk, memory or connections" in failure.message
    assert app.outbox() == []
    full.off()
    assert app.dispatch(hook, Hook(receiver.url()), user=USER).data is None  # type: ignore[union-attr]
    assert [item.status for item in app.outbox()] == ["pending"]


@pytest.mark.postgres
@pytest.mark.parametrize(("status", "recorded"), [(200, "sent"), (503, "dead")])
def test_a_delivery_whose_record_the_full_database_refused_is_recorded_later_not_sent_again(
    fresh_postgres_url: str, receiver: Receiver, status: int, recorded: str
) -> None:
    f, hook = hook_feature("rxo", RetryPolicy(times=1))  # a failed attempt: dead, not due again
    ahead = [timedelta(0)]
    app = App([f], database_url=fresh_postgres_url, clock=lambda: datetime.now(UTC) + ahead[0])
    app.create_all()
    full = Full(app, tables=("kumiko_outbox",))

    def answer(index: int, _path: str) -> tuple[int, dict[str, str]]:
        if index == 0:
            full.on()  # the request came: the worker's record of it meets a full database
        return status, {}

    receiver.respond = answer
    assert app.dispatch(hook, Hook(receiver.url()), user=USER).data is None  # type: ignore[union-attr]
    worker = Worker(app)
    try:
        deadline = time.monotonic() + 30
        while not receiver.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # passes on the full database
        assert worker.thread.is_alive(), worker.raised
        [item] = app.outbox()
        assert (item.status, item.attempts) == ("pending", 0)  # not recorded yet
        full.off()
        deadline = time.monotonic() + 30
        while app.outbox()[0].attempts == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        ahead[0] = CLAIM_LEASE + timedelta(seconds=1)  # a lease not recorded would run out now
        time.sleep(0.5)
    finally:
        worker.stop()
        app.dispose()
    assert worker.raised == []
    [item] = app.outbox()
    assert (item.status, item.attempts) == (recorded, 1)
    assert len(receiver.requests) == 1  # once: recorded, not sent again when the lease ran out
