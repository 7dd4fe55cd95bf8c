"""Hostile values through every way into the database give one answer on SQLite and
PostgreSQL: the same value stored and read back, or the same ``validation_error`` naming
the field, with nothing written and no SQL, parameters or driver in its message.

Values: text with NUL or a lone surrogate, 100 000 characters or none; NaN, infinities,
``-0.0``, floats past 2**53 and 1e16, integers at and past ±2**63 and 10**400; decimals of
many digits, ``-0.00``, NaN; naive and aware times at the ends of the calendar, dates,
times with and without a zone, durations; bytes, empty and nested containers, dicts keyed
by numbers, ``None``, tuples and enum members, a dict that looks like a type tag; enum
members, UUIDs, booleans.  Ways in: an entity's columns of every kind (create), an event's
``Any`` field (append_event), a
handler's payload and result (with and without an idempotency key), a query, a webhook's
body and headers, a mail, a workflow's state across a wait.

Before (the defects pinned by the focused tests below): a value of another kind than a
number or time column (a datetime in an ``Integer``, a number in a ``DateTime``, bytes, a
list, a UUID, an enum member) was an ``internal_error`` worded by each database's driver,
and was stored by one of them — SQLite kept bytes in an ``Integer`` column (read back as
bytes), PostgreSQL cast a datetime in a ``Time`` column to its time of day (and that
row's event could no longer be read); a time with a zone in a ``Time`` column lost its
zone on both (the event kept it); a webhook header given a float went out as ``1e+20``
and ``-0.0`` from SQLite, ``100000000000000000000`` and ``0.0`` from PostgreSQL; a JSON
column's ``None``/``True`` key was ``null``/``true`` in the row and ``None``/``True`` in its
event (and a webhook's body), so a rebuild rewrote the row; ``rebuild_projection(verify=True)``
reported every aware time in a naive ``DateTime`` column (and naive in an aware one) as
changed; a tuple key in an event's ``Any`` field was an ``internal_error``.
"""

from __future__ import annotations

import enum
import math
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, manual, ok
from kumiko_typed._tables import events, idempotency_keys, outbox, workflow_runs
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)
AppOn = Callable[..., App]


class Colour(enum.Enum):
    RED = "red"


class Rank(enum.IntEnum):
    FIRST = 1


class DeqThing(Entity):
    __tablename__ = "deq_thing"
    s: Mapped[str | None] = mapped_column(sa.String(200), default=None)
    t: Mapped[str | None] = mapped_column(sa.Text, default=None)
    i: Mapped[int | None] = mapped_column(sa.Integer, default=None)
    b: Mapped[int | None] = mapped_column(sa.BigInteger, default=None)
    f: Mapped[float | None] = mapped_column(sa.Float, default=None)
    n: Mapped[Decimal | None] = mapped_column(sa.Numeric(30, 10), default=None)
    d: Mapped[datetime | None] = mapped_column(sa.DateTime, default=None)
    dz: Mapped[datetime | None] = mapped_column(sa.DateTime(timezone=True), default=None)
    day: Mapped[date | None] = mapped_column(sa.Date, default=None)
    tod: Mapped[time | None] = mapped_column(sa.Time, default=None)
    j: Mapped[Any] = mapped_column(sa.JSON, default=None, nullable=True)
    raw: Mapped[bytes | None] = mapped_column(sa.LargeBinary, default=None)
    e: Mapped[Colour | None] = mapped_column(sa.Enum(Colour), default=None)
    iv: Mapped[timedelta | None] = mapped_column(sa.Interval, default=None)
    flag: Mapped[bool | None] = mapped_column(sa.Boolean, default=None)


#: The columns a step writes (not the framework's id, tenant, version and times).
COLUMNS = [c.name for c in DeqThing.__table__.columns if c.name not in Entity.__annotations__]


@attrs.frozen
class Put:
    col: str
    v: Any


@attrs.frozen
class Change:
    id: uuid.UUID
    col: str
    v: Any


@attrs.frozen
class Hold:
    v: Any


@attrs.frozen
class Noted:
    v: Any


