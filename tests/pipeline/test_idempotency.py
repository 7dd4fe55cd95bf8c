"""Idempotency keys (issue 14.2): ``dispatch(..., idempotency_key=)`` stores the first
result with the handler's writes and answers repeats with it; ``start_workflow(..., key=)``
starts at most one run per (workflow, tenant, key).  Both databases; the races with
processes (tests/_idem_race.py)."""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _idem_race import create_tables, effect_count, make_app
from _sql_log import statements
from _support import holding_itself, nested_lists
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, BootError, Entity, Failure, Feature, Ok, User, fail, manual, ok
from kumiko_typed._idempotency import fingerprint
from kumiko_typed._limits import MAX_DEPTH
from kumiko_typed._tables import idempotency_keys, workflow_runs
from kumiko_typed.testing import FakeClock

TESTS = Path(__file__).resolve().parents[1]
AppOn = Callable[..., App]


@attrs.frozen
class Note:
    text: str


@attrs.frozen
class Unregistered:
    n: int


class Counted:
    """A feature whose handlers count their runs (in this process) and echo typed values."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.crash_next = False
        f = Feature("idem")
        self.feature = f

        def run(c: Any) -> int:
            self.runs.append(c.payload.text)
            if self.crash_next:
                self.crash_next = False
                raise RuntimeError("boom")
            return len(self.runs)

        self.add = f.write_handler(
            "add",
            f.pipeline(Note)
            .compute("n", run)
            .guard(
                lambda c: c.payload.text != "bad",
                otherwise=lambda c: fail("unprocessable", "bad note", {"text": c.payload.text, "at": [1, 2]}),
            )
            .return_(lambda c: ok((c.payload, Decimal("1.50"), uuid.UUID(int=c.steps["n"]), c.steps["n"]))),
        )
        self.other = f.write_handler("other", f.pipeline(Note).compute("n", run).return_(lambda c: ok(c.steps["n"])))
        self.unstorable = f.write_handler(
            "unstorable", f.pipeline(Note).compute("n", run).return_(lambda c: ok(Unregistered(c.steps["n"])))
        )


@pytest.fixture
def counted() -> Counted:
    return Counted()


def _tenant_user() -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def _keys(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(idempotency_keys)) or 0)


# --- dispatch ---------------------------------------------------------------------------


def test_a_repeat_returns_the_stored_typed_result_without_running(app_on: AppOn, counted: Counted) -> None:
    app = app_on([counted.feature])
    user = _tenant_user()
    first = app.dispatch(counted.add, Note("a"), user=user, idempotency_key="order-1")
    again = app.dispatch(counted.add, Note("a"), user=user, idempotency_key="order-1")
    assert first == Ok((Note("a"), Decimal("1.50"), uuid.UUID(int=1), 1))
    assert again == first and type(again.data[0]) is Note and type(again.data[1]) is Decimal
    assert counted.runs == ["a"]
    # Without a key, every call runs.
    assert app.dispatch(counted.add, Note("a"), user=user) == Ok((Note("a"), Decimal("1.50"), uuid.UUID(int=2), 2))
    assert counted.runs == ["a", "a"]


def test_the_same_key_with_another_payload_is_a_conflict(app_on: AppOn, counted: Counted) -> None:
    app = app_on([counted.feature])
    user = _tenant_user()
    assert isinstance(app.dispatch(counted.add, Note("a"), user=user, idempotency_key="k"), Ok)
    conflict = app.dispatch(counted.add, Note("b"), user=user, idempotency_key="k")
    assert isinstance(conflict, Failure) and conflict.code == "idempotency_conflict"
    assert conflict.http_status == 409 and "'k'" in conflict.message and "idem:add" in conflict.message
    assert counted.runs == ["a"]
    # The stored result still answers the original payload.
    assert app.dispatch(counted.add, Note("a"), user=user, idempotency_key="k") == Ok(
        (Note("a"), Decimal("1.50"), uuid.UUID(int=1), 1)
    )


def test_keys_are_scoped_per_tenant_and_handler(app_on: AppOn, counted: Counted) -> None:
    app = app_on([counted.feature])
    alice, bob = _tenant_user(), _tenant_user()
    colleague = User(id=uuid.uuid4(), tenant_id=alice.tenant_id)
    assert app.dispatch(counted.other, Note("a"), user=alice, idempotency_key="k") == Ok(1)
    assert app.dispatch(counted.other, Note("a"), user=bob, idempotency_key="k") == Ok(2)
    assert app.dispatch(counted.add, Note("a"), user=alice, idempotency_key="k") == Ok(
        (Note("a"), Decimal("1.50"), uuid.UUID(int=3), 3)
    )
    # Another user of the same tenant repeats the tenant's request.
    assert app.dispatch(counted.other, Note("a"), user=colleague, idempotency_key="k") == Ok(1)
    assert counted.runs == ["a", "a", "a"]
    assert _keys(app) == 3


def test_a_business_failure_is_stored_and_its_writes_rolled_back(app_on: AppOn, counted: Counted) -> None:
    app = app_on([counted.feature])
    user = _tenant_user()
    first = app.dispatch(counted.add, Note("bad"), user=user, idempotency_key="k")
    assert first == Failure("unprocessable", "bad note", {"text": "bad", "at": [1, 2]})
    assert app.dispatch(counted.add, Note("bad"), user=user, idempotency_key="k") == first
    assert counted.runs == ["bad"]
    assert _keys(app) == 1


def test_an_internal_error_is_not_stored_and_a_retry_runs(app_on: AppOn, counted: Counted) -> None:
    app = app_on([counted.feature])
    user = _tenant_user()
    counted.crash_next = True
    crashed = app.dispatch(counted.other, Note("a"), user=user, idempotency_key="k")
    assert isinstance(crashed, Failure) and crashed.code == "internal_error"
    assert _keys(app) == 0
    assert app.dispatch(counted.other, Note("a"), user=user, idempotency_key="k") == Ok(2)
    assert app.dispatch(counted.other, Note("a"), user=user, idempotency_key="k") == Ok(2)
    assert counted.runs == ["a", "a"]


class IdemTally(Entity):
    __tablename__ = "idem_tally"
    count: Mapped[int] = mapped_column(default=0)


@attrs.frozen
class Tallied:
    by: int


@attrs.frozen
class Tally:
    id: uuid.UUID
    version: int


class Tallies:
    """An aggregate whose writes can lose to another writer: ``bump`` reads it and appends
    the next version (``before_append`` runs between the two); ``set_count`` updates it at
    the version the caller read."""

    def __init__(self) -> None:
        self.runs = 0
        self.before_append: Callable[[uuid.UUID], object] = lambda _id: None
        f = Feature("idem_tally")
        f.entity(IdemTally)
        f.event(Tallied, name="tallied")
        f.projector(IdemTally, Tallied)(self._tallied)
        self.feature = f

        def run(c: Any) -> int:
            self.runs += 1
            self.before_append(c.payload.id)
            return self.runs

        self.new = f.write_handler(
            "new",
            f.pipeline(Note).create("t", IdemTally, data=lambda c: IdemTally()).return_(lambda c: ok(c.steps["t"].id)),
        )
        self.bump = f.write_handler(
            "bump",
            f.pipeline(Tally)
            .get_one("t", lambda c: sa.select(IdemTally).where(IdemTally.id == c.payload.id))
            .compute("n", run)
            .append_event(IdemTally, id=lambda c: c.payload.id, event=lambda c: Tallied(1))
            .return_(lambda c: ok(c.steps["t"].count)),  # the projector has run on it
        )
        self.set_count = f.write_handler(
            "set",
            f.pipeline(Tally)
            .compute("n", run)
            .update(
                "t",
                IdemTally,
                id=lambda c: c.payload.id,
                changes=lambda c: {"count": 100},
                version=lambda c: c.payload.version,
            )
            .return_(lambda c: ok(c.steps["t"].version)),
        )

    @staticmethod
    def _tallied(row: IdemTally, event: Tallied) -> None:
        row.count += event.by


def test_a_version_conflict_is_not_stored_and_the_key_stays_free(app_on: AppOn) -> None:
    """A version conflict says the aggregate moved on since it was read, not that the
    request is wrong: nothing was written and the same call may succeed.  Stored, it
    answered every repeat of the key with the conflict for the whole retention."""
    tallies = Tallies()
    app = app_on([tallies.feature])
    user = _tenant_user()
    tid = app.dispatch(tallies.new, Note("t"), user=user)
    assert isinstance(tid, Ok)
    assert app.dispatch(tallies.bump, Tally(tid.data, 0), user=user) == Ok(1)  # now at version 2
    stale = app.dispatch(tallies.set_count, Tally(tid.data, 1), user=user, idempotency_key="k")
    assert isinstance(stale, Failure) and stale.code == "version_conflict"
    assert _keys(app) == 0
    again = app.dispatch(tallies.set_count, Tally(tid.data, 1), user=user, idempotency_key="k")
    assert again == stale and tallies.runs == 3  # ran again (the bump, then the stale set twice)
    # The key answered nothing: the call with the version the client read again runs under it.
    assert app.dispatch(tallies.set_count, Tally(tid.data, 2), user=user, idempotency_key="k") == Ok(3)
    assert app.dispatch(tallies.set_count, Tally(tid.data, 2), user=user, idempotency_key="k") == Ok(3)
    assert tallies.runs == 4 and _keys(app) == 1


def test_a_version_conflict_an_earlier_release_stored_lets_the_repeat_run(app_on: AppOn) -> None:
    """Releases before this one stored a version_conflict under its key (the row below is
    one, the table unchanged since).  After the upgrade, the repeat it asks for answered the
    stored conflict for the rest of the retention, and the retry with the version read
    again was an idempotency_conflict: both run, as under this release."""
    tallies = Tallies()
    app = app_on([tallies.feature])
    user = _tenant_user()
    tid = app.dispatch(tallies.new, Note("t"), user=user)
    assert isinstance(tid, Ok)
    assert app.dispatch(tallies.bump, Tally(tid.data, 0), user=user) == Ok(1)  # now at version 2

    def stored_by_the_earlier_release(key: str, payload: Tally) -> None:
        conflict = ["version_conflict", "IdemTally was changed by someone else", {}]
        with app.engine.begin() as conn:  # the table is as that release made it
            conn.execute(
                sa.insert(idempotency_keys).values(
                    tenant_id=user.tenant_id,
                    handler="idem_tally:set",
                    key=key,
                    fingerprint=fingerprint(app.codec, payload),
                    result={"failure": conflict},
                    created_at=app.clock(),
                )
            )

    stored_by_the_earlier_release("same", Tally(tid.data, 1))
    again = app.dispatch(tallies.set_count, Tally(tid.data, 1), user=user, idempotency_key="same")
    assert isinstance(again, Failure) and again.code == "version_conflict" and tallies.runs == 2  # ran
    stored_by_the_earlier_release("read-again", Tally(tid.data, 1))
    assert app.dispatch(tallies.set_count, Tally(tid.data, 2), user=user, idempotency_key="read-again") == Ok(3)
    assert app.dispatch(tallies.set_count, Tally(tid.data, 2), user=user, idempotency_key="read-again") == Ok(3)
    assert tallies.runs == 3  # the repeat was answered with what the run stored
    again = app.dispatch(tallies.set_count, Tally(tid.data, 1), user=user, idempotency_key="same")
    assert isinstance(again, Failure) and again.code == "version_conflict" and tallies.runs == 4  # ran again


@pytest.mark.postgres
def test_a_keyed_write_that_lost_a_race_succeeds_when_repeated_with_its_key(fresh_postgres_url: str) -> None:
    """The client does what a version_conflict asks (try again) with the key that makes
    trying again safe: the repeat reads the aggregate again and goes through.  Before,
    the stored conflict answered it, and every later repeat, without running."""
    tallies = Tallies()
    app = App([tallies.feature], database_url=fresh_postgres_url)
    try:
        app.create_all()
        user = _tenant_user()
        tid = app.dispatch(tallies.new, Note("t"), user=user)
        assert isinstance(tid, Ok)
        overtaken: list[object] = []

        def other_writer(aggregate: uuid.UUID) -> None:
            # Another client's write of the same aggregate commits between this one's read
            # and its append (it does not wait: the read took no lock).
            tallies.before_append = lambda _id: None
            thread = threading.Thread(
                target=lambda: overtaken.append(app.dispatch(tallies.bump, Tally(aggregate, 0), user=user))
            )
            thread.start()
            thread.join(60)

        tallies.before_append = other_writer
        lost = app.dispatch(tallies.bump, Tally(tid.data, 0), user=user, idempotency_key="pay-1")
        assert isinstance(lost, Failure) and lost.code == "version_conflict", lost
        assert overtaken == [Ok(1)]
        assert app.dispatch(tallies.bump, Tally(tid.data, 0), user=user, idempotency_key="pay-1") == Ok(2)
        assert app.dispatch(tallies.bump, Tally(tid.data, 0), user=user, idempotency_key="pay-1") == Ok(2)
        assert tallies.runs == 3  # the lost call, the other writer, the repeat; not the replay
        stream = app.read_stream(IdemTally, tid.data, user=user)
        assert isinstance(stream, Ok) and [e.version for e in stream.data] == [1, 2, 3]
    finally:
        app.dispose()


def test_a_result_that_cannot_be_stored_rolls_back_and_keeps_the_key_free(app_on: AppOn, counted: Counted) -> None:
    app = app_on([counted.feature])
    user = _tenant_user()
    result = app.dispatch(counted.unstorable, Note("a"), user=user, idempotency_key="k")
    assert isinstance(result, Failure) and result.code == "unstorable_state"
    assert "Unregistered" in result.message and "idem:unstorable" in result.message
    assert _keys(app) == 0
    # Without a key the same handler is fine: only storing needs the codec.
    assert app.dispatch(counted.unstorable, Note("a"), user=user) == Ok(Unregistered(2))


class IdemQuoted(Entity):
    __tablename__ = "idem_quoted"
    text: Mapped[str] = mapped_column(sa.String(40))


@attrs.frozen
class Quote:
    """A handler's result class of its own: storable only once ``value_types`` names it."""

    text: str
    price: Decimal


