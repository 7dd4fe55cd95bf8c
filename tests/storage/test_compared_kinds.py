"""Text, numbers and true/false kept apart, so that both databases answer alike.

SQLite converts a value by its column's affinity: it stored ``True`` in a text column as
``'1'`` and ``5.0`` as ``'5.0'`` (PostgreSQL: ``'true'``, ``'5'``), and a read comparing
the title with ``5``, the rank with ``"5"`` or a flag with ``1`` found rows where
PostgreSQL refused the statement with an ``internal_error`` naming no field.  Now a
value of the wrong kind is a ``validation_error`` at its payload field on both, and a
comparison of two kinds written in the query itself is the step's refusal naming both
sides; nothing the handler wrote stays."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, ok
from kumiko_typed._steps import _entity_reads, _templates

AppOn = Callable[..., App]


class Shade(enum.Enum):
    RED = "red"
    BLUE = "blue"


class AsJsonText(sa.TypeDecorator[dict[str, Any]]):
    """SQLAlchemy's recipe of a JSON document kept as text: its value is a dict."""

    impl = sa.String(200)
    cache_ok = True

    def process_bind_param(self, value: dict[str, Any] | None, dialect: sa.Dialect) -> str | None:
        return None if value is None else json.dumps(value, sort_keys=True)

    def process_result_value(self, value: str | None, dialect: sa.Dialect) -> dict[str, Any] | None:
        return None if value is None else dict(json.loads(value))


class CkItem(Entity):
    __tablename__ = "ck_item"
    title: Mapped[str] = mapped_column(sa.String(40))
    rank: Mapped[int] = mapped_column(default=0)
    price: Mapped[float] = mapped_column(sa.Numeric(8, 2), default=0)
    flag: Mapped[bool] = mapped_column(default=False)
    shade: Mapped[Shade] = mapped_column(sa.Enum(Shade, name="ck_shade"), default=Shade.RED)
    extra: Mapped[dict[str, Any] | None] = mapped_column(AsJsonText, default=None)


_metadata = sa.MetaData()
CK_TALLY = sa.Table(
    "ck_tally", _metadata, sa.Column("key", sa.String(40), primary_key=True), sa.Column("count", sa.Integer)
)


@attrs.frozen
class Given:
    """``value`` is whatever a caller without mypy (or a payload typed ``Any``) passes."""

    value: Any = None
    title: str = "t"


_READS: dict[str, Callable[[Any], object]] = {
    "title": lambda c: sa.select(CkItem).where(CkItem.title == c.payload.value),
    "rank": lambda c: sa.select(CkItem).where(CkItem.rank == c.payload.value),
    "rank_above": lambda c: sa.select(CkItem).where(CkItem.rank > c.payload.value),
    "rank_between": lambda c: sa.select(CkItem).where(CkItem.rank.between(0, c.payload.value)),
    "price": lambda c: sa.select(CkItem).where(CkItem.price == c.payload.value),
    "flag": lambda c: sa.select(CkItem).where(CkItem.flag == c.payload.value),
    "titles": lambda c: sa.select(CkItem).where(CkItem.title.in_(c.payload.value)),
    "title_like": lambda c: sa.select(CkItem).where(CkItem.title.like(c.payload.value)),
    "shade": lambda c: sa.select(CkItem).where(CkItem.shade == c.payload.value),
    "extra": lambda c: sa.select(CkItem).where(CkItem.extra == c.payload.value),
    # Written in the query itself: no payload field to name.
    "rank_is_true": lambda c: sa.select(CkItem).where(CkItem.rank == True),  # noqa: E712
    "title_is_rank": lambda c: sa.select(CkItem).where(CkItem.title == CkItem.rank),
}


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("ck", projections=[CK_TALLY])
    f.entity(CkItem)
    h: dict[str, Any] = {
        "make": f.write_handler(
            "make",
            f.pipeline(Given)
            .create("n", CkItem, data=lambda c: CkItem(title=c.payload.value, rank=2, extra={"k": 1}))
            .return_(lambda c: ok(c.steps["n"].id)),
        ),
        "forget": f.write_handler(
            "forget",
            f.pipeline(Given)
            .unsafe_projection_upsert(CK_TALLY, on=["key"], row=lambda c: {"key": "kept", "count": 1})
            .unsafe_projection_delete(CK_TALLY, where=lambda c: CK_TALLY.c.count == c.payload.value)
            .return_(lambda c: ok(None)),
        ),
    }
    for name, query in _READS.items():
        # A write first: a refused read must roll it back.
        h[name] = f.write_handler(
            name,
            f.pipeline(Given)
            .create("n", CkItem, data=lambda c: CkItem(title=c.payload.title))
            .find_many("r", query)
            .return_(lambda c: ok(sorted(r.title for r in c.steps["r"]))),
        )
        h[f"query_{name}"] = f.query_handler(
            f"query_{name}",
            f.query_pipeline(Given).find_many("r", query).return_(lambda c: ok(sorted(r.title for r in c.steps["r"]))),
        )
    return f, h


@pytest.fixture(autouse=True)
def fresh_memos() -> None:
    """Each test's first call runs the resolver (no template from an earlier test)."""
    _templates._TEMPLATES.entries().clear()
    _entity_reads._PLANS.entries().clear()


@pytest.fixture
def setup(app_on: AppOn, make_user: Callable[..., User]) -> tuple[App, dict[str, Any], User]:
    f, h = _feature()
    app, alice = app_on([f]), make_user()
    ok_data(app.dispatch(h["make"], Given("5"), user=alice))
    return app, h, alice


