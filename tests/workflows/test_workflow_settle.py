"""A worker's segment that loses a race (``version_conflict``) or is refused for now
(``unavailable``) is tried again, with growing waits; but no run is tried for good on a
conflict that no try can resolve (docs/workflows.md, *Segments are isolated like
handlers*):

- a ``create`` of an id that is taken fails its run at the segment's second try: the
  segment, run again after the id was taken, creates it again (an id from the payload or
  an earlier segment; another tenant's id alike).  A create that lost a real race — the
  segment read that no such row existed, another writer created it meanwhile — goes the
  other way on its second try and completes;
- a write that clashes on a unique value (``unique_violation``) is tried again once in
  the same way: a segment that looked the value up and lost the race finds the row at
  its second try; one that clashes on the same constraint again fails its run;
- a ``retry`` whose attempts are all used fails its run with the last attempt's error, a
  lost race or ``unavailable`` alike, as its ``times`` says;
- anything else is tried :data:`CONFLICT_TRIES` times in a row, then fails its run with
  a message that says so.  Meanwhile the run is ``suspended`` with its last error, the
  tries so far and ``wake_at`` the next try.

On both databases; the lost create race also with a real handler in another connection
(PostgreSQL: SQLite runs one writer at a time, so there the other writer writes in the
segment's own transaction, through ``c.db``)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, fail, manual, ok
from kumiko_typed._eventstore import append
from kumiko_typed._workflow_engine import CONFLICT_RETRY_S, CONFLICT_TRIES, UNAVAILABLE_TRIES
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class WfsDoc(Entity):
    __tablename__ = "wfs_doc"
    title: Mapped[str] = mapped_column(sa.String(40), default="")


@attrs.frozen
class Doc:
    id: uuid.UUID
    title: str


def _doc(c: Any) -> WfsDoc:
    """The payload's doc, under the payload's id."""
    doc = WfsDoc(title=c.payload.title)
    doc.id = c.payload.id
    return doc


f = Feature("wfs")
f.entity(WfsDoc)

make_doc = f.write_handler(
    "make-doc",
    f.pipeline(Doc).create("doc", WfsDoc, data=_doc).return_(lambda c: ok(None)),
)

#: Called by the next ``_peek``, between a segment's read and its write (once, unless
#: ``always`` holds it: then at every read).
racer: list[Callable[[Any], None]] = []
always: list[Callable[[Any], None]] = []


def _peek(c: Any) -> bool:
    for hook in always:
        hook(c)
    while racer:
        racer.pop()(c)
    return c.steps["found"] is None


@pytest.fixture(autouse=True)
def no_racer() -> Any:
    yield
    racer.clear()
    always.clear()


# (a) The id comes from the payload and the segment does not look it up.
create_later = f.workflow(
    "create-later",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc).wait("PT1M").create("doc", WfsDoc, data=_doc),
)
# A lost race it resolves: the segment reads whether the doc exists, and creates it or
# renames the one there.
create_or_rename = f.workflow(
    "create-or-rename",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc)
    .wait("PT1M")
    .find_one("found", lambda c: sa.select(WfsDoc).where(WfsDoc.id == c.payload.id))
    .compute("absent", _peek)
    .branch(
        when=lambda c: c.steps["absent"],
        on_true=lambda b: b.create("doc", WfsDoc, data=_doc),
        on_false=lambda b: b.update(
            "renamed",
            WfsDoc,
            id=lambda c: c.payload.id,
            changes=lambda c: {"title": c.payload.title},
            version=lambda c: c.steps["found"].version,
        ),
    ),
)


def _rename_behind_its_back(c: Any) -> None:
    """Another writer's change to the doc the segment read: its version moves on."""
    table = WfsDoc.__table__
    c.db.execute(sa.update(table).where(table.c.id == c.payload.id).values(version=table.c.version + 1))