def _quoting(value_types: list[type[Any]]) -> tuple[Feature[Any], Any]:
    f = Feature("idem_quote", requires=["mail.send"], value_types=value_types)
    f.entity(IdemQuoted)
    quote = f.write_handler(
        "quote",
        f.pipeline(Note)
        .create("row", IdemQuoted, data=lambda c: IdemQuoted(text=c.payload.text))
        .send_mail(to="desk@example.org", subject="quoted", body="a quote")
        .return_(lambda c: ok(Quote(c.payload.text, Decimal("9.50")))),
    )
    return f, quote


def _rows(app: App) -> dict[str, int]:
    with app.engine.connect() as conn:
        return {t.name: int(conn.scalar(sa.select(sa.func.count()).select_from(t)) or 0) for t in app.tables()}


def test_a_result_class_not_in_value_types_fails_the_keyed_call_naming_the_fix_and_writes_nothing(
    app_on: AppOn,
) -> None:
    """A handler's result type is mypy's inference (its return_ is a lambda), unknown when
    the App boots, and any handler may be dispatched with or without a key: so an attrs
    class that ``value_types`` does not name shows at the first keyed call.  That call is
    a Failure naming the handler, the class and the fix, and none of its writes — the row,
    its event, the outbox's mail — nor the key commits (no half-write), on both databases."""
    f, quote = _quoting([])
    app = app_on([f])
    user = _tenant_user()
    result = app.dispatch(quote, Note("a"), user=user, idempotency_key="k")
    assert isinstance(result, Failure) and result.code == "unstorable_state", result
    assert result.message.startswith(
        f"handler idem_quote:quote: the result cannot be stored for its key: a {__name__}.Quote cannot be stored"
    ), result.message
    assert "Feature(value_types=[...]) or App(value_types=[...])" in result.message
    assert set(_rows(app).values()) == {0}
    # Not stored: the repeat runs (and fails) again.
    assert app.dispatch(quote, Note("a"), user=user, idempotency_key="k") == result
    assert set(_rows(app).values()) == {0}


