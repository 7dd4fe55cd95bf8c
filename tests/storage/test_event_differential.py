"""The event store given hostile input, SQLite and PostgreSQL side by side: the same events
appended (text with NUL, lone surrogates, RTL marks, emoji, NFC and NFD forms, 100 000
characters; integers at and past 64 bits; floats that are NaN, infinite, ``-0.0``,
subnormal or do not round-trip in fewer digits; huge and non-finite decimals; times in
other zones and at the ends of the calendar; deep and wide documents; hostile headers),
then each stream read back with hostile pages and ids and each table verified against its
events.  Both databases give the same answer — the same ``Ok`` values or the same
``Failure`` (code, message and details, error ids aside) — and no ``Failure`` shows SQL,
parameters, a traceback or a driver's name."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import nested_lists, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok
from kumiko_typed._tables import events


class EdItem(Entity):
    __tablename__ = "ed_item"
    label: Mapped[str] = mapped_column(sa.String(100))
    n: Mapped[int] = mapped_column(sa.BigInteger, default=0)


@attrs.frozen
class Opened:
    label: str


@attrs.frozen
class Noted:
    text: str
    n: int
    x: float
    amt: Decimal
    at: datetime
    extra: dict[str, Any]


@attrs.frozen
class Open:
    label: str


@attrs.frozen
class Note:
    id: uuid.UUID
    text: str = ""
    n: int = 0
    x: float = 0.0
    amt: Decimal = Decimal(0)
    at: datetime = datetime(2024, 1, 1, tzinfo=UTC)
    extra: dict[str, Any] = attrs.Factory(dict)
    headers: dict[str, Any] = attrs.Factory(dict)


ed = Feature("ed")
ed.entity(EdItem)
ed.event(Opened, name="opened")
ed.event(Noted, name="noted")


@ed.projector(EdItem, Opened)
def _opened(row: EdItem, event: Opened) -> None:
    row.label = event.label


@ed.projector(EdItem, Noted)
def _noted(row: EdItem, event: Noted) -> None:
    row.label, row.n = event.text[:100], event.n


open_ = ed.write_handler(
    "open",
    ed.pipeline(Open)
    .create("i", EdItem, data=lambda c: EdItem(label=c.payload.label), event=lambda c: Opened(c.payload.label))
    .return_(lambda c: ok(c.steps["i"].id)),
)
note = ed.write_handler(
    "note",
    ed.pipeline(Note)
    .append_event(
        EdItem,
        id=lambda c: c.payload.id,
        event=lambda c: Noted(c.payload.text, c.payload.n, c.payload.x, c.payload.amt, c.payload.at, c.payload.extra),
        headers=lambda c: c.payload.headers,
    )
    .return_(lambda c: ok(None)),
)

_west = timezone(timedelta(hours=-5))
NOTES: list[dict[str, Any]] = [
    {"text": "a\x00b"},
    {"text": "a\ud800b"},
    {"text": "\u202eabc\u200f"},
    {"text": "🍎👩‍👩‍👧"},
    {"text": "e\u0301"},  # NFD: kept as given, not folded into NFC's "é"
    {"text": "\u00e9"},
    {"text": "x" * 100_000},
    {"n": 2**63 - 1},
    {"n": -(2**63)},
    {"n": 2**63},
    {"n": -(2**63) - 1},
    {"x": math.nan},
    {"x": -math.inf},
    {"x": -0.0},
    {"x": 5e-324},
    {"x": 0.1 + 0.2},
    {"x": 1.7976931348623157e308},
    {"amt": Decimal("1e100000")},
    {"amt": Decimal("1." + "1" * 3000)},
    {"amt": Decimal("-0.00")},
    {"amt": Decimal("NaN")},
    {"amt": Decimal("sNaN")},
    {"amt": Decimal("-Infinity")},
    {"at": datetime(2024, 1, 1)},  # naive
    {"at": datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=13, minutes=45)))},
    {"at": datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)},
    {"at": datetime(9999, 12, 31, 23, tzinfo=_west)},  # past year 9999 in UTC
    {"at": datetime(1, 1, 1, 1, tzinfo=timezone(timedelta(hours=5)))},  # before year 1 in UTC
    {"extra": {"deep": nested_lists(60)}},
    {"extra": {"deep": nested_lists(100)}},
    {"extra": {"deep": nested_lists(5000)}},
    {"extra": {str(i): i for i in range(20_000)}},
    {"extra": {"a\x00": 1}},
    {"extra": {"big": 10**400, "neg0": -0.0}},
    {"extra": {"huge": 10**5000}},
    {"extra": {"nan": [1, math.inf]}},
    {"extra": {"uuid": uuid.UUID(int=1)}},
    {"headers": {"k": "\x00"}},
    {"headers": {"k": "\udfff"}},
    {"headers": {"k" * 5000: "v" * 100_000}},
    {"headers": {"k": 1}},
    {"headers": {"k": datetime(2024, 1, 1, tzinfo=UTC)}},
]
PAGES: list[dict[str, Any]] = [
    {},
    {"from_version": 2, "limit": 1},
    {"from_version": 99},
    {"from_version": 0},
    {"from_version": 2**31},
    {"limit": 0},
    {"limit": True},
    {"from_version": "1"},
    {"limit": 2**31 - 1},
]
_ID = re.compile(r"[0-9a-f]{32}")
_LEAKS = ("SELECT ", "INSERT ", "[SQL", "[parameters", "Traceback", "psycopg", "sqlite3", "kumiko_events (")


def _answer(result: object) -> object:
    if isinstance(result, Failure):
        return ("failure", result.code, _ID.sub("<id>", result.message), _ID.sub("<id>", repr(result.details)))
    assert isinstance(result, Ok), result
    return ("ok", result.data)


def _no_leak(result: object) -> None:
    if isinstance(result, Failure):
        shown = f"{result.message} {result.details!r}"
        assert not any(leak in shown for leak in _LEAKS), result


def _names_the_field(result: object) -> None:
    """A refusal of an event's value is the caller's ``validation_error`` at the field
    (never ``$``, the whole payload), not the library's ``internal_error``."""
    if isinstance(result, Failure):
        assert result.code == "validation_error", result
        assert isinstance(result.details, list) and result.details, result
        assert all(d["path"] not in ("$", "") for d in result.details), result