f = Feature("deq", requires=["webhook.send", "mail.send"])
f.entity(DeqThing)
f.event(Noted, name="deq-noted")
put = f.write_handler(
    "put",
    f.pipeline(Put)
    .create("x", DeqThing, data=lambda c: DeqThing(**{c.payload.col: c.payload.v}))
    .return_(lambda c: ok(c.steps["x"].id)),
)
change = f.write_handler(
    "change",
    f.pipeline(Change)
    .update(
        "x",
        DeqThing,
        id=lambda c: c.payload.id,
        changes=lambda c: {c.payload.col: c.payload.v},
        skip_optimistic_lock=True,
    )
    .return_(lambda c: ok(None)),
)
note = f.write_handler(
    "note",
    f.pipeline(Change)
    .append_event(DeqThing, id=lambda c: c.payload.id, event=lambda c: Noted(c.payload.v))
    .return_(lambda c: ok(None)),
)
echo = f.write_handler("echo", f.pipeline(Hold).return_(lambda c: ok(c.payload.v)))
look = f.query_handler("look", f.query_pipeline(Hold).return_(lambda c: ok(c.payload.v)))
hook = f.write_handler(
    "hook",
    f.pipeline(Hold)
    .send_webhook(url="http://127.0.0.1:9/deq", body=lambda c: {"v": c.payload.v})
    .return_(lambda c: ok(None)),
)
header = f.write_handler(
    "header",
    f.pipeline(Hold)
    .send_webhook(url="http://127.0.0.1:9/deq", headers=lambda c: {"X-V": c.payload.v})
    .return_(lambda c: ok(None)),
)
header_to = f.write_handler(
    "header-to",
    f.pipeline(Hold)
    .send_webhook(url=lambda c: c.payload.v["url"], headers=lambda c: {"X-V": c.payload.v["v"]})
    .return_(lambda c: ok(None)),
)
body_to = f.write_handler(
    "body-to",
    f.pipeline(Hold)
    .send_webhook(url=lambda c: c.payload.v["url"], body=lambda c: c.payload.v["v"])
    .return_(lambda c: ok(None)),
)
mail = f.write_handler(
    "mail",
    f.pipeline(Hold)
    .send_mail(to="a@example.com", subject=lambda c: c.payload.v, body=lambda c: c.payload.v)
    .return_(lambda c: ok(None)),
)
hold = f.workflow(
    "hold",
    trigger=manual(Hold),
    pipeline=f.workflow_pipeline(Hold)
    .compute("x", lambda c: c.payload.v)
    .wait("PT1M")
    .compute("y", lambda c: c.steps["x"]),
)

_west = timezone(timedelta(hours=-5))
VALUES: dict[str, Any] = {
    "nul": "a\x00b",
    "surrogate": "a\ud800b",
    "long": "x" * 100_000,
    "empty": "",
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "-0.0": -0.0,
    "1e20": 1e20,
    "1e16": 1e16,
    "subnormal": 5e-324,
    "max float": 1.7976931348623157e308,
    "0.1+0.2": 0.1 + 0.2,
    "1.0": 1.0,
    "2**53+1": 2**53 + 1,
    "2**63-1": 2**63 - 1,
    "2**63": 2**63,
    "-2**63": -(2**63),
    "-2**63-1": -(2**63) - 1,
    "2**31": 2**31,
    "10**400": 10**400,
    "40 digits": Decimal("1." + "1" * 40),
    "1.5": Decimal("1.5"),
    "-0.00": Decimal("-0.00"),
    "decimal nan": Decimal("NaN"),
    "1E+5": Decimal("1E+5"),
    "naive": datetime(2024, 1, 1, 12),
    "aware west": datetime(2024, 1, 1, 12, tzinfo=_west),
    "last instant": datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    "past 9999 in utc": datetime(9999, 12, 31, 23, tzinfo=_west),
    "first instant": datetime(1, 1, 1, tzinfo=UTC),
    "date": date(1, 1, 1),
    "time": time(23, 59, 59, 999999),
    "time west": time(12, tzinfo=_west),
    "timedelta": timedelta(days=1, microseconds=1),
    "timedelta max": timedelta.max,
    "bytes": b"\x00\xff",
    "no bytes": b"",
    "nested": {"a": [1, {"b": (2, 3)}], "c": frozenset()},
    "empty list": [],
    "empty dict": {},
    "int keys": {1: "a", 2: "b"},
    "none key": {None: 1},
    "tuple key": {(1, 2): 3},
    "enum key": {Colour.RED: 1},
    "enum": Colour.RED,
    "int enum": Rank.FIRST,
    "bool": True,
    "uuid": uuid.UUID(int=5),
    "unsorted keys": {"b": 1, "a": 2},
    "tag-like": {"$t": "uuid", "v": "x"},
    "nul key": {"a\x00": 1},
}