# (b) A retry whose every attempt loses a race, or is refused for now.
rename_in_retry = f.workflow(
    "rename-in-retry",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc).retry(
        times=2,
        base_delay=timedelta(seconds=10),
        do=lambda b: (
            b.find_one("found", lambda c: sa.select(WfsDoc).where(WfsDoc.id == c.payload.id))
            .compute("absent", _peek)
            .update(
                "renamed",
                WfsDoc,
                id=lambda c: c.payload.id,
                changes=lambda c: {"title": c.payload.title},
                version=lambda c: c.steps["found"].version,
            )
        ),
    ),
)


def _locked(c: object) -> None:
    """What a step meets when the database refuses it for now, every time (a statement
    past PostgreSQL's statement_timeout at every try, SQLite locked by another process)."""
    raise sa.exc.OperationalError("SELECT 1", {}, Exception("database is locked"))


refused_in_retry = f.workflow(
    "refused-in-retry",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc).retry(
        times=2, base_delay=timedelta(seconds=10), do=lambda b: b.compute("x", _locked)
    ),
)
refused_later = f.workflow(
    "refused-later",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc).wait("PT1M").compute("x", _locked),
)


def _past_statement_timeout(c: Any) -> object:
    """A statement that runs past a 100 ms ``statement_timeout``, set for the segment's
    transaction only (``SET LOCAL``, undone with it): set on the whole database, it cut
    the worker's own statements too whenever a loaded machine made one take 100 ms."""
    c.db.execute(sa.text("SET LOCAL statement_timeout = '100ms'"))
    return c.db.execute(sa.text("SELECT pg_sleep(1)"))


# A real one: a statement that runs past PostgreSQL's statement_timeout at every try.
too_slow = f.workflow(
    "too-slow",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc).wait("PT1M").compute("x", _past_statement_timeout),
)


def _titles(app: App) -> list[str]:
    with app.engine.connect() as conn:
        return list(conn.scalars(sa.select(WfsDoc.__table__.c.title)))


def _bound(code: str) -> int:
    """The tries in a row that fail a run: a race lost ten times is none; the database
    refusing for now is given about an hour (an outage lasts longer than a race)."""
    return {"version_conflict": CONFLICT_TRIES, "unique_violation": CONFLICT_TRIES, "unavailable": UNAVAILABLE_TRIES}[
        code
    ]


def _tried_again(app: App, clock: FakeClock, run_id: uuid.UUID, code: str, tries: int) -> Any:
    """The run as an operator sees it while it is tried again: suspended, its last error
    and tries, the next try within the wait of that try (doubling from CONFLICT_RETRY_S)."""
    run = app.get_run(run_id)
    assert run is not None and run.status == "suspended" and run.error is not None, run
    assert (run.error["code"], run.error["tries"]) == (code, str(tries)), run.error
    assert f"(try {tries} of {_bound(code)}; the next at wake_at)" in run.error["message"]
    low, high = (bound * 2 ** min(tries - 1, 6) for bound in CONFLICT_RETRY_S)
    now = clock()
    assert run.wake_at is not None and now + timedelta(seconds=low) <= run.wake_at <= now + timedelta(seconds=high)
    return run


def _failed(app: App, run_id: uuid.UUID, code: str) -> str:
    run = app.get_run(run_id)
    assert run is not None and run.status == "failed" and run.error is not None, run.error
    assert run.error["code"] == code and run.wake_at is None, run.error
    message: str = run.error["message"]
    return message


class WfsMember(Entity):
    __tablename__ = "wfs_member"
    email: Mapped[str] = mapped_column(sa.String(80), unique=True)
    name: Mapped[str] = mapped_column(sa.String(40), default="")


@attrs.frozen
class Join:
    email: str
    name: str


