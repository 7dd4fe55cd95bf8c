"""Arithmetic of numbers only, on both databases.

PostgreSQL has ``+``, ``-``, ``*``, ``/`` and ``%`` of numbers, and refused
``rank + title``, ``flag + 1`` or ``rank + "5"`` with an ``internal_error`` naming no
field, where SQLite converted the text to a number (``'apple'`` is 0) and true/false to
1/0, and answered.  Now a value of another kind is a ``validation_error`` at its payload
field on both, and such arithmetic written in the query the step's refusal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data, read_queries
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]


class CmItem(Entity):
    __tablename__ = "cm_item"
    title: Mapped[str] = mapped_column(sa.String(40), default="apple")
    rank: Mapped[int] = mapped_column(default=2)
    price: Mapped[float] = mapped_column(sa.Numeric(8, 2), default=1.5)
    flag: Mapped[bool] = mapped_column(default=True)


@attrs.frozen
class Given:
    """``value`` is whatever a caller without mypy (or a payload typed ``Any``) passes."""

    value: Any = None


_READS: dict[str, Callable[[Any], object]] = {
    "rank_plus_value": lambda c: sa.select(CmItem.rank + c.payload.value),
    "value_times_rank": lambda c: sa.select(c.payload.value * CmItem.rank),
    "rank_plus_title": lambda c: sa.select(CmItem.rank + CmItem.title),
    "flag_plus_one": lambda c: sa.select(CmItem.flag + 1),
    "title_minus_title": lambda c: sa.select(CmItem.title - CmItem.title),
    "rank_times_price": lambda c: sa.select(sa.cast(CmItem.rank * CmItem.price, sa.Numeric(15, 2))),
    "title_plus_title": lambda c: sa.select(CmItem.title + "!" + CmItem.title),
}


def _app(
    app_on: AppOn, make_user: Callable[..., User], name: str, reads: dict[str, Callable[[Any], object]]
) -> tuple[App, dict[str, Any], User]:
    """An App with a query per read of ``reads`` and one default row in the user's tenant."""
    f: Feature[Any] = Feature(name)
    f.entity(CmItem)
    h = read_queries(f, Given, reads)
    h["put"] = f.write_handler(
        "put", f.pipeline(Given).create("r", CmItem, data=lambda c: CmItem()).return_(lambda c: ok(None))
    )
    app = app_on([f])
    alice = make_user()
    ok_data(app.dispatch(h["put"], Given(), user=alice))
    return app, h, alice


@pytest.fixture
def setup(app_on: AppOn, make_user: Callable[..., User]) -> tuple[App, dict[str, Any], User]:
    return _app(app_on, make_user, "cm", _READS)


@pytest.mark.parametrize("read", ["rank_plus_value", "value_times_rank"])
@pytest.mark.parametrize("value", ["5", True])
def test_a_value_of_another_kind_in_arithmetic_names_the_field(
    setup: tuple[App, dict[str, Any], User], read: str, value: object
) -> None:
    """SQLite answered 7 (``2 + '5'``) and 3 (``2 + 1``)."""
    app, h, alice = setup
    for _ in range(2):  # the shape's first walk, then its memo
        refused = failure_of(app.query(h[read], Given(value), user=alice), "validation_error")
        assert (
            refused.message == 'step 0 read.find_many "r": a value cannot be computed with its column: must be a number'
            " (cm_item.rank, from $.value)"
        )
        assert refused.details == [
            {"path": "$.value", "message": "must be a number", "column": "cm_item.rank", "step": '0 read.find_many "r"'}
        ]


@pytest.mark.parametrize(
    ("read", "sides"),
    [
        ("rank_plus_title", "cm_item.rank (a number) + cm_item.title (text)"),
        ("flag_plus_one", "cm_item.flag (true or false) + an expression of type INTEGER (a number)"),
        ("title_minus_title", "cm_item.title (text) - cm_item.title (text)"),
    ],
)
def test_arithmetic_of_text_or_a_bool_in_the_query_is_refused(
    setup: tuple[App, dict[str, Any], User], read: str, sides: str
) -> None:
    app, h, alice = setup
    refused = failure_of(app.query(h[read], Given(), user=alice), "internal_error")
    assert refused.message.startswith('step 0 read.find_many "r" raised StepRefused')
    assert f"the query computes {sides}: " in refused.message


def test_arithmetic_of_numbers_and_joined_text_answer_alike(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    assert ok_data(app.query(h["rank_plus_value"], Given(5), user=alice)) == [7]
    assert ok_data(app.query(h["value_times_rank"], Given(3), user=alice)) == [6]
    assert ok_data(app.query(h["rank_times_price"], Given(), user=alice)) == [3]
    assert ok_data(app.query(h["title_plus_title"], Given(), user=alice)) == ["apple!apple"]


_FUNCTIONS: dict[str, Callable[[Any], object]] = {
    "rank_or_value": lambda c: sa.select(sa.func.coalesce(CmItem.rank, c.payload.value)),
    "rank_or_title": lambda c: sa.select(sa.func.coalesce(CmItem.rank, CmItem.title)),
    "title_or_text": lambda c: sa.select(sa.func.coalesce(CmItem.title, "none")),
    "sum_flag": lambda c: sa.select(sa.func.sum(CmItem.flag)),
    "max_flag": lambda c: sa.select(sa.func.max(CmItem.flag)),
    "sum_flag_counted": lambda c: sa.select(sa.func.sum(sa.cast(CmItem.flag, sa.Integer))),
}


@pytest.fixture
def functions(app_on: AppOn, make_user: Callable[..., User]) -> tuple[App, dict[str, Any], User]:
    return _app(app_on, make_user, "cf", _FUNCTIONS)


def test_coalesce_of_a_value_of_another_kind_names_the_field(functions: tuple[App, dict[str, Any], User]) -> None:
    """SQLite answered the rank; PostgreSQL refused ``coalesce(integer, text)``."""
    app, h, alice = functions
    refused = failure_of(app.query(h["rank_or_value"], Given("x"), user=alice), "validation_error")
    assert refused.details == [
        {"path": "$.value", "message": "must be a number", "column": "cm_item.rank", "step": '0 read.find_many "r"'}
    ]
    assert ok_data(app.query(h["rank_or_value"], Given(0), user=alice)) == [2]
    assert ok_data(app.query(h["title_or_text"], Given(), user=alice)) == ["apple"]


@pytest.mark.parametrize(
    ("read", "told"),
    [
        ("rank_or_title", "the query's coalesce() takes cm_item.rank (a number) and cm_item.title (text)"),
        ("sum_flag", "the query takes sum() of cm_item.flag (true or false)"),
        ("max_flag", "the query takes max() of cm_item.flag (true or false)"),
    ],
)
def test_a_function_postgresql_has_not_for_the_kinds_is_refused(
    functions: tuple[App, dict[str, Any], User], read: str, told: str
) -> None:
    """SQLite answered: the rank, and true as 1."""
    app, h, alice = functions
    refused = failure_of(app.query(h[read], Given(), user=alice), "internal_error")
    assert refused.message.startswith('step 0 read.find_many "r" raised StepRefused')
    assert told in refused.message
    assert ok_data(app.query(h["sum_flag_counted"], Given(), user=alice)) == [1]
