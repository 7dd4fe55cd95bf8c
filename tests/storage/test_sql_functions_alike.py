"""More SQL a read step writes that answers alike on SQLite and PostgreSQL.

SQLite's ``substr`` counts a negative start from the end (``substr('Apple', -2, 3)`` was
``'le'``; PostgreSQL's is ``''``) and takes a negative length; a number cast to an integer
was truncated (PostgreSQL rounds: ``1.5`` is 2); a bool cast to text was ``'1'``
(PostgreSQL: ``'true'``); a time cast to a date was SQLite's NUMERIC cast of its text
(``2024``), which the read then failed on, an ``internal_error``; and text cast to a
``BigInteger`` was refused past 32 bits, which PostgreSQL's ``bigint`` takes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import ok_data, read_queries, refused_by_the_database
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]


class SfRow(Entity):
    __tablename__ = "sf_row"
    t: Mapped[str] = mapped_column(sa.String(20), default="")
    amount: Mapped[float] = mapped_column(sa.Numeric(8, 2), default=0)
    ratio: Mapped[float] = mapped_column(default=0.0)
    flag: Mapped[bool] = mapped_column(default=False)
    at: Mapped[dt.datetime] = mapped_column(default=dt.datetime(2000, 1, 1))
    day: Mapped[dt.date] = mapped_column(default=dt.date(2000, 1, 1))


@attrs.frozen
class Put:
    t: str = ""
    amount: float = 0
    ratio: float = 0.0
    flag: bool = False
    at: dt.datetime = dt.datetime(2000, 1, 1)
    day: dt.date = dt.date(2000, 1, 1)


@attrs.frozen
class Span:
    start: int = 1
    count: int = 1


_READS: dict[str, Callable[[Any], object]] = {
    "substr": lambda c: sa.select(sa.func.substr(SfRow.t, c.payload.start, c.payload.count)),
    "substr_rest": lambda c: sa.select(sa.func.substr(SfRow.t, c.payload.start)),
    "substring": lambda c: sa.select(sa.func.substring(SfRow.t, c.payload.start, c.payload.count)),
    "amount_int": lambda c: sa.select(sa.cast(SfRow.amount, sa.Integer)),
    "ratio_int": lambda c: sa.select(sa.cast(SfRow.ratio, sa.Integer)),
    "ratio_small": lambda c: sa.select(sa.cast(SfRow.ratio, sa.SmallInteger)),
    "ratio_huge": lambda c: sa.select(sa.cast(SfRow.ratio * 1e308, sa.Integer)),
    "flag_text": lambda c: sa.select(sa.cast(SfRow.flag, sa.String)),
    "at_date": lambda c: sa.select(sa.cast(SfRow.at, sa.Date)),
    "day_time": lambda c: sa.select(sa.cast(SfRow.day, sa.DateTime)),
    "text_big": lambda c: sa.select(sa.cast(SfRow.t, sa.BigInteger)),
    "text_small": lambda c: sa.select(sa.cast(SfRow.t, sa.SmallInteger)),
}


@pytest.fixture
def setup(app_on: AppOn, make_user: Callable[..., User]) -> tuple[App, dict[str, Any], User]:
    f: Feature[Any] = Feature("sf")
    f.entity(SfRow)
    h = read_queries(f, Span, _READS)
    h["put"] = f.write_handler(
        "put",
        f.pipeline(Put)
        .create(
            "r",
            SfRow,
            data=lambda c: SfRow(
                t=c.payload.t,
                amount=c.payload.amount,
                ratio=c.payload.ratio,
                flag=c.payload.flag,
                at=c.payload.at,
                day=c.payload.day,
            ),
        )
        .return_(lambda c: ok(None)),
    )
    return app_on([f]), h, make_user()


@pytest.mark.parametrize("read", ["substr", "substring"])
@pytest.mark.parametrize(
    ("start", "count", "part"),
    [(2, 3, "ppl"), (0, 3, "Ap"), (-2, 3, ""), (-2, 5, "Ap"), (4, 9, "le"), (9, 2, ""), (2, 0, "")],
)
def test_substr_counts_positions_as_postgresql(
    setup: tuple[App, dict[str, Any], User], read: str, start: int, count: int, part: str
) -> None:
    """Positions before the first character count towards the length and hold nothing;
    SQLite counted a negative start from the end ("le" for -2, 3)."""
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(t="Apple"), user=alice))
    assert ok_data(app.query(h[read], Span(start, count), user=alice)) == [part]


def test_substr_without_a_length_reads_to_the_end(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(t="Ä€ü-x"), user=alice))
    assert ok_data(app.query(h["substr_rest"], Span(2), user=alice)) == ["€ü-x"]
    assert ok_data(app.query(h["substr_rest"], Span(-3), user=alice)) == ["Ä€ü-x"]  # SQLite: "ü-x"


def test_substr_of_a_negative_length_is_refused_on_both(setup: tuple[App, dict[str, Any], User]) -> None:
    """SQLite read the characters before the start ("pp" for 4, -2)."""
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(t="Apple"), user=alice))
    refused_by_the_database(app.query(h["substr"], Span(4, -2), user=alice))


@pytest.mark.parametrize(
    ("read", "put", "value"),
    [
        ("amount_int", Put(amount=1.5), 2),  # numeric: half away from zero
        ("amount_int", Put(amount=2.5), 3),
        ("amount_int", Put(amount=-2.5), -3),
        ("amount_int", Put(amount=2.49), 2),
        ("ratio_int", Put(ratio=2.5), 2),  # float: half to even
        ("ratio_int", Put(ratio=3.5), 4),
        ("ratio_int", Put(ratio=-1.7), -2),
    ],
)
def test_a_number_cast_to_an_integer_rounds_as_on_postgresql(
    setup: tuple[App, dict[str, Any], User], read: str, put: Put, value: int
) -> None:
    """SQLite truncated: 1.5 was 1, -1.7 was -1."""
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], put, user=alice))
    assert ok_data(app.query(h[read], Span(), user=alice)) == [value]


@pytest.mark.parametrize(
    ("read", "put"),
    [("ratio_int", Put(ratio=3e9)), ("ratio_small", Put(ratio=40000.0)), ("ratio_huge", Put(ratio=10.0))],
)
def test_a_number_past_the_integer_is_refused_on_both(
    setup: tuple[App, dict[str, Any], User], read: str, put: Put
) -> None:
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], put, user=alice))
    refused_by_the_database(app.query(h[read], Span(), user=alice))


def test_a_bool_cast_to_text_is_true_or_false(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(flag=True), user=alice))
    ok_data(app.dispatch(h["put"], Put(flag=False), user=alice))
    assert sorted(ok_data(app.query(h["flag_text"], Span(), user=alice))) == ["false", "true"]  # SQLite: "0", "1"


def test_a_time_cast_to_a_date_and_back(setup: tuple[App, dict[str, Any], User]) -> None:
    """SQLite's ``CAST(... AS DATE)`` made the text a number (2024), which the read failed on."""
    app, h, alice = setup
    ok_data(
        app.dispatch(
            h["put"], Put(at=dt.datetime(2024, 3, 10, 15, 30, 45, 120000), day=dt.date(2024, 2, 29)), user=alice
        )
    )
    assert ok_data(app.query(h["at_date"], Span(), user=alice)) == [dt.date(2024, 3, 10)]
    assert ok_data(app.query(h["day_time"], Span(), user=alice)) == [dt.datetime(2024, 2, 29)]


@pytest.mark.parametrize(
    ("read", "text", "value"), [("text_big", "99999999999", 99999999999), ("text_small", "-32768", -32768)]
)
def test_text_cast_to_a_wider_or_narrower_integer(
    setup: tuple[App, dict[str, Any], User], read: str, text: str, value: int
) -> None:
    """SQLite's cast took ``int4``'s range for every integer type."""
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(t=text), user=alice))
    assert ok_data(app.query(h[read], Span(), user=alice)) == [value]


@pytest.mark.parametrize(("read", "text"), [("text_small", "40000"), ("text_big", "9223372036854775808")])
def test_text_past_the_integer_type_is_refused_on_both(
    setup: tuple[App, dict[str, Any], User], read: str, text: str
) -> None:
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(t=text), user=alice))
    refused_by_the_database(app.query(h[read], Span(), user=alice))