def _stream(result: object) -> object:
    if not isinstance(result, Ok):
        return _answer(result)
    return [(e.type, e.version, e.schema_version, e.event, dict(e.headers)) for e in result.data]


@pytest.fixture
def both(tmp_path: Path, fresh_postgres_url: str) -> Iterator[tuple[App, App]]:
    apps = (App([ed], database_url=f"sqlite:///{tmp_path / 'ed.sqlite3'}"), App([ed], database_url=fresh_postgres_url))
    for each in apps:
        each.create_all()
    yield apps
    for each in apps:
        each.dispose()


@pytest.mark.postgres
def test_hostile_events_are_stored_read_and_refused_alike_on_both_databases(both: tuple[App, App], user: User) -> None:
    lite, pg = both
    stream = uuid.UUID(int=7)
    opened = [ok_data(a.dispatch(open_, Open("start"), user=user)) for a in both]
    with pg.engine.begin() as pconn, lite.engine.begin() as lconn:  # one stream id on both
        for conn, made in ((lconn, opened[0]), (pconn, opened[1])):
            conn.execute(sa.update(events).where(events.c.stream_id == made).values(stream_id=stream))
            conn.execute(sa.update(EdItem).where(EdItem.id == made).values(id=stream))
    outcomes = {"ok": 0, "failure": 0}
    for values in NOTES:
        answers = [a.dispatch(note, Note(stream, **values), user=user) for a in both]
        assert _answer(answers[0]) == _answer(answers[1]), values
        for each in answers:
            _no_leak(each)
            _names_the_field(each)
        outcomes["ok" if isinstance(answers[0], Ok) else "failure"] += 1
    assert outcomes["ok"] > 10 and outcomes["failure"] > 10, outcomes
    for page in PAGES:
        read = [a.read_stream(EdItem, stream, user=user, **page) for a in both]
        assert _stream(read[0]) == _stream(read[1]), page
        for each in read:
            _no_leak(each)
    for bad_id in (str(stream), 7, uuid.UUID(int=0), uuid.UUID(int=2**128 - 1), None):
        read = [a.read_stream(EdItem, bad_id, user=user) for a in both]  # type: ignore[arg-type]
        assert _answer(read[0]) == _answer(read[1]), bad_id
    reports = [a.rebuild_projection(EdItem, user=user, verify=True) for a in both]
    assert _answer(reports[0]) == _answer(reports[1])
    assert ok_data(reports[0]).matches
    rows = []
    for each in both:
        with each.engine.connect() as conn:
            rows.append(conn.execute(sa.select(EdItem.label, EdItem.n, EdItem.version)).all())
    assert rows[0] == rows[1]