f.entity(WfsMember)
make_member = f.write_handler(
    "make-member",
    f.pipeline(Join)
    .create("member", WfsMember, data=lambda c: WfsMember(email=c.payload.email, name=c.payload.name))
    .return_(lambda c: ok(None)),
)
# A unique value the segment does not look up ...
join_blindly = f.workflow(
    "join-blindly",
    trigger=manual(Join),
    pipeline=f.workflow_pipeline(Join)
    .wait("PT1M")
    .create("member", WfsMember, data=lambda c: WfsMember(email=c.payload.email, name=c.payload.name)),
)
# ... and one it does: it creates the member or renames the one there.
join_or_rename = f.workflow(
    "join-or-rename",
    trigger=manual(Join),
    pipeline=f.workflow_pipeline(Join)
    .wait("PT1M")
    .find_one("found", lambda c: sa.select(WfsMember).where(WfsMember.email == c.payload.email))
    .compute("absent", _peek)
    .branch(
        when=lambda c: c.steps["absent"],
        on_true=lambda b: b.create(
            "member", WfsMember, data=lambda c: WfsMember(email=c.payload.email, name=c.payload.name)
        ),
        on_false=lambda b: b.update(
            "renamed",
            WfsMember,
            id=lambda c: c.steps["found"].id,
            changes=lambda c: {"name": c.payload.name},
            version=lambda c: c.steps["found"].version,
        ),
    ),
)


def _names(app: App) -> list[tuple[str, str]]:
    with app.engine.connect() as conn:
        table = WfsMember.__table__
        return [tuple(row) for row in conn.execute(sa.select(table.c.email, table.c.name).order_by(table.c.name))]


def test_a_write_of_a_taken_unique_value_fails_the_run_at_its_second_try(app_on: AppOn, user: User) -> None:
    """The value was taken before the segment ran, and the segment writes it without a
    look: its second try clashes on the same constraint, and the run fails saying so.
    Before, the first clash failed the run."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(join_blindly, Join("ada@example.org", "mine"), user=user)
    assert app.dispatch(make_member, Join("ada@example.org", "theirs"), user=user) == Ok(None)
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    first = _tried_again(app, clock, run_id, "unique_violation", 1)
    assert first.error["taken"] == "WfsMember (email)", first.error
    assert "ada@example.org" not in str(first.error)  # a value is the client's to show, not the run's
    clock.advance(seconds=2)
    assert app.run_worker(once=True)["resumed"] == 1
    message = _failed(app, run_id, "unique_violation")
    assert message == (
        'step aggregate.create "member": WfsMember violates a unique constraint on email: another row holds that '
        "value; pass another value at $.email, or update that row instead (the segment from step @wait was tried "
        "again after "
        "its unique value was taken and writes it again, as every try would)"
    ), message
    clock.advance(minutes=5)
    assert app.run_worker(once=True)["resumed"] == 0
    assert _names(app) == [("ada@example.org", "theirs")]


# A step that answers unique_violation itself (as a handler that looked the value up does).
says_taken = f.workflow(
    "says-taken",
    trigger=manual(Join),
    pipeline=f.workflow_pipeline(Join)
    .wait("PT1M")
    .compute("seen", lambda c: _tries_seen.append(1))
    .guard(lambda c: False, otherwise=lambda c: fail("unique_violation", "that email is taken", {"path": "email"})),
)
_tries_seen: list[int] = []


def test_a_step_that_answers_unique_violation_itself_fails_the_run_at_once(app_on: AppOn, user: User) -> None:
    """No write clashed: the step decided, and every try would decide the same.  Since
    unique clashes were tried again, such a run was tried ten times, with doubling waits."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(says_taken, Join("eve@example.org", "mine"), user=user)
    _tries_seen.clear()
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert _failed(app, run_id, "unique_violation") == "that email is taken"
    assert _tries_seen == [1]


# Steps that answer version_conflict themselves: a return_, a guard, a called handler's
# return_ (as one that compared the version a client sent with the one it read does).
def _stale(c: Any) -> Any:
    _tries_seen.append(1)
    return fail("version_conflict", "the doc changed since you read it", {"path": "version"})


answers_stale = f.workflow(
    "answers-stale", trigger=manual(Join), pipeline=f.workflow_pipeline(Join).wait("PT1M").return_(_stale)
)
guards_stale = f.workflow(
    "guards-stale",
    trigger=manual(Join),
    pipeline=f.workflow_pipeline(Join).wait("PT1M").guard(lambda c: False, otherwise=_stale),
)
calls = Feature("wfs-calls", requires=["call_feature"])
stale_handler = calls.write_handler("stale-handler", calls.pipeline(Join).return_(_stale))
calls_stale = calls.workflow(
    "calls-stale",
    trigger=manual(Join),
    pipeline=calls.workflow_pipeline(Join)
    .wait("PT1M")
    .call_feature("called", stale_handler, payload=lambda c: c.payload),
)