_ID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
_LEAKS = ("SELECT ", "INSERT ", "UPDATE ", "[SQL", "[parameters", "Traceback", "psycopg", "sqlite3", "Error (")


def _shown(value: object) -> str:
    return _ID.sub("<id>", repr(value))


def _answer(result: object) -> object:
    """A result as compared across the databases; a Failure checked for what it must not hold."""
    if isinstance(result, Failure):
        assert result.code != "internal_error", result
        shown = f"{result.message} {result.details!r}"
        assert not any(leak in shown for leak in _LEAKS), result
        return ("failure", result.code, _shown(result.message), _shown(result.details))
    assert isinstance(result, Ok), result
    return ("ok", _shown(result.data))


def _counts(app: App) -> tuple[int, ...]:
    with app.engine.connect() as conn:
        tables = (events, outbox, workflow_runs, idempotency_keys, DeqThing.__table__)
        return tuple(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one() for t in tables)


def _row(app: App, id_: uuid.UUID) -> str:
    table = DeqThing.__table__
    with app.engine.connect() as conn:
        row = conn.execute(sa.select(table).where(table.c.id == id_)).mappings().one()
    return _shown({k: v for k, v in row.items() if k in COLUMNS and v is not None})


def _last_event(app: App, user: User) -> str:
    with app.engine.connect() as conn:
        stream = conn.execute(sa.select(events.c.stream_id).order_by(events.c.position.desc()).limit(1)).scalar_one()
    return _shown(ok_data(app.read_stream(DeqThing, stream, user=user))[-1].event)


def _last_message(app: App) -> str:
    with app.engine.connect() as conn:
        message = conn.execute(sa.select(outbox.c.message).order_by(outbox.c.id.desc()).limit(1)).scalar_one()
    return _shown(sorted(message.items()))  # its members' order is the JSON column's


def _written(app: App, call: Callable[[App], object], read: Callable[[App, Any], str] | None = None) -> object:
    """``call``'s answer on ``app``, what ``read`` finds it wrote, and that a refusal wrote nothing."""
    before = _counts(app)
    result = call(app)
    if isinstance(result, Ok):
        return (_answer(result), None if read is None else read(app, result.data))
    assert _counts(app) == before, (result, before)
    return _answer(result)


@pytest.fixture
def both(tmp_path: Path, fresh_postgres_url: str) -> Iterator[tuple[tuple[App, FakeClock], ...]]:
    made = []
    for url in (f"sqlite:///{tmp_path / 'deq.sqlite3'}", fresh_postgres_url):
        clock = FakeClock(T0)
        app = App([f], database_url=url, clock=clock)
        app.create_all()
        made.append((app, clock))
    yield tuple(made)
    for app, _clock in made:
        app.dispose()


def _run(app: App, clock: FakeClock, v: object, user: User) -> object:
    """A run holding ``v`` across a wait: its state when resumed, or the refused start."""
    before = _counts(app)
    try:
        run_id = app.start_workflow(hold, Hold(v), user=user)
    except Exception as exc:  # a start refuses its payload by raising (tests/outbox/test_poison_rows.py)
        assert _counts(app) == before
        return ("refused", type(exc).__name__, str(exc))
    with app.engine.begin() as conn:  # the webhooks queued above: no receiver, nothing to deliver
        conn.execute(sa.delete(outbox))
    clock.advance(minutes=2)
    app.run_worker(once=True)
    info = app.get_run(run_id)
    assert info is not None
    return (info.status, _shown(info.steps), _shown(info.error))


