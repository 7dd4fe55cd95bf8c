"""``append_event(..., version=)``: an event decided on the version a client read is
appended only to that version; another writer's event since is a ``version_conflict``
with nothing written, as ``update``'s ``version=`` (peers' expected version on append).
Without ``version=`` (or when it resolves to ``None``) the event goes after whatever
version the step reads, as before.  Both databases, handlers and workflows."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, Workflow, manual, ok
from kumiko_typed._tables import events
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]


class AevTicket(Entity):
    __tablename__ = "aev_ticket"
    owner: Mapped[str] = mapped_column(sa.String(40), default="")


@attrs.frozen
class Taken:
    by: str


@attrs.frozen
class Take:
    id: uuid.UUID
    by: str
    version: int | str | float | None = None  # a client may send anything


f = Feature("aev", requires=["call_feature"])
f.entity(AevTicket)
f.event(Taken, name="aev-taken")


@f.projector(AevTicket, Taken)
def _taken(row: AevTicket, event: Taken) -> None:
    row.owner = event.by


open_ticket = f.write_handler(
    "open",
    f.pipeline(Take).create("t", AevTicket, data=lambda c: AevTicket(owner="")).return_(lambda c: ok(c.steps["t"].id)),
)
take = f.write_handler(
    "take",
    f.pipeline(Take)
    .append_event(
        AevTicket,
        id=lambda c: c.payload.id,
        event=lambda c: Taken(c.payload.by),
        version=lambda c: c.payload.version,  # type: ignore[arg-type,return-value]  # hostile input on purpose
    )
    .return_(lambda c: ok(None)),
)
take_at_1 = f.write_handler(
    "take-at-1",
    f.pipeline(Take)
    .append_event(AevTicket, id=lambda c: c.payload.id, event=lambda c: Taken(c.payload.by), version=1)
    .return_(lambda c: ok(None)),
)
take_later = f.workflow(
    "take-later",
    trigger=manual(Take),
    pipeline=f.workflow_pipeline(Take)
    .wait("PT1M")
    .append_event(AevTicket, id=lambda c: c.payload.id, event=lambda c: Taken(c.payload.by), version=2),
)

# update's version= states a version just as well: before, a worker took the conflict for
# a lost race and tried the segment again every second, for good.
give_later = f.workflow(
    "give-later",
    trigger=manual(Take),
    pipeline=f.workflow_pipeline(Take)
    .wait("PT1M")
    .update("t", AevTicket, id=lambda c: c.payload.id, changes=lambda c: {"owner": c.payload.by}, version=2),
)

give = f.write_handler(
    "give",
    f.pipeline(Take)
    .update(
        "t",
        AevTicket,
        id=lambda c: c.payload.id,
        changes=lambda c: {"owner": c.payload.by},
        version=lambda c: c.payload.version,  # type: ignore[arg-type,return-value]  # an int here
    )
    .return_(lambda c: ok(None)),
)
# Through a handler the run calls, the stated version is as final.
give_by_call = f.workflow(
    "give-by-call",
    trigger=manual(Take),
    pipeline=f.workflow_pipeline(Take)
    .wait("PT1M")
    .call_feature("given", give, payload=lambda c: Take(c.payload.id, c.payload.by, 2)),
)


def _stream(app: App, ticket: uuid.UUID) -> list[tuple[int, str]]:
    with app.engine.connect() as conn:
        rows = conn.execute(
            sa.select(events.c.stream_version, events.c.type)
            .where(events.c.stream_id == str(ticket))
            .order_by(events.c.stream_version)
        )
        return [(v, t) for v, t in rows]


def _owner(app: App, ticket: uuid.UUID) -> str:
    with app.engine.connect() as conn:
        owner: str = conn.execute(sa.select(AevTicket.owner).where(AevTicket.id == ticket)).scalar_one()
        return owner


def _open(app: App, user: User) -> uuid.UUID:
    ticket: uuid.UUID = ok_data(app.dispatch(open_ticket, Take(uuid.uuid4(), ""), user=user))
    return ticket


@pytest.fixture
def ticket(app_on: AppOn, user: User) -> tuple[App, uuid.UUID]:
    app = app_on([f])
    return app, _open(app, user)


def test_the_version_read_appends_another_is_a_conflict_with_nothing_written(
    ticket: tuple[App, uuid.UUID], user: User
) -> None:
    app, t = ticket
    assert app.dispatch(take, Take(t, "ann", 1), user=user) == Ok(None)
    stale = failure_of(app.dispatch(take, Take(t, "bob", 1), user=user), "version_conflict")
    assert stale.details == {"entity_id": str(t), "expected_version": 1, "current_version": 2}
    assert stale.message == f"AevTicket {t} is at version 2, not 1"
    assert _owner(app, t) == "ann"
    assert _stream(app, t) == [(1, "aev-ticket.created"), (2, "aev-taken")]
    assert app.dispatch(take, Take(t, "bob", 2), user=user) == Ok(None)
    assert _owner(app, t) == "bob"
    # A constant version, too: the stream is at 3 now.
    assert failure_of(app.dispatch(take_at_1, Take(t, "cy"), user=user), "version_conflict").details == {
        "entity_id": str(t),
        "expected_version": 1,
        "current_version": 3,
    }


def test_without_a_version_the_event_goes_after_the_version_read(ticket: tuple[App, uuid.UUID], user: User) -> None:
    app, t = ticket
    for by in ("ann", "bob"):
        assert app.dispatch(take, Take(t, by), user=user) == Ok(None)  # version=None: no check
    assert _stream(app, t)[-1] == (3, "aev-taken")


@pytest.mark.parametrize(("given", "kind"), [("1", "str"), (True, "bool"), (1.0, "float")])
def test_a_version_that_is_not_an_int_is_refused_naming_it(
    ticket: tuple[App, uuid.UUID], user: User, given: object, kind: str
) -> None:
    """``"1"`` would be a conflict "at version 1, not 1", ``True`` and ``1.0`` would pass as 1."""
    app, t = ticket
    refused = failure_of(app.dispatch(take, Take(t, "ann", given), user=user), "validation_error")
    assert (
        refused.message == f"append_event AevTicket: version= gave a {kind}; pass the integer version the caller read"
    )
    assert refused.details == [{"path": "version", "message": f"must be an integer, not {kind}", "step": None}]
    assert _stream(app, t) == [(1, "aev-ticket.created")]


def test_another_tenants_aggregate_is_not_found_whatever_the_version(
    ticket: tuple[App, uuid.UUID], make_user: Callable[..., User]
) -> None:
    """The version is no way to learn about another tenant's stream."""
    app, t = ticket
    other = make_user()
    for version in (1, 2):
        found = failure_of(app.dispatch(take, Take(t, "eve", version), user=other), "not_found")
        assert "version" not in found.message and found.details == {"entity_id": str(t)}


