"""A slow webhook does not hold up the event feed, on SQLite and PostgreSQL.

The feed reads an event on PostgreSQL only once every transaction older than the event's
has ended (docs/operations.md, "Event order without a global lock"), so an outbox
delivery must not keep a transaction open while it waits on its peer: here a real HTTP
receiver on 127.0.0.1 hangs on a webhook while another worker's pass wakes a
``wait_for_event`` run with an event committed meanwhile."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import attrs
import httpx
from _receiver import Receiver
from _support import Hook
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@attrs.frozen
class Await:
    ref: uuid.UUID


@attrs.frozen
class Arrived:
    ref: uuid.UUID


class FsParcel(Entity):
    __tablename__ = "fs_parcel"
    ref: Mapped[uuid.UUID]


f = Feature("fs", requires=["webhook.send"])
f.entity(FsParcel)
f.event(Arrived)
hook = f.write_handler(
    "hook",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}).return_(lambda c: ok(None)),
)
announce = f.write_handler(
    "announce",
    f.pipeline(Await)
    .create("parcel", FsParcel, data=lambda c: FsParcel(ref=c.payload.ref))
    .append_event(FsParcel, id=lambda c: c.steps["parcel"].id, event=lambda c: Arrived(c.payload.ref))
    .return_(lambda c: ok(None)),
)
waiter = f.workflow(
    "waiter",
    trigger=manual(Await),
    pipeline=f.workflow_pipeline(Await).wait_for_event(
        "got", Arrived, key=lambda c: c.payload.ref, event_key=lambda e: e.ref, timeout="PT1H"
    ),
)


def test_a_worker_wakes_a_wait_while_another_worker_waits_on_a_slow_webhook(
    app_on: Callable[..., App], receiver: Receiver, user: User
) -> None:
    entered, release = threading.Event(), threading.Event()

    def respond(_index: int, _path: str) -> tuple[int, dict[str, str]]:
        entered.set()
        release.wait(60)
        return 200, {}

    receiver.respond = respond
    clock = FakeClock(T0)
    # The slow worker's client outwaits the receiver: the delivery hangs until released.
    slow = app_on([f], clock=clock, http=httpx.Client(timeout=90))
    other = app_on([f], clock=clock)
    ref = uuid.uuid4()
    run_id = slow.start_workflow(waiter, Await(ref), user=user)
    assert other.run_worker(once=True)["resumed"] == 0  # the wait is stored and armed
    assert slow.dispatch(hook, Hook(receiver.url()), user=user) == ok(None)
    counts: dict[str, int] = {}
    delivering = threading.Thread(target=lambda: counts.update(slow.run_worker(once=True)), daemon=True)
    try:
        delivering.start()
        assert entered.wait(30), "the slow worker never reached the receiver"

        assert other.dispatch(announce, Await(ref), user=user) == Ok(None)
        woken = other.run_worker(once=True)

        assert not release.is_set() and delivering.is_alive()  # the webhook still hangs
        info = other.get_run(run_id)
        assert info is not None
        assert (woken["resumed"], info.status) == (1, "completed")
        assert info.steps["got"] == Arrived(ref)
        assert woken["sent"] == 0  # the row in flight is the slow worker's alone
    finally:
        release.set()
        delivering.join(60)
    assert counts["sent"] == 1
    assert [i.status for i in other.outbox()] == ["sent"]
    assert len(receiver.requests) == 1
