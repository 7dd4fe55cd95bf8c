"""From outside, on SQLite and PostgreSQL: appends to one stream racing with the same
expected version (threads, each its own connection) leave one winner and a stream with no
gap and no twin; a projector that raises after the handler queued a mail and wrote a
projection row leaves nothing of the call (no event, no row change, no outbox row), and
its Failure names the projector without the exception's text."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, MaildirTransport, Ok, User, ok
from kumiko_typed._tables import events, outbox

AppOn = Callable[..., App]
RACERS = 6


class RhCounter(Entity):
    __tablename__ = "rh_counter"
    total: Mapped[int] = mapped_column(default=0)


RH_LOG = sa.Table(
    "rh_log", Entity.metadata, sa.Column("k", sa.String(40), primary_key=True), sa.Column("n", sa.Integer)
)


@attrs.frozen
class Added:
    n: int


@attrs.frozen
class Add:
    id: uuid.UUID
    n: int
    version: int | None = None


@attrs.frozen
class Start:
    pass


rh = Feature("rh", requires=["mail.send"], projections=[RH_LOG])
rh.entity(RhCounter)
rh.event(Added, name="added")


@rh.projector(RhCounter, Added)
def _added(row: RhCounter, event: Added) -> None:
    if event.n < 0:
        raise ValueError("secret-token-in-the-exception")
    row.total += event.n


start = rh.write_handler(
    "start",
    rh.pipeline(Start).create("c", RhCounter, data=lambda c: RhCounter()).return_(lambda c: ok(c.steps["c"].id)),
)
add = rh.write_handler(
    "add",
    rh.pipeline(Add)
    .send_mail(to="ops@example.com", subject="added", body=lambda c: str(c.payload.n))
    .unsafe_projection_upsert(RH_LOG, on=["k"], row=lambda c: {"k": str(c.payload.id), "n": c.payload.n})
    .append_event(
        RhCounter, id=lambda c: c.payload.id, event=lambda c: Added(c.payload.n), version=lambda c: c.payload.version
    )
    .return_(lambda c: ok(None)),
)
add_any = rh.write_handler(
    "add-any",
    rh.pipeline(Add)
    .append_event(RhCounter, id=lambda c: c.payload.id, event=lambda c: Added(c.payload.n))
    .return_(lambda c: ok(None)),
)


@pytest.fixture
def app(app_on: AppOn, tmp_path: Path) -> App:
    return app_on([rh], mail=MaildirTransport(str(tmp_path / "mail")))


def _race(app: App, handler: Any, payloads: list[Add], user: User) -> list[Ok[Any] | Failure]:
    """Each payload dispatched in its own thread, all released at once."""
    gate = threading.Barrier(len(payloads))
    results: list[Ok[Any] | Failure | None] = [None] * len(payloads)

    def run(i: int) -> None:
        gate.wait(timeout=60)
        results[i] = app.dispatch(handler, payloads[i], user=user)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(payloads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a dispatch hung"
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def _versions(app: App, stream: uuid.UUID) -> list[int]:
    with app.engine.connect() as conn:
        found = conn.scalars(
            sa.select(events.c.stream_version).where(events.c.stream_id == stream).order_by(events.c.stream_version)
        )
        return list(found)


def _count(app: App, table: sa.Table) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(table)) or 0)


def test_appends_racing_with_one_expected_version_leave_one_winner(app: App, user: User) -> None:
    counter = ok_data(app.dispatch(start, Start(), user=user))
    results = _race(app, add, [Add(counter, 1, version=1) for _ in range(RACERS)], user)
    won = [r for r in results if isinstance(r, Ok)]
    lost = [r for r in results if isinstance(r, Failure)]
    assert len(won) == 1, results
    for failure in lost:  # unavailable only if the machine held a writer past the busy timeout
        assert failure.code in ("version_conflict", "unavailable"), failure
        if failure.code == "version_conflict":
            assert failure.details == {"entity_id": str(counter), "expected_version": 1, "current_version": 2}
    assert _versions(app, counter) == [1, 2]
    assert _count(app, outbox) == 1  # the losers' mails went with their transactions
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(RhCounter.total, RhCounter.version)).one() == (1, 2)
    assert ok_data(app.rebuild_projection(RhCounter, user=user, verify=True)).matches


def test_appends_racing_without_a_version_never_share_one(app: App, user: User) -> None:
    """Each that succeeds took its own version: the stream has no gap and no twin, and the
    row counts exactly the events that committed."""
    counter = ok_data(app.dispatch(start, Start(), user=user))
    results = _race(app, add_any, [Add(counter, 1) for _ in range(RACERS)], user)
    won = sum(isinstance(r, Ok) for r in results)
    for r in results:
        assert isinstance(r, Ok) or r.code in ("version_conflict", "unavailable"), r
    assert won >= 1
    assert _versions(app, counter) == list(range(1, won + 2))
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(RhCounter.total, RhCounter.version)).one() == (won, won + 1)


def test_a_projector_raising_after_a_mail_and_a_row_leaves_nothing_of_the_call(
    app: App, user: User, caplog: pytest.LogCaptureFixture
) -> None:
    counter = ok_data(app.dispatch(start, Start(), user=user))
    ok_data(app.dispatch(add, Add(counter, 2, version=1), user=user))
    before = (_versions(app, counter), _count(app, outbox), _count(app, RH_LOG))

    refused = failure_of(app.dispatch(add, Add(counter, -1, version=2), user=user), "internal_error")
    assert "secret-token" not in refused.message and "secret-token" not in repr(refused.details)
    assert "_added" in refused.message and "error id" in refused.message
    assert "secret-token-in-the-exception" in caplog.text  # the log keeps it, under the error id
    assert (_versions(app, counter), _count(app, outbox), _count(app, RH_LOG)) == before
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(RhCounter.total, RhCounter.version)).one() == (2, 2)
        assert conn.execute(sa.select(RH_LOG.c.n)).scalar_one() == 2
    ok_data(app.dispatch(add, Add(counter, 3, version=2), user=user))  # the same version is still free
