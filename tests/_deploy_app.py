"""Deploy fixture: the versions of the workflows that tests/test_workflow_deploys.py
deploys one after another over one database, and the worker those tests run in ANOTHER
process (each process imports this file as ``_deploy_app``, so stored payloads name
their class the same way)::

    python -c WORKER_BOOT TESTS_DIR URL VERSION NOW_ISO SECONDS

builds the App of ``VERSION`` on ``URL`` with its clock fixed at ``NOW_ISO``, runs worker
passes for ``SECONDS`` and then until one finds nothing to do (one pass if 0) and prints
``{"resumed": N, "errors": N}``.

Versions (``v1`` is what the runs start under; every other one is a later deploy):

* ``code``: the resolver after the wait changed (results say ``v2:...``);
* ``insert``: a keyless ``guard`` inserted before the wait (and before the ``vip`` branch);
* ``append``: a step appended at the end; ``branch``: a branch added after the wait;
* ``renamed``: the wait ``cool-off`` renamed ``pause``; ``across``: the same with
  ``renamed={"cool-off": "pause"}``;
* ``needs``: a key ``price`` computed before the wait; ``fill``: the same with a ``fill``
  function for it;
* ``gone``: no workflow registered (the ``emit`` handler and its event stay);
* ``retyped``: as ``v1``, but ``Signal.note`` is an ``int`` now (without a new schema
  version): a stored ``Signal`` no longer loads;
* ``n-text``: as ``v1``, but ``Order.n`` is text now (``TEXT_ORDER``, under the same
  name): a stored ``Order`` of either release does not rebuild under the other;
* ``first-removed``: the first of the ``twice`` workflow's two unnamed waits removed;
* ``retry-as-wait``: the ``retrier`` workflow's retry ``again`` replaced by a wait of
  that name.

The ``signal`` workflow waits for a ``Signal`` event (appended by the ``emit`` handler)
in ``got``, named ``heard`` in ``renamed`` and ``across`` (which maps it, too).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, User, fail, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
USER = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=11))
OTHER = User(id=uuid.UUID(int=2), tenant_id=uuid.UUID(int=22))  # another tenant
WORKER_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); import _deploy_app as m; sys.exit(m.worker_main(sys.argv[2:]))"
)
VERSIONS = (
    *("v1", "code", "insert", "append", "branch", "renamed", "across", "needs", "fill", "gone", "retyped"),
    *("n-text", "first-removed", "retry-as-wait"),
)


@attrs.frozen
class Order:
    n: int
    items: list[int] = attrs.field(factory=list)


@attrs.frozen
class Signal:
    n: int
    note: str


def _retyped_signal() -> type[Any]:
    """``Signal`` after a deploy changed the type of ``note``, under the same name."""
    cls = attrs.make_class("Signal", {"n": attrs.field(type=int), "note": attrs.field(type=int)}, frozen=True)
    cls.__module__ = __name__
    cls.__qualname__ = "Signal"
    return cls


RETYPED_SIGNAL = _retyped_signal()


def _text_order() -> type[Any]:
    """``Order`` after a deploy made ``n`` text, under the same name."""
    fields = {"n": attrs.field(type=str), "items": attrs.field(type=list[int], factory=list)}
    cls = attrs.make_class("Order", fields, frozen=True)
    cls.__module__ = __name__
    cls.__qualname__ = "Order"
    return cls


TEXT_ORDER = _text_order()


class DepBeacon(Entity):
    """The aggregate the ``emit`` handler appends a ``Signal`` to."""

    __tablename__ = "dep_beacon"
    note: Mapped[str]


def feature(version: str) -> Feature[Any]:
    """The workflows as deployed in ``version``."""
    assert version in VERSIONS, version
    tag = "v1" if version == "v1" else "v2"
    signal_cls = RETYPED_SIGNAL if version == "retyped" else Signal
    order: Any = TEXT_ORDER if version == "n-text" else Order
    f: Feature[Any] = Feature("dep")
    f.entity(DepBeacon)
    f.event(signal_cls)
    f.write_handler(
        "emit",
        f.pipeline(signal_cls)
        .create("beacon", DepBeacon, data=lambda c: DepBeacon(note=c.payload.note))
        .append_event(DepBeacon, id=lambda c: c.steps["beacon"].id, event=lambda c: c.payload)
        .return_(lambda c: ok(None)),
    )
    if version == "gone":
        return f  # every workflow removed; the event and the handler appending it stay
    heard = "heard" if version in ("renamed", "across") else "got"
    signal: Any = f.workflow_pipeline(order).wait_for_event(
        heard, signal_cls, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout="PT2H"
    )
    f.workflow(
        "signal",
        trigger=manual(order),
        pipeline=signal.return_(lambda c: ok(f"{tag}:{c.steps[heard].note if c.steps[heard] else 'timed out'}")),
        renamed={"got": "heard"} if version == "across" else None,
    )
    p: Any = f.workflow_pipeline(order).compute("quote", lambda c: c.payload.n * 10)
    if version == "insert":
        p = p.guard(lambda c: True, otherwise=lambda c: fail("unprocessable", "never"))
    if version in ("needs", "fill"):
        p = p.compute("price", lambda c: c.steps["quote"] + 1)
    p = p.wait("PT1H", name="pause" if version in ("renamed", "across") else "cool-off")
    p = p.compute("after", lambda c: f"{tag}:{c.steps['quote']}")
    if version == "append":
        p = p.compute("extra", lambda c: "appended")
    if version == "branch":
        p = p.branch(when=lambda c: True, on_true=lambda b: b.compute("arm", lambda c: "taken"))
    f.workflow(
        "job",
        trigger=manual(order),
        pipeline=p.return_(lambda c: ok(c.steps["after"])),
        renamed={"cool-off": "pause"} if version == "across" else None,
        fill={"price": lambda stored: stored["quote"] + 1} if version == "fill" else None,
    )

    def body(b: Any) -> Any:
        b = b.wait("PT1H", name="tick").compute("seen", lambda c: f"{tag}:{c.scope['item']}")
        return b if tag == "v1" else b.compute("more", lambda c: "changed body")

    loop: Any = f.workflow_pipeline(order).for_each("item", over=lambda c: c.payload.items, do=body)
    f.workflow("loop", trigger=manual(order), pipeline=loop.return_(lambda c: ok(c.steps["seen"])))

    nested: Any = f.workflow_pipeline(order)
    if version == "insert":
        nested = nested.guard(lambda c: True, otherwise=lambda c: fail("unprocessable", "never"))
    nested = nested.branch(
        name="vip",
        when=lambda c: c.payload.n > 0,
        on_true=lambda b: b.wait("PT1H", name="cool-off").compute("note", lambda c: f"{tag}:vip"),
    )
    f.workflow("nested", trigger=manual(order), pipeline=nested.return_(lambda c: ok(c.steps["note"])))

    twice: Any = f.workflow_pipeline(order)  # @wait, then @wait~2
    if version != "first-removed":
        twice = twice.wait("PT1H")
    twice = twice.guard(lambda c: True, otherwise=lambda c: fail("unprocessable", "never")).wait("PT2H")
    f.workflow("twice", trigger=manual(order), pipeline=twice.return_(lambda c: ok(f"{tag}:done")))

    retrier: Any = f.workflow_pipeline(order)
    if version == "retry-as-wait":
        retrier = retrier.wait("PT1M", name="again")
    else:
        retrier = retrier.retry(
            times=3,
            base_delay=timedelta(minutes=1),
            do=lambda b: b.get_one("none", lambda c: sa.select(DepBeacon).where(DepBeacon.note == "never")),
            name="again",
        )
    f.workflow("retrier", trigger=manual(order), pipeline=retrier.return_(lambda c: ok(f"{tag}:done")))
    return f


def make_app(url: str, version: str, clock: Any) -> App:
    return App([feature(version)], database_url=url, clock=clock)


def app_v1(database_url: str) -> App:
    """``kumiko-typed check _deploy_app:app_v1 --against URL``."""
    return make_app(database_url, "v1", FakeClock(T0))


def app_renamed(database_url: str) -> App:
    return make_app(database_url, "renamed", FakeClock(T0))


def app_needs(database_url: str) -> App:
    return make_app(database_url, "needs", FakeClock(T0))


def app_gone(database_url: str) -> App:
    return make_app(database_url, "gone", FakeClock(T0))


def app_first_removed(database_url: str) -> App:
    return make_app(database_url, "first-removed", FakeClock(T0))


def app_retry_as_wait(database_url: str) -> App:
    return make_app(database_url, "retry-as-wait", FakeClock(T0))


def app_retyped(database_url: str) -> App:
    return make_app(database_url, "retyped", FakeClock(T0))


def app_n_text(database_url: str) -> App:
    return make_app(database_url, "n-text", FakeClock(T0))


class DepLedger(Entity):
    """A table the code of ``app_adding_a_table`` adds."""

    __tablename__ = "dep_ledger"
    note: Mapped[str]


def app_v1_creating(database_url: str) -> App:
    """A factory as a service writes it: it creates its tables (here all there already)."""
    app = app_v1(database_url)
    app.create_all()
    return app


def app_adding_a_table(database_url: str) -> App:
    """The next release's factory: its create_all() would create ``dep_ledger``."""
    ledger = Feature("ledger")
    ledger.entity(DepLedger)
    app = App([feature("v1"), ledger], database_url=database_url, clock=FakeClock(T0))
    app.create_all()
    return app


def worker_main(argv: list[str]) -> int:
    url, version, now, seconds = argv[0], argv[1], datetime.fromisoformat(argv[2]), float(argv[3])
    app = make_app(url, version, FakeClock(now))
    resumed = errors = 0
    end = time.monotonic() + seconds
    try:
        while True:
            try:
                passed = app.run_worker(once=True)["resumed"]
                resumed += passed
            except Exception:  # a pass that raised (a lock timeout) is retried, and counted
                errors += 1
                passed = -1
            # Passes for ``seconds``, then on while they find work: a window that a loaded
            # machine filled with slow or refused passes left runs to resume (up to a
            # minute more, which bounds a hang only).
            now = time.monotonic()
            if now >= end and (seconds == 0 or passed == 0 or now >= end + 60):
                break
            time.sleep(0.05)
    finally:
        app.dispose()
    print(json.dumps({"resumed": resumed, "errors": errors}))
    sys.stdout.flush()
    return 0
