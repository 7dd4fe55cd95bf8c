"""Mail to a real SMTP server (aiosmtpd on 127.0.0.1) while the database fails the k-th
statement of a delivery pass, for every k (``_faults``: the driver's own errors): the
claim, the record of the mails sent, the records of a mail the server refused for now
(``451``, tried again) and of one it refused for good (``550``, dead).  The database
busy, another error, on PostgreSQL the backend killed under the statement or just
before a COMMIT.  Then clean passes, past the lease and the backoff.  Whatever k: every
mail the server took for good is received at least once, and its row is ``sent`` only if
the server took it (never marked sent unsent); the refused-for-now mail is sent once the
server takes it; the refused-for-good one is ``dead`` with the server's reply, never
received.  (A 4xx or 5xx answer without faults: test_outbox_faults.py.)  Both
databases; a hand-moved clock."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _faults import counting, failing_at, killed_at_commit
from _support import RefusingSmtp, smtp_server

from kumiko_typed import App, Feature, Ok, SmtpTransport, User, ok
from kumiko_typed._outbox import CLAIM_LEASE
from kumiko_typed._tables import outbox as outbox_table
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset({"admin"}))


@attrs.frozen
class Letter:
    to: str


def _feature() -> tuple[Feature[Any], Any]:
    f: Feature[Any] = Feature("smf", requires=["mail.send"])
    letter = f.write_handler(
        "letter",
        f.pipeline(Letter)
        # The default policy (3 attempts): a round's 451 costs one, its send the next.
        .send_mail(to=lambda c: c.payload.to, subject="Hi", body="Hello")
        .return_(lambda c: ok(None)),
    )
    return f, letter


@pytest.fixture
def smtp() -> Iterator[tuple[RefusingSmtp, int]]:
    handler = RefusingSmtp({})
    with smtp_server(handler) as port:
        yield handler, port


def _message_ids(handler: RefusingSmtp) -> list[str]:
    """The Message-ID of every mail the server took."""
    ids = []
    for envelope in handler.envelopes:
        for line in bytes(envelope.original_content).decode().splitlines():
            if line.lower().startswith("message-id:"):
                ids.append(line.split(":", 1)[1].strip())
    return ids


class _Round:
    """Three mails queued together: one the server takes, one it refuses for now, one it
    refuses for good."""

    def __init__(self, app: App, letter: Any, handler: RefusingSmtp, n: int) -> None:
        self.app, self.handler, self.n = app, handler, n
        self.to = {what: f"{what}{n}@example.com" for what in ("taken", "later", "never")}
        handler.refuse[self.to["later"]] = "451 4.7.1 Greylisted, try again later"
        handler.refuse[self.to["never"]] = "550 5.1.1 No such user"
        known = {item.id for item in app.outbox()}
        for to in self.to.values():
            assert app.dispatch(letter, Letter(to), user=ADA) == Ok(None)
        rows = {item.target: item.id for item in app.outbox() if item.id not in known}
        self.ids = {what: rows[to] for what, to in self.to.items()}

    def greylisting_over(self) -> None:
        del self.handler.refuse[self.to["later"]]

    def check(self, where: object) -> None:
        received = _message_ids(self.handler)
        items = {item.id: item for item in self.app.outbox()}
        for what in ("taken", "later"):
            item = items[self.ids[what]]
            assert item.status == "sent", (where, what, item)
            assert received.count(f"<{item.id}@kumiko-typed>") >= 1, (where, what)  # at least once
        never = items[self.ids["never"]]
        assert never.status == "dead", (where, never)
        refused = f"SMTP refused 1 of 1 recipient(s): {self.to['never']} (550 5.1.1 No such user)"
        assert never.last_error == refused, (where, never)
        assert f"<{never.id}@kumiko-typed>" not in received, where


def _settle(app: App, clock: FakeClock) -> None:
    """Clean passes, each past the claim lease and any backoff, until nothing is due."""
    for _ in range(4):
        clock.advance(seconds=CLAIM_LEASE.total_seconds() + 3600)
        app.run_worker(once=True)


def _warm_up(app: App, letter: Any, handler: RefusingSmtp, clock: FakeClock) -> None:
    """A round before the counted one: a worker's first pass sends statements of its own
    (its feed's cursor made), which the next passes do not."""
    _Round(app, letter, handler, -1).greylisting_over()
    _settle(app, clock)


def _sent_only_if_received(app: App, handler: RefusingSmtp) -> None:
    """No row is ``sent`` whose mail the server never took."""
    received = set(_message_ids(handler))
    with app.engine.connect() as conn:
        sent = conn.scalars(sa.select(outbox_table.c.id).where(outbox_table.c.status == "sent")).all()
    assert {f"<{i}@kumiko-typed>" for i in sent} <= received


def test_a_mail_delivery_pass_failed_at_any_statement_sends_at_least_once_and_marks_only_what_was_sent(
    db_url: str, smtp: tuple[RefusingSmtp, int]
) -> None:
    handler, port = smtp
    f, letter = _feature()
    clock = FakeClock(T0)
    app = App([f], database_url=db_url, clock=clock, mail=SmtpTransport("127.0.0.1", port, timeout=5))
    try:
        app.create_all()
        _warm_up(app, letter, handler, clock)
        first = _Round(app, letter, handler, 0)
        with counting(app.engine) as clean:
            app.run_worker(once=True)
        # The claim (select, lease), the 451's record, the 550's record, the sent one's.
        assert len(clean.sent) >= 5, clean.sent
        first.greylisting_over()
        _settle(app, clock)
        first.check("clean")
        kinds = ["error", "busy", "kill"] if app.engine.dialect.name == "postgresql" else ["error", "busy"]
        n = 0
        for kind in kinds:
            for at in range(1, len(clean.sent) + 1):
                n += 1
                round_ = _Round(app, letter, handler, n)
                with failing_at(app.engine, at, kind) as fault:
                    try:
                        app.run_worker(once=True)
                    except sa.exc.DBAPIError:  # a pass that stops the worker: its supervisor restarts it
                        assert fault.fired
                where = (kind, at, fault.sent[at - 1] if fault.fired else None)
                assert fault.fired, where
                _sent_only_if_received(app, handler)
                round_.greylisting_over()
                _settle(app, clock)
                round_.check(where)
        _sent_only_if_received(app, handler)
    finally:
        app.dispose()


@pytest.mark.postgres
def test_a_mail_delivery_pass_whose_commit_died_sends_at_least_once_and_marks_only_what_was_sent(
    fresh_postgres_url: str, smtp: tuple[RefusingSmtp, int]
) -> None:
    """The backend killed just before each COMMIT of the pass: the claim, or a record,
    did not commit (or may have: the COMMIT's answer was lost); the next passes deliver
    and record what it did not, and record nothing twice."""
    handler, port = smtp
    f, letter = _feature()
    clock = FakeClock(T0)
    app = App([f], database_url=fresh_postgres_url, clock=clock, mail=SmtpTransport("127.0.0.1", port, timeout=5))
    try:
        app.create_all()
        _warm_up(app, letter, handler, clock)
        first = _Round(app, letter, handler, 0)
        with killed_at_commit(app.engine, 0) as clean:
            app.run_worker(once=True)
        assert clean.commits >= 3, clean.commits  # the claim and two records, at least
        first.greylisting_over()
        _settle(app, clock)
        first.check("clean")
        for at in range(1, clean.commits + 1):
            round_ = _Round(app, letter, handler, at)
            with killed_at_commit(app.engine, at) as kill:
                try:
                    app.run_worker(once=True)
                except sa.exc.DBAPIError:
                    assert kill.fired
            assert kill.fired, at
            _sent_only_if_received(app, handler)
            round_.greylisting_over()
            _settle(app, clock)
            round_.check(at)
    finally:
        app.dispose()
