"""The chaos probe's application (tests/workflows/test_chaos_workers.py): a mixed workload
whose every worker process may be SIGKILLed at any instant.

Every process imports this file as ``_chaos_app`` (stored payloads name their class by
module).  A worker is started as :data:`WORKER_BOOT` with the tests folder, the database
URL and the clock's origin; it prints ``ready`` and loops ``app.run_worker()`` until its
stdin closes.  The webhook receiver's URL comes from ``CHAOS_HOOK`` (read when a step runs).

The clock runs :data:`SPEED` times faster than the wall clock from a shared origin, the
same in every process: the outbox's five-minute claim lease then runs out in 15 seconds, so
what a killed worker had claimed is delivered again within the test, and a per-minute cron
ticks every 3 seconds.

The workload:

* ``chaos:place`` creates an :class:`Order` (event :class:`Placed`) and queues a webhook;
  ``chaos:confirm`` appends :class:`Confirmed` to the order's stream.
* ``chaos:order`` (``on_event(Placed)``): waits for the order's ``Confirmed``, waits a few
  seconds, sends a webhook, runs a retry whose first attempt fails, returns ``n * 10 + 1``.
* ``chaos:job`` (``manual(Job)``, started with keys): waits, sends a webhook, runs the flaky
  retry, returns ``n * 100``.
* ``chaos:tick`` (``cron("* * * * *")``): sends a webhook, returns the tick's time.

Each step that must commit once records a row in :data:`effects` through ``c.db`` (no
unique constraint): a committed effect that appeared twice shows as two rows.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, CronTick, Entity, Feature, RetryPolicy, User, cron, manual, ok, on_event

#: ``python -c WORKER_BOOT TESTS_DIR URL ORIGIN`` runs :func:`worker_main`.
WORKER_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); import _chaos_app as m; m.worker_main(sys.argv[2:])"
#: How much faster than the wall clock the App's clock runs.
SPEED = 20.0
USER = User(id=uuid.UUID(int=11), tenant_id=uuid.UUID(int=12), roles=frozenset())
#: Delivery retries: a cut connection fails an attempt; many quick retries, never dead.
DELIVERY = RetryPolicy(times=20, base_delay=timedelta(seconds=2))

fixture_metadata = sa.MetaData()
effects = sa.Table(
    "chaos_effects",
    fixture_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Uuid, nullable=False),
    sa.Column("step", sa.String(40), nullable=False),
)


def clock_from(origin: float) -> Any:
    """The App's clock: ``SPEED`` times the wall clock's pace since ``origin`` (epoch s)."""

    def now() -> datetime:
        return datetime.fromtimestamp(origin + (time.time() - origin) * SPEED, UTC)

    return now


class Order(Entity):
    __tablename__ = "chaos_order"
    n: Mapped[int]


@attrs.frozen
class Placed:
    order_id: uuid.UUID
    n: int


@attrs.frozen
class Confirmed:
    order_id: uuid.UUID
    n: int


@attrs.frozen
class Place:
    n: int


@attrs.frozen
class Confirm:
    order_id: uuid.UUID
    n: int


@attrs.frozen
class Job:
    n: int


def hook() -> str:
    return os.environ["CHAOS_HOOK"]


def _effect(step: str) -> Any:
    def write(c: Any) -> str:
        c.db.execute(sa.insert(effects).values(run_id=c.workflow.run_id, step=step))
        return step

    return write


def _flaky(c: Any) -> str:
    """Fails the retry's first attempt (rolled back), passes the second."""
    path = c.workflow.path or ""
    if not path.endswith("/#2"):
        raise RuntimeError("first attempt fails")
    return path


feature = Feature("chaos", requires=["webhook.send"])
feature.entity(Order)
feature.event(Placed, name="chaos-placed")
feature.event(Confirmed, name="chaos-confirmed")

place = feature.write_handler(
    "chaos:place",
    feature.pipeline(Place)
    .create("order", Order, data=lambda c: Order(n=c.payload.n))
    .append_event(Order, id=lambda c: c.steps["order"].id, event=lambda c: Placed(c.steps["order"].id, c.payload.n))
    .send_webhook(url=lambda c: hook(), body=lambda c: {"kind": "order", "n": c.payload.n}, retry=DELIVERY)
    .return_(lambda c: ok(c.steps["order"].id)),
)

confirm = feature.write_handler(
    "chaos:confirm",
    feature.pipeline(Confirm)
    .append_event(Order, id=lambda c: c.payload.order_id, event=lambda c: Confirmed(c.payload.order_id, c.payload.n))
    .return_(lambda c: ok(c.payload.n)),
)

order_flow = feature.workflow(
    "order",
    trigger=on_event(Placed),
    pipeline=feature.workflow_pipeline(Placed)
    .compute("start", _effect("start"))
    .wait_for_event(
        "confirmed", Confirmed, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout=timedelta(days=1)
    )
    .wait(lambda c: c.now + timedelta(seconds=5 + c.payload.n % 10))
    .compute("after_wait", _effect("after_wait"))
    .send_webhook(url=lambda c: hook(), body=lambda c: {"kind": "placed", "n": c.payload.n}, retry=DELIVERY)
    .retry(times=3, base_delay=timedelta(seconds=2), do=lambda b: b.compute("attempt", _flaky))
    .compute("done", _effect("done"))
    .return_(lambda c: ok(c.payload.n * 10 + (c.steps["confirmed"] is not None))),
)

job = feature.workflow(
    "job",
    trigger=manual(Job),
    pipeline=feature.workflow_pipeline(Job)
    .compute("start", _effect("start"))
    .wait(lambda c: c.now + timedelta(seconds=3 + c.payload.n % 7))
    .compute("after_wait", _effect("after_wait"))
    .send_webhook(url=lambda c: hook(), body=lambda c: {"kind": "job", "n": c.payload.n}, retry=DELIVERY)
    .retry(times=3, base_delay=timedelta(seconds=2), do=lambda b: b.compute("attempt", _flaky))
    .compute("done", _effect("done"))
    .return_(lambda c: ok(c.payload.n * 100)),
)

tick = feature.workflow(
    "tick",
    trigger=cron("* * * * *"),
    pipeline=feature.workflow_pipeline(CronTick)
    .compute("start", _effect("start"))
    .send_webhook(
        url=lambda c: hook(),
        body=lambda c: {"kind": "tick", "at": c.payload.scheduled_at.isoformat()},
        retry=DELIVERY,
    )
    .return_(lambda c: ok(c.payload.scheduled_at.isoformat())),
)


def make_app(url: str, origin: float) -> App:
    return App([feature], database_url=url, clock=clock_from(origin), webhook_timeout=timedelta(seconds=5))


def create_tables(app: App) -> None:
    app.create_all()
    fixture_metadata.create_all(app.engine)


def worker_main(args: list[str]) -> None:
    """Loop a worker until stdin closes (a clean stop), printing ``ready`` once connected."""
    url, origin = args[0], float(args[1])
    app = make_app(url, origin)

    def stop_at_eof() -> None:
        sys.stdin.read()
        app.stop_worker()

    with app.engine.connect():
        pass
    threading.Thread(target=stop_at_eof, daemon=True).start()
    print("ready", flush=True)
    app.run_worker(poll_interval=0.1)
    app.dispose()