#: What a client sends as JSON (``dispatch_json``, the ASGI app's call), text the payload
#: reader parses: ids in each form a UUID is written, decimals and times as text.
JSON_NOTES: list[dict[str, Any]] = [
    {"id": "{STREAM}"},
    {"id": "{STREAM_UPPER}"},
    {"id": "{{{STREAM}}}"},
    {"id": "urn:uuid:{STREAM}"},
    {"id": " {STREAM}"},
    {"id": ""},
    {"id": "{STREAM}", "amt": "1e999999999"},
    {"id": "{STREAM}", "amt": "-0.000"},
    {"id": "{STREAM}", "amt": "1_000"},
    {"id": "{STREAM}", "amt": "\u0661"},
    {"id": "{STREAM}", "amt": "Infinity"},
    {"id": "{STREAM}", "amt": 1e308},
    {"id": "{STREAM}", "x": 1e-320},
    {"id": "{STREAM}", "n": 1.0},
    {"id": "{STREAM}", "n": True},
    {"id": "{STREAM}", "at": "2024-02-29T24:00:00Z"},
    {"id": "{STREAM}", "at": "2024-01-01T00:00:00.1234567+05:30"},
    {"id": "{STREAM}", "at": "0001-01-01T00:00:00+00:01"},
    {"id": "{STREAM}", "at": "9999-12-31T23:59:59-00:01"},
    {"id": "{STREAM}", "at": "2024-01-01T00:00:00"},
    {"id": "{STREAM}", "text": "\u0000"},
    {"id": "{STREAM}", "extra": {"": {"\u202e": ["🍎", None, False, -0.0]}}},
    {"id": "{STREAM}", "headers": {"trace": "\ud83c"}},
]


def _filled(value: Any, stream: uuid.UUID) -> Any:
    if isinstance(value, str):
        return value.replace("{STREAM}", str(stream)).replace("{STREAM_UPPER}", str(stream).upper())
    if isinstance(value, dict):
        return {k: _filled(v, stream) for k, v in value.items()}
    return value


@pytest.mark.postgres
def test_hostile_json_is_read_stored_and_refused_alike_on_both_databases(both: tuple[App, App], user: User) -> None:
    made = [ok_data(a.dispatch(open_, Open("start"), user=user)) for a in both]
    for sent in JSON_NOTES:
        answers = [a.dispatch_json("ed:note", _filled(sent, m), user=user) for a, m in zip(both, made, strict=True)]
        shown = [_ID.sub("<id>", repr(_answer(r))) for r in answers]
        assert shown[0].replace(str(made[0]), "<s>") == shown[1].replace(str(made[1]), "<s>"), sent
        for each in answers:
            _no_leak(each)
            _names_the_field(each)
    streams = [_stream(a.read_stream(EdItem, m, user=user)) for a, m in zip(both, made, strict=True)]
    assert streams[0] == streams[1]
    assert ok_data(both[1].rebuild_projection(EdItem, user=user, verify=True)).matches