def test_a_result_class_in_value_types_answers_repeats_decoded(app_on: AppOn) -> None:
    f, quote = _quoting([Quote])
    app = app_on([f])
    user = _tenant_user()
    first = app.dispatch(quote, Note("a"), user=user, idempotency_key="k")
    assert first == Ok(Quote("a", Decimal("9.50")))
    assert app.dispatch(quote, Note("a"), user=user, idempotency_key="k") == first
    rows = _rows(app)
    assert (rows["idem_quoted"], rows["kumiko_outbox"], rows["kumiko_idempotency_keys"]) == (1, 1, 1)


def test_a_repeat_whose_stored_result_class_a_deploy_retyped_answers_unstorable_state_naming_the_field(
    app_on: AppOn,
) -> None:
    """A later release makes ``Quote.price`` text: the result stored as a ``Decimal`` does
    not read back as what the class says now (``__init__`` took it, attrs checks no
    types), so the repeat answers ``unstorable_state`` naming the field and both types,
    never the value, and runs nothing; the release that stored it still answers it."""
    f, quote = _quoting([Quote])
    app = app_on([f])
    user = _tenant_user()
    first = app.dispatch(quote, Note("a"), user=user, idempotency_key="k")
    retyped = attrs.make_class("Quote", {"text": attrs.field(type=str), "price": attrs.field(type=str)}, frozen=True)
    retyped.__module__, retyped.__qualname__ = __name__, "Quote"
    later, later_quote = _quoting([retyped])
    repeat = app_on([later]).dispatch(later_quote, Note("a"), user=user, idempotency_key="k")
    assert isinstance(repeat, Failure) and repeat.code == "unstorable_state", repeat
    assert repeat.message == (
        "the stored result of idempotency key 'k' of handler idem_quote:quote cannot be read: "
        f"stored {__name__}.Quote cannot be rebuilt: its 'price' holds a Decimal, and Quote now says str"
    )
    assert _rows(app)["idem_quoted"] == 1
    assert app.dispatch(quote, Note("a"), user=user, idempotency_key="k") == first