def _titles(app: App) -> list[str]:
    with app.engine.connect() as conn:
        return sorted(conn.execute(sa.select(CkItem.__table__.c.title)).scalars())


@pytest.mark.parametrize(
    ("value", "message"),
    [(5, "must be text, not a number"), (5.0, "must be text, not a number"), (True, "must be text, not true or false")],
)
def test_a_text_column_stores_only_text(setup: tuple[App, dict[str, Any], User], value: object, message: str) -> None:
    app, h, alice = setup
    refused = failure_of(app.dispatch(h["make"], Given(value), user=alice), "validation_error")
    assert refused.details == [
        {"path": "$.value", "message": message, "column": "ck_item.title", "step": '0 aggregate.create "n"'}
    ]
    assert _titles(app) == ["5"]


@pytest.mark.parametrize(
    ("read", "value", "column", "message"),
    [
        ("title", 5, "ck_item.title", "must be text"),
        ("title", 5.5, "ck_item.title", "must be text"),
        ("rank", "2", "ck_item.rank", "must be a number"),
        ("rank_above", "1", "ck_item.rank", "must be a number"),
        ("rank_between", "9", "ck_item.rank", "must be a number"),
        ("price", "0", "ck_item.price", "must be a number"),
        ("flag", 0, "ck_item.flag", "must be true or false"),
        ("flag", "false", "ck_item.flag", "must be true or false"),
        ("titles", [5], "ck_item.title", "must be text"),  # at $.value[0]
        ("title_like", 5, "ck_item.title", "must be text"),
        ("shade", 1, "ck_item.shade", "must be one of RED, BLUE"),
    ],
)
def test_a_read_comparing_a_column_with_a_value_of_another_kind_names_the_field(
    setup: tuple[App, dict[str, Any], User], read: str, value: object, column: str, message: str
) -> None:
    app, h, alice = setup
    for _ in range(2):  # the resolver's run, then a template's if one was made
        path = "$.value[0]" if isinstance(value, list) else "$.value"
        refused = failure_of(app.dispatch(h[read], Given(value, "written"), user=alice), "validation_error")
        compared = f"a value cannot be compared with its column: {message} ({column}, from {path})"
        assert refused.message == f'step 1 read.find_many "r": {compared}'
        assert refused.details == [{"path": path, "message": message, "column": column, "step": '1 read.find_many "r"'}]
        in_query = failure_of(app.query(h[f"query_{read}"], Given(value), user=alice), "validation_error")
        assert in_query.details == [
            {"path": path, "message": message, "column": column, "step": '0 read.find_many "r"'}
        ]
    assert _titles(app) == ["5"]


def test_a_list_holding_a_value_of_another_kind_is_refused_at_it(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    refused = failure_of(app.dispatch(h["titles"], Given(["5", 7]), user=alice), "validation_error")
    assert refused.details == [
        {
            "path": "$.value[1]",
            "message": "must be text, not a number",
            "column": "ck_item.title",
            "step": '1 read.find_many "r"',
        }
    ]


def test_values_of_the_columns_kind_are_compared_as_before(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    found: list[tuple[str, object, list[str]]] = [
        ("title", "5", ["5"]),
        ("title", None, []),
        ("rank", 2, ["5"]),
        ("rank", 2.0, ["5"]),  # numbers with numbers
        ("rank", 2.5, []),
        ("rank_above", 1, ["5"]),
        ("rank_between", 9, ["5"]),
        ("price", 0, ["5"]),
        ("flag", False, ["5"]),
        ("flag", True, []),
        ("titles", ("5", None), ["5"]),
        ("titles", (), []),
        ("title_like", "5%", ["5"]),
        ("shade", Shade.RED, ["5"]),
        ("shade", "RED", ["5"]),  # an Enum column keeps the name
        ("extra", {"k": 1}, ["5"]),  # a decorator over text takes what it converts
    ]
    for _ in range(2):
        for read, value, titles in found:
            given = Given(list(value) if isinstance(value, tuple) else value)
            assert app.query(h[f"query_{read}"], given, user=alice) == Ok(titles), (read, value)


@pytest.mark.parametrize(
    ("read", "sides"),
    [
        ("rank_is_true", "ck_item.rank (a number) with true"),
        ("title_is_rank", "ck_item.title (text) with ck_item.rank (a number)"),
    ],
)
def test_a_comparison_of_two_kinds_in_the_query_itself_is_refused(
    setup: tuple[App, dict[str, Any], User], read: str, sides: str
) -> None:
    app, h, alice = setup
    for _ in range(2):
        refused = failure_of(app.dispatch(h[read], Given(None, "written"), user=alice), "internal_error")
        assert f"the query compares {sides}: " in refused.message
        assert refused.message.startswith('step 1 read.find_many "r" raised StepRefused')
    assert _titles(app) == ["5"]


def test_a_projection_delete_compares_by_kind_too(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    refused = failure_of(app.dispatch(h["forget"], Given("1"), user=alice), "validation_error")
    assert refused.details == [
        {
            "path": "$.value",
            "message": "must be a number",
            "column": "ck_tally.count",
            "step": "1 unsafe_projection_delete",
        }
    ]
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(CK_TALLY)).all() == []  # the upsert before it rolled back
    assert app.dispatch(h["forget"], Given(1), user=alice) == Ok(None)
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(CK_TALLY)).all() == []