@pytest.mark.parametrize("answers", ["return_", "guard", "called handler"])
def test_a_step_that_answers_version_conflict_itself_fails_the_run_at_once(
    app_on: AppOn, user: User, answers: str
) -> None:
    """No write lost a race: the program decided, and every try would decide the same.
    Before, such a run was tried ten times, with doubling waits, and failed saying that
    every try lost a race."""
    workflow = {"return_": answers_stale, "guard": guards_stale, "called handler": calls_stale}[answers]
    clock = FakeClock(T0)
    app = app_on([f, calls], clock=clock)
    run_id = app.start_workflow(workflow, Join("eve@example.org", "mine"), user=user)
    _tries_seen.clear()
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert _failed(app, run_id, "version_conflict") == "the doc changed since you read it"
    assert _tries_seen == [1]
    clock.advance(minutes=5)
    assert app.run_worker(once=True)["resumed"] == 0


def test_a_write_that_lost_a_unique_race_goes_on_when_the_value_is_free_again(app_on: AppOn, user: User) -> None:
    """The segment read no member; another writer took the email before the segment's
    create (here in the segment's transaction, undone with the lost try): tried again,
    the email is free, and the run completes, its error cleared."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(join_or_rename, Join("bob@example.org", "mine"), user=user)

    def take_it(c: Any) -> None:
        c.db.execute(
            sa.insert(WfsMember.__table__).values(
                id=uuid.uuid4(),
                tenant_id=c.user.tenant_id,
                version=1,
                created_at=c.now,
                updated_at=c.now,
                email="bob@example.org",
                name="theirs",
            )
        )

    racer.append(take_it)
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert _tried_again(app, clock, run_id, "unique_violation", 1).error["taken"] == "WfsMember (email)"
    clock.advance(seconds=2)
    assert app.run_worker(once=True)["resumed"] == 1
    run = app.get_run(run_id)
    assert run is not None and (run.status, run.error, run.wake_at) == ("completed", None, None), run
    assert _names(app) == [("bob@example.org", "mine")]


@pytest.mark.postgres
def test_a_write_racing_a_real_handler_on_a_unique_value_is_tried_again_and_renames_what_it_finds(
    fresh_postgres_url: str, make_user: Callable[..., User]
) -> None:
    """Two writers at once: a handler in another connection takes the email (and commits)
    between the segment's read (no member) and its create.  The segment's second try
    reads the member and renames it; the run completes."""
    user = make_user()
    clock = FakeClock(T0)
    app = App([f], database_url=fresh_postgres_url, clock=clock)

    def take_it_in_another_connection(c: Any) -> None:
        done: list[object] = []
        join = Join("cyd@example.org", "theirs")
        thread = threading.Thread(target=lambda: done.append(app.dispatch(make_member, join, user=user)))
        thread.start()
        thread.join(30)
        assert done == [Ok(None)]

    try:
        app.create_all()
        run_id = app.start_workflow(join_or_rename, Join("cyd@example.org", "mine"), user=user)
        racer.append(take_it_in_another_connection)
        clock.advance(minutes=1)
        assert app.run_worker(once=True)["resumed"] == 1
        _tried_again(app, clock, run_id, "unique_violation", 1)
        assert _names(app) == [("cyd@example.org", "theirs")]
        clock.advance(seconds=2)
        assert app.run_worker(once=True)["resumed"] == 1
        run = app.get_run(run_id)
        assert run is not None and (run.status, run.error) == ("completed", None), run
        assert run.steps["absent"] is False and run.steps["renamed"].version == 2
        assert _names(app) == [("cyd@example.org", "mine")]
    finally:
        app.dispose()


@pytest.mark.parametrize("holder", ["same tenant", "another tenant"])
def test_a_create_of_a_taken_id_fails_the_run_at_its_second_try(
    app_on: AppOn, make_user: Callable[..., User], holder: str
) -> None:
    """Before, the worker tried the segment every second, for good."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    user = make_user()
    doc = uuid.uuid4()
    run_id = app.start_workflow(create_later, Doc(doc, "mine"), user=user)
    taker = user if holder == "same tenant" else make_user()
    assert app.dispatch(make_doc, Doc(doc, "theirs"), user=taker) == Ok(None)
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    first = _tried_again(app, clock, run_id, "version_conflict", 1)
    assert first.error["taken"] == str(doc)
    assert first.path == "@wait"  # where it is tried again from
    clock.advance(seconds=2)
    assert app.run_worker(once=True)["resumed"] == 1
    message = _failed(app, run_id, "version_conflict")
    assert message.endswith(
        "(the segment from step @wait was tried again after the id was taken and creates it again, as every try would)"
    ), message
    assert str(doc) in message
    clock.advance(minutes=5)
    assert app.run_worker(once=True)["resumed"] == 0
    assert _titles(app) == ["theirs"]


