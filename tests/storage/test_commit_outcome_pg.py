"""What a client learns when the connection is cut at the worst moments, and what a
repeat with its ``idempotency_key`` answers (docs/operations.md, "Connections after a
restart"; docs/errors.md, ``unavailable``).

- The COMMIT reaches the server and commits, and the connection dies before its answer:
  the dispatch cannot know, answers ``unavailable``, and the repeat with the same key
  answers the committed result — the handler ran once, one row, one outbox row.
- A serialization failure or a lost deadlock raised inside a step: ``unavailable``,
  nothing written (not the row, not the outbox row, not the key), no SQL in the message.
- The webhook was received and the worker's record of it meets a dead connection: the
  record is kept and written by the next pass; the row is sent once, not again when its
  lease runs out."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import Hook, failure_of, hook_feature
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, ok
from kumiko_typed._outbox import CLAIM_LEASE

pytestmark = pytest.mark.postgres


class CoNote(Entity):
    __tablename__ = "co_note"
    text: Mapped[str] = mapped_column(sa.String(40))


@attrs.frozen
class Say:
    text: str


@pytest.fixture
def admin(fresh_postgres_url: str) -> Iterator[sa.Engine]:
    """A connection of the test's own, outside the App's pool, to kill the App's."""
    engine = sa.create_engine(fresh_postgres_url, poolclass=sa.pool.NullPool)
    yield engine
    engine.dispose()


def _terminate(admin: sa.Engine, pid: int | None = None) -> int:
    """Terminate the backend ``pid`` (every other one of the database if None), waiting until gone."""
    where = "pid = :pid" if pid is not None else "datname = current_database() AND pid <> pg_backend_pid()"
    stmt = sa.text(f"SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity WHERE {where}")
    with admin.connect() as conn:
        return int(conn.execute(stmt, {"pid": pid}).scalar_one())


def _texts(app: App) -> list[str]:
    with app.engine.connect() as conn:
        return list(conn.scalars(sa.select(CoNote.text).order_by(CoNote.text)))


def _noting(name: str, ran: list[str], then: Any = None) -> tuple[Feature[Any], Any]:
    f: Feature[Any] = Feature(name, requires=["mail.send"])
    f.entity(CoNote)

    def noted(c: Any) -> CoNote:
        ran.append(c.payload.text)
        return CoNote(text=c.payload.text)

    pipeline = f.pipeline(Say).create("n", CoNote, data=noted).send_mail(to="a@example.com", subject="s", body="b")
    if then is not None:
        pipeline = pipeline.compute("then", then)
    return f, f.write_handler("note", pipeline.return_(lambda c: ok(c.steps["n"].id)))


def test_a_commit_whose_answer_was_lost_is_answered_by_its_key_once(
    fresh_postgres_url: str, admin: sa.Engine, user: User
) -> None:
    ran: list[str] = []
    f, note = _noting("co_commit", ran)
    app = App([f], database_url=fresh_postgres_url)
    cut = {"on": False}

    def commit_then_cut(conn: sa.Connection) -> None:
        """The server commits (sent by hand), then the backend dies: SQLAlchemy's own
        COMMIT meets a dead connection, as a COMMIT whose answer never came."""
        if cut["on"]:
            cut["on"] = False
            driver: Any = conn.connection.driver_connection
            driver.pgconn.exec_(b"COMMIT")
            driver.pgconn.exec_(b"BEGIN")
            assert _terminate(admin, driver.info.backend_pid) == 1

    sa.event.listen(app.engine, "commit", commit_then_cut)
    try:
        app.create_all()
        cut["on"] = True
        failure = failure_of(app.dispatch(note, Say("lost"), user=user, idempotency_key="k"), "unavailable")
        assert "try again" in failure.message and "COMMIT" not in failure.message
        assert _texts(app) == ["lost"]  # it did commit
        again = app.dispatch(note, Say("lost"), user=user, idempotency_key="k")
        with app.engine.connect() as conn:
            stored = conn.scalar(sa.select(CoNote.id))
        assert again == Ok(stored)
        assert ran == ["lost"] and _texts(app) == ["lost"] and len(app.outbox()) == 1
    finally:
        app.dispose()


@pytest.mark.parametrize("state", ["40001", "40P01"])
def test_a_serialization_failure_or_deadlock_in_a_step_is_unavailable_and_writes_nothing(
    fresh_postgres_url: str, user: User, state: str
) -> None:
    raising = [True]

    def conflict(c: Any) -> int:
        if raising[0]:
            c.db.execute(sa.text(f"DO $$ BEGIN RAISE EXCEPTION 'held by 4711' USING ERRCODE = '{state}'; END $$"))
        return 1

    ran: list[str] = []
    f, note = _noting(f"co_{state.lower()}", ran, then=conflict)
    app = App([f], database_url=fresh_postgres_url)
    try:
        app.create_all()
        failure = failure_of(app.dispatch(note, Say("x"), user=user, idempotency_key="k"), "unavailable")
        assert failure.message.startswith('step 2 compute "then": the database is busy or unreachable, try again')
        assert "4711" not in failure.message and "DO $$" not in failure.message
        assert _texts(app) == [] and app.outbox() == []
        raising[0] = False
        assert isinstance(app.dispatch(note, Say("x"), user=user, idempotency_key="k"), Ok)  # the key was free
        assert _texts(app) == ["x"] and len(app.outbox()) == 1
    finally:
        app.dispose()


def test_a_delivery_whose_record_met_a_dead_connection_is_recorded_later_not_sent_again(
    fresh_postgres_url: str, admin: sa.Engine, receiver: Receiver, user: User
) -> None:
    f, hook = hook_feature("co_record")
    ahead = [timedelta(0)]
    app = App([f], database_url=fresh_postgres_url, clock=lambda: datetime.now(UTC) + ahead[0])

    def received_then_cut(index: int, _path: str) -> tuple[int, dict[str, str]]:
        if index == 0:
            assert _terminate(admin) >= 1  # the worker's pooled connection, which records the outcome
        return 200, {}

    receiver.respond = received_then_cut
    try:
        app.create_all()
        app.dispatch(hook, Hook(receiver.url()), user=user)
        assert app.run_worker(once=True)["sent"] == 0  # cut short: the record could not be written
        [item] = app.outbox()
        assert (item.status, item.attempts) == ("pending", 0)
        assert app.run_worker(once=True)["sent"] == 1  # the kept record, written before any claim
        ahead[0] = CLAIM_LEASE + timedelta(seconds=1)  # an unrecorded lease would have run out
        app.run_worker(once=True)
        [item] = app.outbox()
        assert (item.status, item.attempts) == ("sent", 1)
        assert [seen.headers["idempotency-key"] for seen in receiver.requests] == [str(item.id)]
    finally:
        app.dispose()
