"""SQL that converts answers alike on SQLite and PostgreSQL: where PostgreSQL refuses
(division by zero, text that is no number cast to one), SQLite refuses too.  SQLite's
``7 / 0`` was NULL, ``CAST('5.5' AS INTEGER)`` 5 and ``CAST('abc' AS INTEGER)`` 0, where
PostgreSQL refused the read; now both answer "the database refused a value"."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import ok_data, read_queries, refused_by_the_database
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]


class ScRow(Entity):
    __tablename__ = "sc_row"
    a: Mapped[int] = mapped_column(default=0)
    b: Mapped[int] = mapped_column(default=0)
    t: Mapped[str] = mapped_column(sa.String(20), default="")


@attrs.frozen
class Put:
    a: int = 0
    b: int = 0
    t: str = ""


@attrs.frozen
class By:
    n: int = 1


_PLACES = sa.Numeric(15, 4)

_READS: dict[str, Callable[[Any], object]] = {
    # A true division of integers is said in places (uncast it is the step's refusal:
    # test_differential.py), here as many as PostgreSQL gives -7 / 2.
    "div": lambda c: sa.select(sa.cast(ScRow.a / ScRow.b, _PLACES)),
    "floordiv": lambda c: sa.select(ScRow.a // ScRow.b),
    "mod": lambda c: sa.select(ScRow.a % ScRow.b),
    "by_payload": lambda c: sa.select(sa.cast(ScRow.a / c.payload.n, _PLACES)),
    "real_div": lambda c: sa.select(sa.cast(ScRow.a, sa.Float) / sa.cast(ScRow.b, sa.Float)),
    "as_int": lambda c: sa.select(sa.cast(ScRow.t, sa.Integer)),
    "as_float": lambda c: sa.select(sa.cast(ScRow.t, sa.Float)),
    "as_bool": lambda c: sa.select(sa.cast(ScRow.t, sa.Boolean)),
    "int_as_int": lambda c: sa.select(sa.cast(ScRow.a, sa.Integer)),
    "where_div": lambda c: sa.select(ScRow.t).where(sa.cast(ScRow.a / ScRow.b, _PLACES) > 1),
}


@pytest.fixture
def setup(app_on: AppOn, make_user: Callable[..., User]) -> tuple[App, dict[str, Any], User]:
    f: Feature[Any] = Feature("sc")
    f.entity(ScRow)
    h = read_queries(f, By, _READS)
    h["put"] = f.write_handler(
        "put",
        f.pipeline(Put)
        .create("r", ScRow, data=lambda c: ScRow(a=c.payload.a, b=c.payload.b, t=c.payload.t))
        .return_(lambda c: ok(None)),
    )
    return app_on([f]), h, make_user()


@pytest.mark.parametrize("read", ["div", "floordiv", "mod", "real_div", "where_div"])
def test_a_division_by_zero_is_refused_on_both(setup: tuple[App, dict[str, Any], User], read: str) -> None:
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(7, 0), user=alice))
    refused_by_the_database(app.query(h[read], By(), user=alice))


def test_a_division_by_a_zero_from_the_payload_is_refused(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(7, 2), user=alice))
    refused_by_the_database(app.query(h["by_payload"], By(0), user=alice))
    assert ok_data(app.query(h["by_payload"], By(2), user=alice)) == [Decimal("3.5")]


def test_divisions_by_other_numbers_answer_alike(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(-7, 2), user=alice))
    assert ok_data(app.query(h["div"], By(), user=alice)) == [Decimal("-3.5")]
    assert ok_data(app.query(h["floordiv"], By(), user=alice)) == [-3]  # integer division truncates on both
    assert ok_data(app.query(h["mod"], By(), user=alice)) == [-1]
    assert ok_data(app.query(h["real_div"], By(), user=alice)) == [-3.5]
    assert ok_data(app.query(h["where_div"], By(), user=alice)) == []


@pytest.mark.parametrize(
    ("read", "text", "value"),
    [
        ("as_int", " 42 ", 42),
        ("as_int", "-7", -7),
        ("as_float", "1e3", 1000.0),
        ("as_float", " 2.5", 2.5),
        ("as_bool", "yes", True),
        ("as_bool", "F", False),
    ],
)
def test_text_cast_to_a_number_or_a_bool_reads_as_on_postgresql(
    setup: tuple[App, dict[str, Any], User], read: str, text: str, value: object
) -> None:
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(t=text), user=alice))
    assert ok_data(app.query(h[read], By(), user=alice)) == [value]


@pytest.mark.parametrize(
    ("read", "text"),
    [
        ("as_int", "5.5"),
        ("as_int", "abc"),
        ("as_int", ""),
        ("as_int", "99999999999"),
        ("as_float", "abc"),
        ("as_bool", "maybe"),
    ],
)
def test_text_that_is_no_such_value_is_refused_on_both(
    setup: tuple[App, dict[str, Any], User], read: str, text: str
) -> None:
    """SQLite made ``'5.5'`` a 5, ``'abc'`` a 0 and ``'maybe'`` a 0."""
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(t=text), user=alice))
    refused_by_the_database(app.query(h[read], By(), user=alice))


def test_a_number_cast_to_a_number_is_untouched(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put(a=2**31 - 1), user=alice))
    assert ok_data(app.query(h["int_as_int"], By(), user=alice)) == [2**31 - 1]