@pytest.mark.postgres
def test_hostile_values_get_one_answer_from_both_databases(both: tuple[tuple[App, FakeClock], ...], user: User) -> None:
    apps = [app for app, _clock in both]
    streams = {id(a): ok_data(a.dispatch(put, Put("s", "noted"), user=user)) for a in apps}
    answers: dict[str, int] = {"ok": 0, "failure": 0}
    for name, v in VALUES.items():
        for col in COLUMNS:
            got = [_written(a, lambda a: a.dispatch(put, Put(col, v), user=user), _row) for a in apps]
            assert got[0] == got[1], (name, col)
            answers["ok" if isinstance(got[0], tuple) and got[0][0][0] == "ok" else "failure"] += 1
        key = f"key-{len(answers)}-{name}"
        for what, call, read in [
            ("echo", lambda a: a.dispatch(echo, Hold(v), user=user), None),
            (
                "event",
                lambda a: a.dispatch(note, Change(streams[id(a)], "", v), user=user),
                lambda a, _d: _last_event(a, user),
            ),
            ("keyed", lambda a: a.dispatch(echo, Hold(v), user=user, idempotency_key=key), None),
            ("repeated", lambda a: a.dispatch(echo, Hold(v), user=user, idempotency_key=key), None),
            ("query", lambda a: a.query(look, Hold(v), user=user), None),
            ("body", lambda a: a.dispatch(hook, Hold(v), user=user), lambda a, _d: _last_message(a)),
            ("header", lambda a: a.dispatch(header, Hold(v), user=user), lambda a, _d: _last_message(a)),
            ("mail", lambda a: a.dispatch(mail, Hold(v), user=user), lambda a, _d: _last_message(a)),
        ]:
            got = [_written(a, call, read) for a in apps]
            assert got[0] == got[1], (name, what)
        runs = [_run(app, clock, v, user) for app, clock in both]
        assert runs[0] == runs[1], name
    assert answers["ok"] > 50 and answers["failure"] > 500, answers
    reports = [ok_data(a.rebuild_projection(DeqThing, user=user, verify=True)) for a in apps]
    assert all(r.matches for r in reports), reports


#: (column, value, the message it is refused with): before, each was an internal_error
#: worded by the database's driver, or stored by one of the two.
OTHER_KINDS: list[tuple[str, object, str]] = [
    ("i", datetime(2024, 1, 1, tzinfo=UTC), "must be a number, not a datetime"),
    ("i", b"\x01", "must be a number, not bytes"),  # SQLite stored it, read back as bytes
    ("b", [1], "must be a number, not a list"),
    ("b", Colour.RED, "must be a number, not a Colour"),
    ("f", date(2024, 1, 1), "must be a number, not a date"),
    ("f", {"x": 1.0}, "must be a number, not a dict"),
    ("n", uuid.UUID(int=1), "must be a number, not a UUID"),
    ("n", timedelta(seconds=1), "must be a number, not a timedelta"),
    ("d", math.nan, "must be a datetime, not a number"),
    ("d", 1_700_000_000, "must be a datetime, not a number"),
    ("dz", time(12), "must be a datetime, not a time"),
    ("day", Decimal("1.5"), "must be a date, not a number"),
    ("day", True, "must be a date, not true or false"),
    ("tod", datetime(2024, 1, 1, 12), "must be a time, not a datetime"),  # PostgreSQL stored 12:00
    ("tod", b"12:00", "must be a time, not bytes"),
    ("tod", time(12, tzinfo=_west), "must be a time without a time zone"),  # both dropped the zone
]


def test_a_value_of_another_kind_than_its_number_or_time_column_is_refused_at_its_field(
    app_on: AppOn, user: User
) -> None:
    app = app_on([f])
    made = ok_data(app.dispatch(put, Put("s", "kept"), user=user))
    before = _counts(app)
    for col, value, message in OTHER_KINDS:
        refused = failure_of(app.dispatch(put, Put(col, value), user=user), "validation_error")
        ((detail,),) = [refused.details]
        assert (detail["path"], detail["column"], detail["message"][: len(message)]) == (
            "$.v",
            f"deq_thing.{col}",
            message,
        ), (col, value)
        assert refused.message.startswith(f'step 0 aggregate.create "x": a value does not fit its column: {message}')
        refused = failure_of(app.dispatch(change, Change(made, col, value), user=user), "validation_error")
        assert refused.details[0]["message"].startswith(message), (col, value)
    assert _counts(app) == before


