"""The App the workflow race tests between worker PROCESSES share
(tests/workflows/test_workflow_process_races_pg.py), and its script: each process builds it
on one PostgreSQL database with the test's instant as its clock, does one thing and prints
the answer as a JSON line (``python -c BOOT`` with ``tests`` on ``PYTHONPATH``, then)::

    URL MAILDIR NOW worker
    URL MAILDIR NOW cancel RUN_ID
    URL MAILDIR NOW start N KEY
    URL MAILDIR NOW send N NOTE TENANT   (a or b)

The steps that hold a segment take a PostgreSQL advisory lock of the transaction
(:data:`GATE`, the run's ``n``): a test holding it on a connection of its own keeps a
worker process inside that segment, its work uncommitted, and sees it wait in pg_locks."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Failure, Feature, MaildirTransport, Ok, User, manual, ok

TENANTS = {"a": uuid.UUID(int=0xA), "b": uuid.UUID(int=0xB)}
USERS = {name: User(id=uuid.UUID(int=i + 1), tenant_id=t) for i, (name, t) in enumerate(TENANTS.items())}
#: The first number of the advisory locks the gates take (the second is the run's ``n``).
GATE = 4711
#: The second number of the lock a keyed start's first step takes: ``n + STARTS``.
STARTS = 10_000
#: The second number of the lock every ``send`` takes between its write and its append.
SENDS = 20_000
#: The second number of the lock the step after the event wait takes: ``n + AFTERS``.
AFTERS = 30_000

side = sa.MetaData()
#: One row per committed run of the step after the event wait (no unique constraint: a
#: doubled one shows).
after = sa.Table(
    "wfrace_after",
    side,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Uuid, nullable=False),
)


@attrs.frozen
class Job:
    n: int


@attrs.frozen
class Send:
    n: int
    note: str


@attrs.frozen
class Ping:
    n: int
    note: str


@attrs.frozen
class Resumed:
    n: int


class WfpThing(Entity):
    __tablename__ = "wfrace_thing"
    note: Mapped[str]


def _gate(c: Any, n: int) -> None:
    """Wait here while the test holds the lock ``(GATE, n)`` (at once if it does not)."""
    c.db.execute(sa.text("SELECT pg_advisory_xact_lock(:g, :n)"), {"g": GATE, "n": n})


def _gated_key(c: Any) -> int:
    # A key resolver runs after the wait noted its view of the event store, before its
    # row is written: held here, the wait is reached but not committed.
    _gate(c, c.payload.n)
    n: int = c.payload.n
    return n


def _after(c: Any) -> str:
    _gate(c, c.payload.n + AFTERS)
    c.db.execute(sa.insert(after).values(run_id=c.workflow.run_id))
    return "after"


def _first(c: Any) -> str:
    _gate(c, c.payload.n + STARTS)
    return "first"


feature = Feature("wfrace", requires=["mail.send"])
feature.entity(WfpThing)
feature.event(Ping)
feature.event(Resumed)
send = feature.write_handler(
    "send",
    feature.pipeline(Send)
    .create("thing", WfpThing, data=lambda c: WfpThing(note=c.payload.note))
    # Held here, the handler's transaction has written (it has its id) and appended nothing.
    .compute("held", lambda c: _gate(c, SENDS))
    .append_event(WfpThing, id=lambda c: c.steps["thing"].id, event=lambda c: Ping(c.payload.n, c.payload.note))
    .return_(lambda c: ok(None)),
)
#: Resumed by its timer, it appends an event and enqueues a mail, then reaches an event
#: wait (held there by the gate) and, woken, writes a row of ``after``.
chain = feature.workflow(
    "chain",
    trigger=manual(Job),
    pipeline=feature.workflow_pipeline(Job)
    .wait("PT1M")
    .create("thing", WfpThing, data=lambda c: WfpThing(note=f"resumed {c.payload.n}"))
    .append_event(WfpThing, id=lambda c: c.steps["thing"].id, event=lambda c: Resumed(c.payload.n))
    .send_mail(to=["ops@example.com"], subject=lambda c: f"run {c.payload.n} resumed", body="once")
    .wait_for_event("got", Ping, key=_gated_key, event_key=lambda e: e.n, timeout="PT1H")
    .compute("after", _after)
    .return_(lambda c: ok(None if c.steps["got"] is None else c.steps["got"].note)),
)
#: Two event waits in a row for the same event and key; the second's key resolver holds
#: at the gate ``n``: a timeout of the first is held having noted the second's view.
twice = feature.workflow(
    "twice",
    trigger=manual(Job),
    pipeline=feature.workflow_pipeline(Job)
    .wait("PT1M")
    .wait_for_event("first", Ping, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout="PT1H")
    .wait_for_event("second", Ping, key=_gated_key, event_key=lambda e: e.n, timeout="PT1H")
    .compute("after", _after),
)
#: Started with a key: its first step is held by the gate ``n + STARTS``.
keyed = feature.workflow(
    "keyed",
    trigger=manual(Job),
    pipeline=feature.workflow_pipeline(Job).compute("first", _first).wait("PT1H"),
)


def make_app(url: str, maildir: str, now: datetime) -> App:
    return App([feature], database_url=url, clock=lambda: now, mail=MaildirTransport(maildir))


def _answer(answer: object) -> object:
    if isinstance(answer, Ok):
        return {"ok": getattr(answer.data, "status", answer.data)}
    if isinstance(answer, Failure):
        return {"failure": answer.code, "details": answer.details}
    return str(answer)


def main(url: str, maildir: str, now: str, action: str, *args: str) -> None:
    app = make_app(url, maildir, datetime.fromisoformat(now))
    if action == "worker":
        print(json.dumps(app.run_worker(once=True)), flush=True)
    elif action == "cancel":
        print(json.dumps(_answer(app.cancel_run(uuid.UUID(args[0]), user=USERS["a"], reason="stop"))), flush=True)
    elif action == "start":
        print(json.dumps(str(app.start_workflow(keyed, Job(int(args[0])), user=USERS["a"], key=args[1]))), flush=True)
    elif action == "send":
        answer = app.dispatch(send, Send(int(args[0]), args[1]), user=USERS[args[2]])
        print(json.dumps(_answer(answer)), flush=True)
    app.dispose()


#: A process's command line: the module imported by its name (as a script, its classes
#: would be ``__main__.Job``, which the runs the test started did not store).
BOOT = "import sys, _wfrace_app; _wfrace_app.main(*sys.argv[1:])"
