"""Arithmetic of integers, ``Numeric`` and floats answers the same on SQLite and PostgreSQL.

PostgreSQL computes a ``numeric`` exactly; SQLite keeps a NUMERIC as a float and computed
with floats.  Each defect below answered one number on one database and another (or
nothing) on the other; each is now the same answer, or the same refusal, on both.  The
last test is a seeded differential property over the operators ``set=``/``where=`` take.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data, refused_by_the_database
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok

AppOn = Callable[..., App]


class NpItem(Entity):
    __tablename__ = "np_item"
    name: Mapped[str | None] = mapped_column(sa.String(12), nullable=True, default=None)
    n: Mapped[int | None] = mapped_column(sa.Integer, nullable=True, default=None)
    big: Mapped[int | None] = mapped_column(sa.BigInteger, nullable=True, default=None)
    x: Mapped[float | None] = mapped_column(sa.Float, nullable=True, default=None)
    amt: Mapped[Decimal | None] = mapped_column(sa.Numeric(8, 2), nullable=True, default=None)
    amt2: Mapped[Decimal | None] = mapped_column(sa.Numeric(8, 2), nullable=True, default=None)
    rate: Mapped[Decimal | None] = mapped_column(sa.Numeric(6, 3), nullable=True, default=None)
    plain: Mapped[Decimal | None] = mapped_column(sa.Numeric, nullable=True, default=None)


@attrs.frozen
class Put:
    values: dict[str, Any]


@attrs.frozen
class Raw:
    statement: Any


np = Feature("np")
np.entity(NpItem)
put = np.write_handler(
    "put",
    np.pipeline(Put).create("row", NpItem, data=lambda c: NpItem(**c.payload.values)).return_(lambda c: ok(None)),
)
read = np.query_handler(
    "read",
    np.query_pipeline(Raw).find_many("r", lambda c: c.payload.statement).return_(lambda c: ok(list(c.steps["r"]))),
)


@pytest.fixture
def app(app_on: AppOn) -> App:
    return app_on([np])


def _put(app: App, user: User, **values: object) -> None:
    ok_data(app.dispatch(put, Put(values), user=user))


def _read(app: App, user: User, statement: Any) -> Any:
    return app.query(read, Raw(statement), user=user)


def _refused(app: App, user: User, statement: Any, *says: str) -> None:
    refused = failure_of(_read(app, user, statement), "internal_error")
    assert 'step 0 read.find_many "r" raised StepRefused: the query ' in refused.message
    for text in says:
        assert text in refused.message, refused.message


def test_an_integer_times_a_numeric_cast_to_fewer_places_rounds_the_exact_product(app: App, user: User) -> None:
    """``3 * 0.15`` is 0.45 on PostgreSQL, 0.44999999999999996 as SQLite's float: cast to
    one place it read 0.4 there and 0.5 here.  SQLite now computes the decimal product."""
    _put(app, user, n=3, amt=Decimal("0.15"))
    for product in (NpItem.n * NpItem.amt, NpItem.amt * NpItem.n):
        assert ok_data(_read(app, user, sa.select(sa.cast(product, sa.Numeric(15, 1))))) == [Decimal("0.5")]


def test_a_sum_of_numerics_compared_at_its_exact_answer_matches_on_both(app: App, user: User) -> None:
    """``0.10 + 0.20`` is 0.30000000000000004 as a float: ``> 0.30`` held on SQLite only,
    and so did ``amt + amt + amt > 0.30`` (a chain SQLAlchemy keeps as one list, which
    SQLite's arithmetic passed by)."""
    _put(app, user, name="a", amt=Decimal("0.10"), amt2=Decimal("0.20"))
    for total in (NpItem.amt + NpItem.amt2, NpItem.amt + NpItem.amt + NpItem.amt, NpItem.amt2 - NpItem.amt * 3):
        statement = sa.select(NpItem.name).where(total > Decimal("0.30"))
        assert ok_data(_read(app, user, statement)) == []
    equal = sa.select(NpItem.name).where(NpItem.amt + NpItem.amt2 == Decimal("0.30"))
    assert ok_data(_read(app, user, equal)) == ["a"]


def test_a_chain_of_integers_past_its_type_is_refused_on_both(app: App, user: User) -> None:
    """``n + n + n`` of 2**30 is past PostgreSQL's 32 bits; SQLite's chain answered
    3221225472 (it was checked as a binary only)."""
    _put(app, user, n=2**30)
    refused_by_the_database(_read(app, user, sa.select(NpItem.n + NpItem.n + NpItem.n)))
    assert ok_data(_read(app, user, sa.select(NpItem.n - NpItem.n + NpItem.n))) == [2**30]


def test_numerics_of_two_scales_are_refused_uncast_and_exact_cast(app: App, user: User) -> None:
    """SQLAlchemy types ``rate + amt`` as ``amt``'s ``Numeric(8, 2)``: SQLite's float was
    read to 2 places (0.27), PostgreSQL's answer keeps the 3 (0.265)."""
    _put(app, user, rate=Decimal("0.115"), amt=Decimal("0.15"))
    for uncast in (NpItem.rate + NpItem.amt, NpItem.rate - NpItem.amt, NpItem.amt % NpItem.rate):
        _refused(app, user, sa.select(uncast), "SQLAlchemy types it as one side's", "cast(x ")
    _refused(app, user, sa.select(NpItem.rate + NpItem.amt + NpItem.amt), "uncast")
    exact = sa.select(sa.cast(NpItem.rate + NpItem.amt, sa.Numeric(15, 3)))
    assert ok_data(_read(app, user, exact)) == [Decimal("0.265")]
    assert ok_data(_read(app, user, sa.select(NpItem.amt + NpItem.n))) == [None]


def test_an_integer_remainder_of_a_numeric_is_postgresqls_on_both(app: App, user: User) -> None:
    """SQLite's ``%`` made both sides integers: ``7 % 2.50`` was 1 (PostgreSQL: 2.00), and
    ``5 % 0.115`` a remainder of 0, NULL.  SQLAlchemy types it as an integer, where
    PostgreSQL answers a ``Decimal``: uncast it is refused."""
    _put(app, user, name="a", n=7, amt=Decimal("2.50"), rate=Decimal("0.115"))
    remainders = (sa.cast(NpItem.n % NpItem.amt, sa.Numeric(12, 2)), sa.cast(NpItem.n % NpItem.rate, sa.Numeric(12, 3)))
    assert [ok_data(_read(app, user, sa.select(r))) for r in remainders] == [[Decimal("2.00")], [Decimal("0.100")]]
    _refused(app, user, sa.select(NpItem.n % NpItem.amt), "SQLAlchemy types it as an integer")


def test_a_numeric_with_a_float_is_a_float_on_both(app: App, user: User) -> None:
    """PostgreSQL computes ``amt * x`` as a double precision, which SQLAlchemy reads as the
    ``Numeric``: each database rounded the float to its scale its own way.  Cast to a
    ``Numeric``, both take the float's first 15 digits, as PostgreSQL converts one
    (1.15 * 0.1 is 0.11499999999999999: SQLite read 0.11, PostgreSQL 0.12)."""
    _put(app, user, amt=Decimal("1.15"), x=0.1)
    _refused(app, user, sa.select(NpItem.amt * NpItem.x), "PostgreSQL answers a float")
    cast = sa.select(sa.cast(NpItem.amt * NpItem.x, sa.Numeric(15, 2)))
    assert ok_data(_read(app, user, cast)) == [Decimal("0.12")]
    assert ok_data(_read(app, user, sa.select(sa.cast(NpItem.amt * NpItem.x, sa.Float)))) == [1.15 * 0.1]


def test_an_integer_floor_division_by_a_float_computes_with_integers_on_both(app: App, user: User) -> None:
    """``n // x`` is PostgreSQL's ``floor`` of a double precision, which SQLAlchemy types
    as an integer: SQLite's check of integer arithmetic refused ``n // x + n``, where
    PostgreSQL answered."""
    _put(app, user, name="a", n=3, x=2.0)
    statement = sa.select(NpItem.name).where(NpItem.n // NpItem.x + NpItem.n > 0)
    assert ok_data(_read(app, user, statement)) == ["a"]


def test_avg_and_sum_of_numerics_answer_alike_or_are_refused(app: App, user: User) -> None:
    """``avg`` of a ``Numeric`` was a float on SQLite (41.78999999999998), a ``Decimal`` on
    PostgreSQL (41.7900000000000000); ``sum`` of a hundred 0.1s in a ``Numeric`` of no
    scale 9.99999999999998 and 10.0; a sum cast to fewer places than its values have
    may round the float's error the other way."""
    for _ in range(100):
        _put(app, user, plain=Decimal("0.1"), amt=Decimal("0.10"), n=1, rate=Decimal("0.005"))
    _refused(app, user, sa.select(sa.func.avg(NpItem.amt)), "avg() of np_item.amt", "uncast")
    _refused(app, user, sa.select(sa.func.avg(NpItem.n)), "avg() of np_item.n", "uncast")
    _refused(app, user, sa.select(sa.func.sum(NpItem.plain)), "sum() of np_item.plain", "Numeric of no scale")
    _refused(app, user, sa.select(sa.cast(sa.func.sum(NpItem.plain), sa.Numeric(15, 2))), "Numeric of no scale")
    fewer = sa.select(sa.cast(sa.func.sum(NpItem.rate), sa.Numeric(15, 2)))
    _refused(app, user, fewer, "cast to 2 places, fewer than the 3 its values have")
    _refused(app, user, sa.select(sa.cast(sa.func.sum(NpItem.rate), sa.Integer)), "cast to 0 places")
    alike = (
        sa.func.sum(NpItem.amt),
        sa.cast(sa.func.avg(NpItem.amt), sa.Numeric(12, 2)),
        sa.cast(sa.func.avg(NpItem.n).over(), sa.Numeric(12, 1)),
        sa.func.sum(NpItem.rate),
    )
    answers = [ok_data(_read(app, user, sa.select(a).limit(1))) for a in alike]
    assert answers == [[Decimal("10.00")], [Decimal("0.10")], [Decimal("1.0")], [Decimal("0.500")]]


# --- the differential property ----------------------------------------------------------

_COLUMNS = ("n", "big", "x", "amt", "amt2", "rate", "plain")
_OPERATORS = (operator.add, operator.sub, operator.mul, operator.truediv, operator.mod, operator.floordiv)


def _value(rng: random.Random, column: str) -> Any:
    if column in ("n", "big"):
        return rng.choice([0, 1, -1, 3, 7, -7, 12, rng.randint(-1000, 1000)])
    if column == "x":
        return rng.choice([0.0, 0.1, 0.5, -2.5, 1.25, 2.675, round(rng.uniform(-100, 100), 3)])
    if column in ("amt", "amt2"):
        return Decimal(rng.randint(-99999, 99999)).scaleb(-2)
    if column == "rate":
        return Decimal(rng.randint(-9999, 9999)).scaleb(-3)
    return Decimal(rng.randint(-99999, 99999)).scaleb(-rng.randint(0, 4))


#: Rows at the halves a float misses: 3 * 0.15, 0.10 + 0.20, 1.90 * 1.05, 1.15 * 0.1.
_EDGES = (
    {"n": 3, "amt": Decimal("0.15"), "amt2": Decimal("0.20"), "rate": Decimal("0.115"), "plain": Decimal("0.1")},
    {"n": 7, "amt": Decimal("0.10"), "amt2": Decimal("0.20"), "rate": Decimal("1.050"), "x": 0.1, "big": -3},
    {"n": -3, "amt": Decimal("1.90"), "amt2": Decimal("1.15"), "rate": Decimal("0.005"), "x": 2.675, "big": 10},
)
_BOUNDS = (Decimal("0.30"), Decimal("0.45"), Decimal("1.995"), Decimal("0.265"), Decimal("0.115"), Decimal("0.9"))


def _statement(rng: random.Random) -> Any:
    """A random read of arithmetic on the columns and payload values, read, cast,
    compared or aggregated."""
    left = getattr(NpItem, rng.choice(_COLUMNS))
    right_column = rng.choice(_COLUMNS)
    right = getattr(NpItem, right_column) if rng.random() < 0.7 else _value(rng, right_column)
    expression = rng.choice(_OPERATORS)(left, right)
    if rng.random() < 0.4:
        expression = rng.choice(_OPERATORS[:3])(expression, getattr(NpItem, rng.choice(_COLUMNS)))
    how = rng.choice(("read", "cast", "where", "aggregate"))
    if how == "cast":
        into = sa.Numeric(rng.choice((6, 10, 15)), rng.choice((0, 1, 2, 3, 4)))
        return sa.select(sa.cast(expression, into)).order_by(NpItem.name)
    if how == "where":
        compare = rng.choice((operator.gt, operator.ge, operator.eq))
        bound = rng.choice((*_BOUNDS, _value(rng, "amt")))
        return sa.select(NpItem.name).where(compare(expression, bound)).order_by(NpItem.name)
    if how == "aggregate":
        summed = rng.choice((getattr(NpItem, rng.choice(_COLUMNS)), expression))
        aggregate = getattr(sa.func, rng.choice(("sum", "avg", "min", "max")))(summed)
        if rng.random() < 0.5:
            aggregate = sa.cast(aggregate, sa.Numeric(15, rng.choice((0, 1, 2, 3))))
        return sa.select(aggregate)
    return sa.select(expression).order_by(NpItem.name)


def _outcome(answer: object) -> object:
    """What must be equal on both: an ``Ok``'s values with their types, a ``Failure``'s
    code and message without its error id."""
    if isinstance(answer, Ok):
        return [(type(v), v) for v in answer.data]
    assert isinstance(answer, Failure)
    return answer.code, answer.message.split(" (error id ")[0]


@pytest.fixture
def both(tmp_path: Path, fresh_postgres_url: str) -> Iterator[tuple[App, App]]:
    """The App on a SQLite file and on a fresh PostgreSQL database."""
    apps = (App([np], database_url=f"sqlite:///{tmp_path / 'np.sqlite3'}"), App([np], database_url=fresh_postgres_url))
    for each in apps:
        each.create_all()
    yield apps
    for each in apps:
        each.dispose()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_arithmetic_answers_alike_on_both_databases(both: tuple[App, App], user: User, seed: int) -> None:
    """Seeded random rows (and rows at the halves a float misses) and 400 random reads of
    ``+ - * / // %`` on ``Integer``, ``BigInteger``, ``Numeric(p, s)``, ``Numeric`` and
    ``Float`` columns and payload values, read, cast, compared and aggregated: every
    answer and every refusal is the same on both databases."""
    rng = random.Random(seed)
    rows = [{c: _value(rng, c) for c in _COLUMNS} for _ in range(5)] + [dict(e) for e in _EDGES]
    for number, row in enumerate(rows):
        for each in both:
            ok_data(each.dispatch(put, Put({"name": f"{number:02}", **row}), user=user))
    differ = []
    for _ in range(400):
        statement = _statement(rng)
        sqlite, postgres = (_outcome(_read(each, user, statement)) for each in both)
        if sqlite != postgres:
            differ.append(f"{statement.compile(compile_kwargs={'literal_binds': True})}\n{sqlite}\n{postgres}")
    assert not differ, "\n\n".join(differ[:5])
