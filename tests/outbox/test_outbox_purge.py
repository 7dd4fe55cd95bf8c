"""``app.purge_outbox(older_than=...)``: sent rows hold a mail's recipients and body for
good unless deleted; a purge deletes those sent long enough ago, by the App's clock, in
batches, and never a pending or dead row.  Both databases; mail to a maildir folder,
webhooks to a closed port on 127.0.0.1 (refused: dead after one attempt)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest
import sqlalchemy as sa

from kumiko_typed import App, Feature, MaildirTransport, RetryPolicy, User, ok
from kumiko_typed._retention import _PURGE_OUTBOX
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
AppOn = Callable[..., App]


@attrs.frozen
class Note:
    to: str


@attrs.frozen
class Hook:
    url: str


f = Feature("purge_o", requires=["mail.send", "webhook.send"])
note = f.write_handler(
    "note",
    f.pipeline(Note).send_mail(to=lambda c: [c.payload.to], subject="s", body="b").return_(lambda c: ok(None)),
)
hook = f.write_handler(
    "hook",
    f.pipeline(Hook).send_webhook(url=lambda c: c.payload.url, retry=RetryPolicy(times=1)).return_(lambda c: ok(None)),
)


@pytest.fixture
def closed_url() -> str:
    """A port on 127.0.0.1 that nothing listens on: every connect is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


def _statuses(app: App) -> list[str]:
    return sorted(i.status for i in app.outbox())


def _mail(app: App, user: User, *recipients: str) -> None:
    for to in recipients:
        assert app.dispatch(note, Note(to), user=user) == ok(None)


def test_sent_rows_older_than_the_age_go_the_others_stay(
    app_on: AppOn, user: User, tmp_path: Path, closed_url: str
) -> None:
    clock = FakeClock(T0)
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    _mail(app, user, "a@example.com", "b@example.com", "c@example.com")
    assert app.dispatch(hook, Hook(closed_url), user=user) == ok(None)
    assert app.run_worker(once=True)["sent"] == 3  # and the webhook dead
    clock.advance(days=20)
    _mail(app, user, "d@example.com")
    app.run_worker(once=True)
    _mail(app, user, "pending@example.com")  # not delivered: pending
    assert _statuses(app) == ["dead", "pending", "sent", "sent", "sent", "sent"]

    clock.advance(days=10)  # the first three were sent exactly 30 days ago: old enough
    assert app.purge_outbox(older_than=timedelta(days=30), batch=2) == 3
    assert _statuses(app) == ["dead", "pending", "sent"]
    assert app.purge_outbox(older_than=timedelta(days=30)) == 0
    # Age 0: every row sent up to now, still never the pending or the dead one.
    assert app.purge_outbox(older_than=timedelta(0)) == 1
    assert _statuses(app) == ["dead", "pending"]
    # The pending row is delivered as before; once sent, it is old like any other.
    assert app.run_worker(once=True)["sent"] == 1
    clock.advance(microseconds=1)
    assert app.purge_outbox(older_than=timedelta(seconds=1)) == 0
    clock.advance(seconds=1)
    assert app.purge_outbox(older_than=timedelta(seconds=1)) == 1
    assert _statuses(app) == ["dead"]


def test_an_age_longer_than_the_calendar_keeps_every_row(app_on: AppOn, user: User, tmp_path: Path) -> None:
    clock = FakeClock(T0)
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    _mail(app, user, "a@example.com")
    app.run_worker(once=True)
    clock.advance(days=3650)
    assert app.purge_outbox(older_than=timedelta.max) == 0
    assert app.purge_outbox(older_than=timedelta(days=800_000)) == 0
    assert _statuses(app) == ["sent"]


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"older_than": 30}, TypeError, "older_than must be a datetime.timedelta, not int"),
        ({"older_than": "P30D"}, TypeError, "older_than must be a datetime.timedelta, not str"),
        ({"older_than": timedelta(seconds=-1)}, ValueError, "older_than must not be negative"),
        ({"older_than": timedelta(days=1), "batch": 0}, ValueError, "batch must be a positive int"),
        ({"older_than": timedelta(days=1), "batch": True}, ValueError, "batch must be a positive int"),
    ],
)
def test_wrong_arguments_are_refused_before_anything_is_deleted(
    app_on: AppOn, user: User, tmp_path: Path, kwargs: dict[str, object], error: type[Exception], text: str
) -> None:
    clock = FakeClock(T0)
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    _mail(app, user, "a@example.com")
    app.run_worker(once=True)
    clock.advance(days=400)
    with pytest.raises(error, match=text):
        app.purge_outbox(**kwargs)  # type: ignore[arg-type]
    assert _statuses(app) == ["sent"]