def test_a_key_expires_after_the_retention(app_on: AppOn, counted: Counted, now: Any) -> None:
    clock = FakeClock(now)
    app = app_on([counted.feature], clock=clock, idempotency_retention=timedelta(hours=1))
    user = _tenant_user()
    assert app.dispatch(counted.other, Note("a"), user=user, idempotency_key="k") == Ok(1)
    clock.advance(minutes=59)
    assert app.dispatch(counted.other, Note("a"), user=user, idempotency_key="k") == Ok(1)
    assert isinstance(app.dispatch(counted.other, Note("b"), user=user, idempotency_key="k"), Failure)
    clock.advance(minutes=1)
    # Expired: the key is free again, for any payload; the new result is stored afresh.
    assert app.dispatch(counted.other, Note("b"), user=user, idempotency_key="k") == Ok(2)
    assert app.dispatch(counted.other, Note("b"), user=user, idempotency_key="k") == Ok(2)
    assert counted.runs == ["a", "b"]
    assert _keys(app) == 1


def test_purging_deletes_only_expired_keys_in_batches(app_on: AppOn, counted: Counted, now: Any) -> None:
    """Keys of every tenant and handler older than the retention go, in batches smaller than
    their number; the live ones keep answering; a second purge finds nothing."""
    clock = FakeClock(now)
    app = app_on([counted.feature], clock=clock, idempotency_retention=timedelta(hours=1))
    users = [_tenant_user(), _tenant_user()]
    for i in range(5):
        for u in users:
            assert isinstance(app.dispatch(counted.other, Note("old"), user=u, idempotency_key=f"old-{i}"), Ok)
    clock.advance(minutes=30)
    live = app.dispatch(counted.add, Note("live"), user=users[0], idempotency_key="live")
    clock.advance(minutes=30)  # the ten old keys are exactly one hour old: expired
    assert app.purge_idempotency_keys(batch=3) == 10
    assert _keys(app) == 1
    assert app.purge_idempotency_keys() == 0
    runs = len(counted.runs)
    assert app.dispatch(counted.add, Note("live"), user=users[0], idempotency_key="live") == live
    assert len(counted.runs) == runs  # answered from the kept key, not run again
    with pytest.raises(ValueError, match="batch must be a positive int"):
        app.purge_idempotency_keys(batch=0)