#: (column, value, what the column reads back): the kinds each column takes.
OWN_KINDS: list[tuple[str, object, object]] = [
    ("i", 2.0, 2),
    ("i", Rank.FIRST, 1),
    ("f", 3, 3.0),
    ("f", Decimal("2.5"), 2.5),
    ("n", 2.5, Decimal("2.5")),
    ("n", 7, Decimal(7)),
    ("d", date(2024, 2, 29), datetime(2024, 2, 29)),
    ("d", datetime(2024, 1, 1, 12, tzinfo=_west), datetime(2024, 1, 1, 17)),
    ("dz", datetime(2024, 1, 1, 12, tzinfo=_west), datetime(2024, 1, 1, 17, tzinfo=UTC)),
    ("dz", datetime(2024, 1, 1, 12), datetime(2024, 1, 1, 12, tzinfo=UTC)),
    ("dz", date(1, 1, 1), datetime(1, 1, 1, tzinfo=UTC)),
    ("day", date(1, 1, 1), date(1, 1, 1)),
    ("tod", time(23, 59, 59, 999999), time(23, 59, 59, 999999)),
    ("j", {None: 1, True: 2, False: 3, 4: 5}, {"null": 1, "true": 2, "false": 3, "4": 5}),
]


def test_a_value_of_a_kind_its_column_takes_is_written_replayed_and_rebuilt_unchanged(
    app_on: AppOn, user: User
) -> None:
    """The kinds each column takes are written (this held before).  New: a rebuild finds
    their rows unchanged.  Before, ``verify=True`` reported as changed every row of an
    aware time in a naive ``DateTime`` column (and a naive time or a date in an aware one),
    comparing the event's value with the row's UTC time; and a JSON column's ``None`` or
    bool key, which the row holds as ``null``/``true`` (as JSON writes it) and the event
    held as ``None``/``True``, so a rebuild rewrote the row with other keys."""
    app = app_on([f])
    table = DeqThing.__table__
    for col, value, stored in OWN_KINDS:
        made = ok_data(app.dispatch(put, Put(col, value), user=user))
        with app.engine.connect() as conn:
            read = conn.execute(sa.select(table.c[col]).where(table.c.id == made)).scalar_one()
        assert (type(read), read) == (type(stored), stored), (col, value)
    report = ok_data(app.rebuild_projection(DeqThing, user=user, verify=True))
    assert (report.streams, report.changed, report.missing, report.extra) == (len(OWN_KINDS), {}, (), ())


def test_a_key_json_cannot_give_back_under_an_any_field_is_refused_at_its_field(app_on: AppOn, user: User) -> None:
    """Before, a tuple key in an event's ``Any`` field was an ``internal_error`` (the event's
    converter made the key a list, which no dict takes); other keys of its kind (an int)
    were refused already, as JSON gives them back as text."""
    app = app_on([f])
    made = ok_data(app.dispatch(put, Put("s", "kept"), user=user))
    before = _counts(app)
    for key, kind in [((1, 2), "tuple"), (frozenset({1}), "frozenset"), (7, "int")]:
        refused = failure_of(app.dispatch(note, Change(made, "", {"ok": 1, key: 2}), user=user), "validation_error")
        ((detail,),) = [refused.details]
        assert (detail["path"], detail["column"]) == ("$.v", "kumiko_events.payload")
        assert f"not a key of type {kind}; type the field to hold it" in detail["message"]
    assert _counts(app) == before


def test_a_webhook_header_or_body_key_is_sent_as_python_and_json_write_it(
    app_on: AppOn, user: User, receiver: Receiver
) -> None:
    """A header given a number goes out as ``str()`` writes it; before, PostgreSQL's jsonb
    gave a float back as its numeric (``1e20`` went out as ``100000000000000000000``,
    ``-0.0`` as ``0.0``).  A body's ``None`` key is posted as ``json=`` posts it, ``null``
    (it was ``None``), on both."""
    app = app_on([f])
    sent = {1e20: "1e+20", -0.0: "-0.0", 1e16: "1e+16", 2**70: str(2**70), 0.1 + 0.2: "0.30000000000000004"}
    for value in sent:
        ok_data(app.dispatch(header_to, Hold({"url": receiver.url(), "v": value}), user=user))
    ok_data(app.dispatch(body_to, Hold({"url": receiver.url(), "v": {None: 1, True: [False]}}), user=user))
    app.run_worker(once=True)
    got = sorted((r.headers.get("x-v", ""), r.body) for r in receiver.requests)  # delivered side by side
    assert got == sorted([*((v, b"") for v in sent.values()), ("", b'{"null":1,"true":[false]}')])