def test_a_create_that_lost_a_race_goes_on_when_the_id_is_free_again(app_on: AppOn, user: User) -> None:
    """The segment read no doc; another writer created it before the segment's create
    (here in the segment's transaction, so it is undone with the lost try): tried again,
    the segment reads anew, the id is free, and the run completes, its error cleared."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    doc = uuid.uuid4()
    run_id = app.start_workflow(create_or_rename, Doc(doc, "mine"), user=user)

    def create_behind_its_back(c: Any) -> None:
        aggregate = c.registry.aggregate_type(WfsDoc)
        append(
            c.db,
            stream_id=doc,
            aggregate_type=aggregate,
            stream_version=1,
            type=f"{aggregate}.created",
            payload={},
            tenant_id=c.user.tenant_id,
            user_id=None,
            correlation_id=None,
            occurred_at=c.now,
        )

    racer.append(create_behind_its_back)
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["resumed"] == 1
    _tried_again(app, clock, run_id, "version_conflict", 1)
    clock.advance(seconds=2)
    assert app.run_worker(once=True)["resumed"] == 1
    run = app.get_run(run_id)
    assert run is not None and (run.status, run.error, run.wake_at) == ("completed", None, None), run
    assert _titles(app) == ["mine"]


@pytest.mark.postgres
def test_a_create_racing_a_real_handler_is_tried_again_and_renames_what_it_finds(
    fresh_postgres_url: str, make_user: Callable[..., User]
) -> None:
    """Two writers at once: a handler in another connection creates the doc (and commits)
    between the segment's read (no doc) and its create.  The segment's second try reads
    the doc and renames it; the run completes."""
    user = make_user()
    clock = FakeClock(T0)
    app = App([f], database_url=fresh_postgres_url, clock=clock)
    doc = uuid.uuid4()

    def create_in_another_connection(c: Any) -> None:
        done: list[object] = []
        thread = threading.Thread(target=lambda: done.append(app.dispatch(make_doc, Doc(doc, "theirs"), user=user)))
        thread.start()
        thread.join(30)
        assert done == [Ok(None)]

    try:
        app.create_all()
        run_id = app.start_workflow(create_or_rename, Doc(doc, "mine"), user=user)
        racer.append(create_in_another_connection)
        clock.advance(minutes=1)
        assert app.run_worker(once=True)["resumed"] == 1
        assert "taken" in _tried_again(app, clock, run_id, "version_conflict", 1).error
        assert _titles(app) == ["theirs"]
        clock.advance(seconds=2)
        assert app.run_worker(once=True)["resumed"] == 1
        run = app.get_run(run_id)
        assert run is not None and (run.status, run.error) == ("completed", None), run
        assert run.steps["absent"] is False and run.steps["renamed"].version == 2
        assert _titles(app) == ["mine"]
    finally:
        app.dispose()


@pytest.mark.parametrize("flow", [rename_in_retry, refused_in_retry], ids=["version_conflict", "unavailable"])
def test_a_retry_whose_attempts_are_used_fails_its_run(app_on: AppOn, user: User, flow: Any) -> None:
    """Its last attempt's error fails the run, as ``times=2`` says: before, a worker took
    a lost race (or ``unavailable``) there for its own to try again, and tried the last
    attempt every second, for good."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    doc = uuid.uuid4()
    assert app.dispatch(make_doc, Doc(doc, "first"), user=user) == Ok(None)
    always.append(_rename_behind_its_back)
    run_id = app.start_workflow(flow, Doc(doc, "second"), user=user)
    run = app.get_run(run_id)
    code = "version_conflict" if flow is rename_in_retry else "unavailable"
    # Waiting for its second attempt, the run says why: the first attempt's error.
    assert run is not None and run.error is not None, run
    assert (run.status, run.path, run.error["code"], run.error["attempts"]) == ("suspended", "@retry/#2", code, "1")
    clock.advance(seconds=10)
    assert app.run_worker(once=True)["resumed"] == 1
    message = _failed(app, run_id, code)
    assert "tried" not in message  # the retry's own error, as its attempt failed
    clock.advance(minutes=5)
    assert app.run_worker(once=True)["resumed"] == 0
    assert _titles(app) == ["first"]