@pytest.mark.parametrize("retention", [timedelta.max, timedelta(days=800_000)], ids=["max", "past-year-1"])
def test_a_retention_longer_than_the_calendar_keeps_keys_for_good(
    app_on: AppOn, counted: Counted, retention: timedelta
) -> None:
    """``timedelta.max`` reads as "keep keys for good".  Before, ``now - retention``
    overflowed: every keyed dispatch was an ``internal_error`` and a purge raised."""
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=timezone(timedelta(hours=-5))))
    app = app_on([counted.feature], clock=clock, idempotency_retention=retention)
    user = _tenant_user()
    assert app.dispatch(counted.other, Note("a"), user=user, idempotency_key="k") == Ok(1)
    clock.advance(days=3650)
    assert app.dispatch(counted.other, Note("a"), user=user, idempotency_key="k") == Ok(1)
    assert app.purge_idempotency_keys() == 0
    assert counted.runs == ["a"]
    assert _keys(app) == 1


def test_dispatch_json_takes_a_key_too(app_on: AppOn, counted: Counted) -> None:
    app = app_on([counted.feature])
    user = _tenant_user()
    assert app.dispatch_json("idem:other", {"text": "a"}, user=user, idempotency_key="k") == Ok(1)
    assert app.dispatch_json("idem:other", {"text": "a"}, user=user, idempotency_key="k") == Ok(1)
    # The key belongs to the handler, whichever entry point: dispatch repeats it too.
    assert app.dispatch(counted.other, Note("a"), user=user, idempotency_key="k") == Ok(1)
    conflict = app.dispatch_json("idem:other", {"text": "b"}, user=user, idempotency_key="k")
    assert isinstance(conflict, Failure) and conflict.code == "idempotency_conflict"
    assert counted.runs == ["a"]


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