def test_the_purge_reads_the_sent_rows_index(app_on: AppOn, db_url: str) -> None:
    """A purge reads the old sent rows through ``kumiko_outbox_sent``, not every row the
    outbox ever held: on SQLite a partial index is used only when the query's condition
    states the index's as written (a literal, not a parameter)."""
    app = app_on([f])
    indexes = {i["name"]: i["column_names"] for i in sa.inspect(app.engine).get_indexes("kumiko_outbox")}
    assert indexes["kumiko_outbox_sent"] == ["status", "sent_at"]
    if not db_url.startswith("sqlite"):
        return  # PostgreSQL's planner picks by the table's statistics; the index exists
    compiled = _PURGE_OUTBOX.compile(app.engine)
    unbound = tuple(None for _ in compiled.positiontup or ())  # the plan does not read the values
    with app.engine.connect() as conn:
        plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), unbound))
    assert "kumiko_outbox_sent" in plan, plan


def test_rows_of_every_tenant_go(app_on: AppOn, tmp_path: Path) -> None:
    """An operator's purge, like the listing: by age, whatever the tenant."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    for _ in range(3):
        _mail(app, User(id=uuid.uuid4(), tenant_id=uuid.uuid4()), "x@example.com")
    app.run_worker(once=True)
    clock.advance(days=2)
    assert app.purge_outbox(older_than=timedelta(days=1)) == 3
    assert app.outbox() == []


def test_a_purge_failed_at_any_statement_deletes_whole_batches_of_old_sent_rows_only(
    app_on: AppOn, db_url: str, user: User, tmp_path: Path, closed_url: str
) -> None:
    """Each batch is its own transaction: a purge the database fails at its k-th statement
    (``_faults``: busy, another error) raises the driver's error, keeps what the batches
    before it deleted and no more, and never deletes a pending, dead or recent sent row;
    the same purge again deletes the rest.  A batch whose PostgreSQL backend was killed
    under its statement committed nothing and runs once more: the purge ends as a clean one."""
    from _faults import counting, failing_at

    clock = FakeClock(T0)
    app = app_on([f], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))
    assert app.dispatch(hook, Hook(closed_url), user=user) == ok(None)
    kinds = ["error", "busy", "kill"] if db_url.startswith("postgresql") else ["error", "busy"]
    rounds = 0

    def old_rows() -> None:
        """Five rows sent 30 days ago, one sent now, one pending."""
        nonlocal rounds
        rounds += 1
        _mail(app, user, *(f"{rounds}-{i}@example.com" for i in range(5)))
        app.run_worker(once=True)
        clock.advance(days=30)
        _mail(app, user, f"{rounds}-new@example.com")
        app.run_worker(once=True)
        _mail(app, user, f"{rounds}-pending@example.com")

    def rows() -> dict[uuid.UUID, str]:
        return {i.id: i.status for i in app.outbox()}

    old_rows()
    with counting(app.engine) as clean:
        assert app.purge_outbox(older_than=timedelta(days=1), batch=2) == 5
    assert _statuses(app) == ["dead", "pending", "sent"]
    for kind in kinds:
        for at in range(1, len(clean.sent) + 1):
            old_rows()  # the round before's pending and recent rows are old and sent now
            before = rows()
            recent = {i.id for i in app.outbox() if i.target == f"{rounds}-new@example.com"}
            kept = {row_id for row_id, status in before.items() if status != "sent"} | recent
            with failing_at(app.engine, at, kind) as fault:
                if kind == "kill":  # a batch lost under its statement committed nothing: run once more
                    assert app.purge_outbox(older_than=timedelta(days=1), batch=2) == len(before) - len(kept)
                else:
                    with pytest.raises(sa.exc.DBAPIError):
                        app.purge_outbox(older_than=timedelta(days=1), batch=2)
            where = (kind, at, fault.sent[at - 1])
            assert fault.fired, where
            if kind == "kill":
                assert set(rows()) == kept, where
                continue
            gone = set(before) - set(rows())
            assert len(gone) % 2 == 0 and not gone & kept, where  # whole batches of old sent rows
            assert app.purge_outbox(older_than=timedelta(days=1), batch=2) == len(before) - len(kept) - len(gone), where
            assert set(rows()) == kept, where