@pytest.mark.parametrize(
    "flow", [take_later, give_later, give_by_call], ids=["append_event", "update", "update-in-call_feature"]
)
def test_a_workflow_run_that_states_a_stale_version_fails_once(app_on: AppOn, user: User, flow: Workflow[Take]) -> None:
    """A version the run states (here a constant; a payload's or an earlier segment's
    value alike) stays stale however often the segment is tried: the run fails with
    ``version_conflict`` at the first try, as a handler's dispatch does."""
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    app = app_on([f], clock=clock)
    fresh, stale = _open(app, user), _open(app, user)
    for t in (fresh, stale):
        assert app.dispatch(take, Take(t, "ann", 1), user=user) == Ok(None)  # at 2
    kept = app.start_workflow(flow, Take(fresh, "late"), user=user)
    lost = app.start_workflow(flow, Take(stale, "late"), user=user)
    assert app.dispatch(take, Take(stale, "bob", 2), user=user) == Ok(None)  # at 3: the run's 2 is stale
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 2
    done, failed = app.get_run(kept), app.get_run(lost)
    assert done is not None and done.status == "completed"
    assert failed is not None and failed.status == "failed" and failed.error is not None
    assert failed.error["code"] == "version_conflict"
    assert (_owner(app, fresh), _owner(app, stale)) == ("late", "bob")
    clock.advance(minutes=5)
    assert app.run_worker(once=True)["resumed"] == 0