@attrs.frozen
class Tagged:
    """A payload of the kinds docs/http.md lists beyond plain JSON: an enum, sets, a tuple."""

    size: Size
    tags: frozenset[str]
    seats: set[int]
    pair: tuple[int, str]


TAGGED = {"size": "s", "tags": ["b", "a"], "seats": [2, 1], "pair": [1, "x"]}


def test_payloads_with_enums_and_sets_take_a_key_and_get_their_typed_result_back(app_on: AppOn) -> None:
    """Before: every keyed call of such a payload was a validation_error ("a Size cannot
    be stored"), over HTTP with an Idempotency-Key header too."""
    runs: list[Tagged] = []
    f = Feature("idem_sets")
    tagged = f.write_handler(
        "tagged",
        f.pipeline(Tagged).compute("n", lambda c: runs.append(c.payload)).return_(lambda c: ok(c.payload)),
    )
    app = app_on([f])
    user = _tenant_user()
    expected = Tagged(Size.SMALL, frozenset({"a", "b"}), {1, 2}, (1, "x"))
    first = app.dispatch_json(tagged.name, TAGGED, user=user, idempotency_key="k")
    again = app.dispatch(tagged, expected, user=user, idempotency_key="k")
    assert first == again == Ok(expected)
    assert isinstance(again, Ok) and type(again.data.size) is Size and type(again.data.tags) is frozenset
    assert type(again.data.seats) is set and runs == [expected]
    other = app.dispatch_json(tagged.name, {**TAGGED, "size": "l"}, user=user, idempotency_key="k")
    assert isinstance(other, Failure) and other.code == "idempotency_conflict"


_SEEDED = """
import sys, uuid, attrs
from kumiko_typed import App, Feature, User, ok
@attrs.frozen
class Tags:
    tags: frozenset[str]
f = Feature("seeded")
h = f.write_handler("h", f.pipeline(Tags).return_(lambda c: ok(sorted(c.payload.tags))))
app = App([f], database_url=sys.argv[1])
app.create_all()
user = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=2))
print(app.dispatch_json("seeded:h", {"tags": [f"t{i}" for i in range(40)]}, user=user, idempotency_key="k"))
"""


def test_a_set_in_the_payload_has_the_same_fingerprint_in_every_process(tmp_path: Path) -> None:
    """Two processes iterate one set in different orders (string hashes are seeded per
    process): the repeat must still be the same request, not an idempotency_conflict."""
    url = f"sqlite:///{tmp_path / 'seeded.sqlite3'}"
    answers = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _SEEDED, url], check=False, capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == 0, done.stderr
        answers.append(done.stdout.strip())
    assert answers[0] == answers[1] and answers[0].startswith("Ok("), answers


def test_a_number_too_long_to_write_is_refused_before_the_key_is_claimed(app_on: AppOn) -> None:
    """Before: the fingerprint's JSON encoder raised ValueError out of dispatch itself."""
    f = Feature("idem_long")
    echo = f.write_handler("echo", f.pipeline(Unregistered).return_(lambda c: ok(1)))
    app = app_on([f])
    user = _tenant_user()
    typed = app.dispatch(echo, Unregistered(10**5000), user=user, idempotency_key="k")
    assert isinstance(typed, Failure) and typed.code == "validation_error", typed
    assert "4300 digits" in typed.message and "INSERT" not in typed.message
    untyped = app.dispatch_json(echo.name, {"n": 10**5000}, user=user, idempotency_key="k")
    too_long = {"path": "$.n", "message": "must have at most 4300 digits"}
    assert isinstance(untyped, Failure) and untyped.details == [too_long]
    assert _keys(app) == 0
    assert app.dispatch(echo, Unregistered(10**4000), user=user, idempotency_key="k") == Ok(1)


@attrs.frozen
class Bag:
    items: list[Any]


