"""A read compares a column with a value its type cannot hold: PostgreSQL refused it (it
casts each parameter to the column's type) with no word of the field, while SQLite
compared and found nothing, or could not bind it (a time outside UTC's years).  Both now
give the write path's answer: a ``validation_error`` naming the payload field, whether
the read runs its resolver or its template, in a write handler or a query."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok
from kumiko_typed._limits import MAX_COMPARED

AppOn = Callable[..., App]


class RvThing(Entity):
    __tablename__ = "rv_thing"
    name: Mapped[str] = mapped_column(sa.String(20))
    n: Mapped[int] = mapped_column(sa.Integer, default=0)
    at: Mapped[datetime | None] = mapped_column(sa.DateTime(timezone=True), default=None)
    score: Mapped[float] = mapped_column(sa.Float, default=0.0)


@attrs.frozen
class ByName:
    name: str


@attrs.frozen
class ByNumber:
    n: int


@attrs.frozen
class ByNumbers:
    ns: list[int]


@attrs.frozen
class ByScores:
    scores: list[float]


@attrs.frozen
class Before:
    at: datetime


@attrs.frozen
class NewThing:
    name: str
    n: int


#: A read model of the feature's own (Core), which a projection delete bounds by a count.
_metadata = sa.MetaData()
COUNTS = sa.Table(
    "rv_counts",
    _metadata,
    sa.Column("key", sa.String(20), primary_key=True),
    sa.Column("count", sa.Integer, nullable=False),
)

f = Feature("rv", projections=[COUNTS])
f.entity(RvThing)
add = f.write_handler(
    "add",
    f.pipeline(NewThing)
    .create("thing", RvThing, data=lambda c: RvThing(name=c.payload.name, n=c.payload.n))
    .return_(lambda c: ok(c.steps["thing"].id)),
)
by_name = f.write_handler(
    "by-name",
    f.pipeline(ByName)
    .find_one("thing", lambda c: sa.select(RvThing).where(RvThing.name == c.payload.name))
    .return_(lambda c: ok(c.steps["thing"] is not None)),
)
by_number = f.query_handler(
    "by-number",
    f.query_pipeline(ByNumber)
    .get_one("thing", lambda c: sa.select(RvThing).where(RvThing.n == c.payload.n))
    .return_(lambda c: ok(c.steps["thing"].name)),
)
by_numbers = f.write_handler(
    "by-numbers",
    f.pipeline(ByNumbers)
    .find_many("things", lambda c: sa.select(RvThing).where(RvThing.n.in_(c.payload.ns)))
    .return_(lambda c: ok(len(c.steps["things"]))),
)
by_scores = f.query_handler(  # a Float column: its values are no type's to check, only to count
    "by-scores",
    f.query_pipeline(ByScores)
    .find_many("things", lambda c: sa.select(RvThing).where(RvThing.score.in_(c.payload.scores)))
    .return_(lambda c: ok(len(c.steps["things"]))),
)
before = f.write_handler(
    "before",
    f.pipeline(Before)
    .find_many("things", lambda c: sa.select(RvThing).where(RvThing.at < c.payload.at))
    .return_(lambda c: ok(len(c.steps["things"]))),
)

add_then_read = f.write_handler(
    "add-then-read",
    f.pipeline(ByNumber)
    .create("thing", RvThing, data=lambda c: RvThing(name="new", n=1))
    .find_many("things", lambda c: sa.select(RvThing).where(RvThing.n == c.payload.n))
    .return_(lambda c: ok(len(c.steps["things"]))),
)

forget = f.write_handler(
    "forget",
    f.pipeline(ByNumber)
    .unsafe_projection_delete(COUNTS, where=lambda c: COUNTS.c.count == c.payload.n)
    .return_(lambda c: ok(None)),
)

INT32 = "must be between -2147483648 and 2147483647"


@pytest.fixture
def app(app_on: AppOn, admin: User) -> App:
    app = app_on([f])
    ok_data(app.dispatch(add, NewThing("tea", 7), user=admin))
    return app


def _problem(path: str, message: str, column: str, step: str) -> dict[str, str]:
    return {"path": path, "message": message, "column": column, "step": step}


@pytest.mark.parametrize("warm", [False, True], ids=["first-call", "template"])
def test_a_number_the_column_cannot_hold_is_a_validation_error_naming_its_field(
    app: App, admin: User, warm: bool
) -> None:
    if warm:  # the resolver has run once: its template binds the next call's values
        assert ok_data(app.query_json("rv:by-number", {"n": 7}, user=admin)) == "tea"
        assert ok_data(app.dispatch(by_numbers, ByNumbers([7, 8]), user=admin)) == 1
    refused = failure_of(app.query_json("rv:by-number", {"n": 2**40}, user=admin), "validation_error")
    step = '0 read.get_one "thing"'
    assert refused.details == [_problem("$.n", INT32, "rv_thing.n", step)]
    assert refused.message == f"step {step}: a value cannot be compared with its column: {INT32} (rv_thing.n, from $.n)"
    listed = failure_of(app.dispatch(by_numbers, ByNumbers([7, -(2**31) - 1]), user=admin), "validation_error")
    assert listed.details == [_problem("$.ns[1]", INT32, "rv_thing.n", '0 read.find_many "things"')]
    # At the column's bounds, a read finds nothing, as before, on both databases.
    assert failure_of(app.query(by_number, ByNumber(2**31 - 1), user=admin), "not_found")
    assert ok_data(app.dispatch(by_numbers, ByNumbers([-(2**31)]), user=admin)) == 0


@pytest.mark.parametrize("warm", [False, True], ids=["first-call", "template"])
def test_text_no_column_can_hold_is_a_validation_error_and_a_long_text_finds_nothing(
    app: App, admin: User, warm: bool
) -> None:
    if warm:
        assert ok_data(app.dispatch(by_name, ByName("tea"), user=admin)) is True
    step = '0 read.find_one "thing"'
    for name, message in [
        ("te\x00a", "must not contain NUL characters (U+0000)"),
        ("te\udc80a", "is not valid Unicode (it holds a lone surrogate)"),
    ]:
        refused = failure_of(app.dispatch(by_name, ByName(name), user=admin), "validation_error")
        assert refused.details == [_problem("$.name", message, "rv_thing.name", step)]
    # Longer than the column: no row can hold it, so none matches (a read is no write).
    assert ok_data(app.dispatch(by_name, ByName("tea" * 10), user=admin)) is False


def test_a_time_outside_utcs_years_is_a_validation_error(app: App, admin: User) -> None:
    late = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-12)))
    refused = failure_of(app.dispatch(before, Before(late), user=admin), "validation_error")
    message = "must be between years 1 and 9999 in UTC"
    assert refused.details == [_problem("$.at", message, "rv_thing.at", '0 read.find_many "things"')]
    edge = datetime(9999, 12, 31, 22, 59, tzinfo=timezone(timedelta(hours=-1)))
    assert ok_data(app.dispatch(before, Before(edge), user=admin)) == 0


def test_a_refused_read_rolls_back_what_the_handler_wrote(app: App, admin: User) -> None:
    refused = failure_of(app.dispatch(add_then_read, ByNumber(2**40), user=admin), "validation_error")
    assert refused.details == [_problem("$.n", INT32, "rv_thing.n", '1 read.find_many "things"')]
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(RvThing.__table__)) == 1


def test_a_projection_delete_bounded_by_such_a_value_is_the_same_validation_error(app: App, admin: User) -> None:
    refused = failure_of(app.dispatch(forget, ByNumber(2**40), user=admin), "validation_error")
    assert refused.details == [_problem("$.n", INT32, "rv_counts.count", "0 unsafe_projection_delete")]
    assert ok_data(app.dispatch(forget, ByNumber(7), user=admin)) is None


@pytest.mark.parametrize("warm", [False, True], ids=["first-call", "template"])
def test_an_in_list_longer_than_a_read_compares_is_a_validation_error_on_both_databases(
    app: App, admin: User, warm: bool
) -> None:
    """Before: PostgreSQL refused a statement of more than 65535 parameters as a whole
    (``internal_error``, a 500 over HTTP, for a list a client sent), while SQLite read it —
    up to its own build's limit (32766 by default), then the same ``internal_error``."""
    if warm:
        assert ok_data(app.dispatch(by_numbers, ByNumbers([7]), user=admin)) == 1
        assert ok_data(app.query(by_scores, ByScores([0.0]), user=admin)) == 1
    assert MAX_COMPARED == 32_000
    assert ok_data(app.dispatch(by_numbers, ByNumbers(list(range(MAX_COMPARED))), user=admin)) == 1
    message = f"holds 70000 values, and a read compares at most {MAX_COMPARED} (each is a parameter of the statement)"
    many = failure_of(app.dispatch(by_numbers, ByNumbers(list(range(70_000))), user=admin), "validation_error")
    step = '0 read.find_many "things"'
    assert many.details == [_problem("$.ns", f"{message}; read in batches", "rv_thing.n", step)]
    scores = ByScores([float(i) for i in range(70_000)])
    floats = failure_of(app.query(by_scores, scores, user=admin), "validation_error")
    assert floats.details == [_problem("$.scores", f"{message}; read in batches", "rv_thing.score", step)]
    just_over = ByScores([0.5] * (MAX_COMPARED + 1))
    assert failure_of(app.query(by_scores, just_over, user=admin), "validation_error").details[0]["path"] == "$.scores"