@pytest.mark.parametrize("flow", [refused_later, create_or_rename], ids=["unavailable", "version_conflict"])
def test_a_segment_that_never_gets_through_fails_its_run_after_its_tries(app_on: AppOn, user: User, flow: Any) -> None:
    """A step the database refuses at every try, or a segment that loses its race at
    every try (another writer always faster): tried with a wait that doubles, then the
    run fails saying how often.  Meanwhile operators see it suspended, with the error
    and the tries (``get_run``, ``runs``).  Before, it was tried every second, for good,
    listed as suspended without an error."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    doc = uuid.uuid4()
    code = "unavailable" if flow is refused_later else "version_conflict"
    if flow is create_or_rename:
        ok_data(app.dispatch(make_doc, Doc(doc, "theirs"), user=user))
        always.append(_rename_behind_its_back)
    run_id = app.start_workflow(flow, Doc(doc, "mine"), user=user)
    _tried_to_the_end(app, clock, run_id, code)


@pytest.mark.postgres
def test_a_statement_past_statement_timeout_at_every_try_fails_its_run_after_its_tries(
    fresh_postgres_url: str, user: User
) -> None:
    """An operator's ``statement_timeout`` that a step's statement always runs past:
    before, the run was tried every second, for good (docs/operations.md said to size the
    timeout for the slowest step, or else)."""
    clock = FakeClock(T0)
    app = App([f], database_url=fresh_postgres_url, clock=clock)
    try:
        app.create_all()
        run_id = app.start_workflow(too_slow, Doc(uuid.uuid4(), "slow"), user=user)
        message = _tried_to_the_end(app, clock, run_id, "unavailable")
        assert message.startswith('step x compute "x": the database is busy or unreachable, try again'), message
    finally:
        app.dispose()


def _tried_to_the_end(app: App, clock: FakeClock, run_id: uuid.UUID, code: str) -> str:
    """Run the worker at each try of the run, which never gets through, checking what an
    operator sees meanwhile; the message the run fails with at its last try."""
    clock.advance(minutes=1)
    bound = _bound(code)
    for tries in range(1, bound):
        assert app.run_worker(once=True)["resumed"] == 1
        run = _tried_again(app, clock, run_id, code, tries)
        assert run.path == "@wait"
        (listed,) = app.runs(status="suspended")
        assert listed.error == run.error
        assert run.wake_at is not None
        clock.now = run.wake_at
    assert app.run_worker(once=True)["resumed"] == 1
    message = _failed(app, run_id, code)
    assert message.endswith(
        f"(the segment from step @wait was tried {bound} times, and every try lost a race or was refused "
        "for now; start the run again, or give the contended steps a retry(...) with the attempts they need)"
    ), message
    clock.advance(hours=1)
    assert app.run_worker(once=True)["resumed"] == 0
    return message