@pytest.mark.parametrize("items", [holding_itself(), nested_lists(1000)], ids=["holding-itself", "nested-1000"])
def test_a_value_nested_without_end_is_refused_before_the_key_is_claimed_and_unstorable_as_a_result(
    app_on: AppOn, items: list[Any]
) -> None:
    """Before: the codec recursed until RecursionError, which the fingerprint raised out of
    dispatch itself (a traceback to the caller) and the result's record turned into an
    internal_error; the same payload as JSON is refused past the depth limit, so is this."""
    f = Feature("idem_deep")
    runs: list[int] = []
    take = f.write_handler("take", f.pipeline(Bag).compute("n", lambda c: runs.append(1)).return_(lambda c: ok(1)))
    echo = f.write_handler("echo", f.pipeline(Note).return_(lambda c: ok(items)))
    app = app_on([f])
    user = _tenant_user()
    deep = f"a value nested deeper than {MAX_DEPTH} levels cannot be stored (does it hold itself?)"

    refused = app.dispatch(take, Bag(items), user=user, idempotency_key="k")
    message = f"the payload cannot be stored for an idempotency key: {deep}"
    assert refused == Failure("validation_error", message, [{"path": "$", "message": message}])
    assert runs == [] and _keys(app) == 0
    unstorable = app.dispatch(echo, Note("a"), user=user, idempotency_key="k")
    assert unstorable == Failure(
        "unstorable_state", f"handler idem_deep:echo: the result cannot be stored for its key: {deep}"
    )
    assert _keys(app) == 0
    # At the limit (the payload's class is a level of its own) both are stored.
    assert app.dispatch(take, Bag(nested_lists(MAX_DEPTH - 1)), user=user, idempotency_key="k") == Ok(1)
    assert app.dispatch(take, Bag(nested_lists(MAX_DEPTH - 1)), user=user, idempotency_key="k") == Ok(1)
    assert runs == [1]


@pytest.mark.parametrize("key", ["", "x" * 256, "line\nbreak", 42, None])
def test_a_bad_key_is_a_validation_error_naming_it(make_app: AppOn, counted: Counted, key: object) -> None:
    app = make_app([counted.feature])
    user = _tenant_user()
    if key is None:  # the one value that means "no key"
        assert isinstance(app.dispatch(counted.other, Note("a"), user=user, idempotency_key=None), Ok)
        return
    for result in (
        app.dispatch(counted.other, Note("a"), user=user, idempotency_key=key),  # type: ignore[arg-type]
        app.dispatch_json("idem:other", {"text": "a"}, user=user, idempotency_key=key),  # type: ignore[arg-type]
    ):
        assert isinstance(result, Failure) and result.code == "validation_error"
        assert result.details == [{"path": "idempotency_key", "message": result.message}]
    assert counted.runs == []
    assert isinstance(app.dispatch(counted.other, Note("a"), user=user, idempotency_key="x" * 255), Ok)


def test_without_a_key_dispatch_sends_no_extra_statement(make_app: AppOn, counted: Counted) -> None:
    app = make_app([counted.feature])
    user = _tenant_user()
    with statements(app.engine) as plain:
        app.dispatch(counted.other, Note("a"), user=user)
    with statements(app.engine) as keyed:
        app.dispatch(counted.other, Note("a"), user=user, idempotency_key="k")
    assert not any("kumiko_idempotency_keys" in s for s in plain)
    assert len(keyed) > len(plain) and any("kumiko_idempotency_keys" in s for s in keyed)


# --- workflows --------------------------------------------------------------------------


class Booking:
    def __init__(self) -> None:
        self.feature = f = Feature("idem_wf")
        self.book = f.workflow(
            "book",
            trigger=manual(Note),
            pipeline=f.workflow_pipeline(Note).guard(
                lambda c: c.payload.text != "bad", otherwise=lambda c: fail("unprocessable", "bad booking")
            ),
        )


def test_a_keyed_start_starts_one_run_per_tenant_and_key(app_on: AppOn) -> None:
    booking = Booking()
    app = app_on([booking.feature])
    alice, bob = _tenant_user(), _tenant_user()
    first = app.start_workflow(booking.book, Note("a"), user=alice, key="booking-1")
    assert app.start_workflow(booking.book, Note("a"), user=alice, key="booking-1") == first
    assert app.start_workflow(booking.book, Note("other payload"), user=alice, key="booking-1") == first
    other_tenant = app.start_workflow(booking.book, Note("a"), user=bob, key="booking-1")
    other_key = app.start_workflow(booking.book, Note("a"), user=alice, key="booking-2")
    unkeyed = {app.start_workflow(booking.book, Note("a"), user=alice) for _ in range(2)}
    assert len({first, other_tenant, other_key, *unkeyed}) == 5
    runs = app.runs(booking.book)
    assert len(runs) == 5 and {r.status for r in runs} == {"completed"}


def test_a_keyed_start_whose_run_failed_returns_the_failed_run(app_on: AppOn) -> None:
    booking = Booking()
    app = app_on([booking.feature])
    user = _tenant_user()
    failed = app.start_workflow(booking.book, Note("bad"), user=user, key="k")
    info = app.get_run(failed)
    assert info is not None and info.status == "failed"
    assert app.start_workflow(booking.book, Note("bad"), user=user, key="k") == failed
    assert len(app.runs(booking.book)) == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there"])
def test_a_bad_start_key_is_refused(make_app: AppOn, key: str) -> None:
    booking = Booking()
    app = make_app([booking.feature])
    with pytest.raises(ValueError, match="idempotency key must be 1 to 255 printable characters"):
        app.start_workflow(booking.book, Note("a"), user=_tenant_user(), key=key)
    assert app.runs() == []


# --- races between processes ------------------------------------------------------------

RACERS = 4


def _race(url: str, mode: str, racers: list[subprocess.Popen[str]], run_log: Path) -> list[dict[str, Any]]:
    """Every racer's result; ``run_log`` gets a line per run of the racers' step."""
    for _ in range(RACERS):
        racers.append(
            subprocess.Popen(
                [sys.executable, str(TESTS / "_idem_race.py"), url, mode, "the-key", str(run_log)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=TESTS.parent,
            )
        )
    for proc in racers:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr
    for proc in racers:  # all at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in racers:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        line = next(line for line in out.splitlines() if line.startswith("result "))
        results.append(json.loads(line[len("result ") :]))
    return results


@pytest.mark.slow
def test_concurrent_keyed_dispatches_run_the_handler_once(
    db_url: str, racers: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    app = make_app(db_url)
    create_tables(app)
    try:
        results = _race(db_url, "dispatch", racers, tmp_path / "runs.log")
        assert results == [{"ok": 1}] * RACERS
        assert (tmp_path / "runs.log").read_text() == "ran\n"  # ran once, not only committed once
        assert effect_count(app) == 1 and _keys(app) == 1
    finally:
        app.dispose()


@pytest.mark.slow
def test_concurrent_keyed_starts_start_one_run(
    db_url: str, racers: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    app = make_app(db_url)
    create_tables(app)
    try:
        results = _race(db_url, "start", racers, tmp_path / "runs.log")
        assert (tmp_path / "runs.log").read_text() == "ran\n"
        assert len({r["run"] for r in results}) == 1
        with app.engine.connect() as conn:
            runs = conn.execute(sa.select(workflow_runs.c.run_id, workflow_runs.c.status)).all()
        assert [(str(r.run_id), r.status) for r in runs] == [(results[0]["run"], "completed")]
        assert effect_count(app) == 1
    finally:
        app.dispose()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("a\x00b", "must not contain NUL characters (U+0000)"),
        ({"deep": ["half \udfff"]}, "is not valid Unicode (it holds a lone surrogate)"),
        (Failure("unprocessable", "no \x00", None), "must not contain NUL characters (U+0000)"),
    ],
    ids=["nul", "surrogate", "failure"],
)
def test_a_result_either_database_refuses_is_unstorable_on_both(app_on: AppOn, value: object, problem: str) -> None:
    """Before: SQLite's JSON stored a NUL (and a lone surrogate) and answered repeats with
    it, while PostgreSQL's JSONB refused the same result: one input, two answers."""
    f = Feature("idem_nul")
    runs: list[int] = []
    h = f.write_handler(
        "nul",
        f.pipeline(Note)
        .compute("n", lambda c: runs.append(1) or len(runs))
        .return_(lambda c: value if isinstance(value, Failure) else ok(value)),
    )
    app = app_on([f])
    user = _tenant_user()
    result = app.dispatch(h, Note("a"), user=user, idempotency_key="k")
    assert isinstance(result, Failure) and result.code == "unstorable_state", result
    assert result.message == f"handler idem_nul:nul: the result cannot be stored for its key: a value in it {problem}"
    assert _keys(app) == 0  # nothing committed, the key stays free
    assert isinstance(app.dispatch(h, Note("a"), user=user, idempotency_key="k"), Failure)
    assert runs == [1, 1]


def test_a_retention_that_is_not_positive_is_a_boot_error(make_app: AppOn) -> None:
    with pytest.raises(BootError, match="idempotency_retention must be a positive timedelta"):
        make_app([Feature("f")], idempotency_retention=timedelta(0))
