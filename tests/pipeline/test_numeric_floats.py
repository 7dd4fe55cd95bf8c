"""A float written to a ``Numeric(p, s)`` column (``asdecimal=False``, ``Mapped[float]``) is
checked like a Decimal: PostgreSQL refused one with too many digits before the point
("the database refused a value", path ``$``) and rounded extra decimals away, while SQLite
stored both."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok


class T14Price(Entity):
    __tablename__ = "t14_price"
    amount: Mapped[float] = mapped_column(sa.Numeric(6, 2, asdecimal=False))


@attrs.frozen
class NewPrice:
    amount: float


def _feature() -> tuple[Feature[str], object]:
    f = Feature("t14")
    f.entity(T14Price)
    create = f.write_handler(
        "price:new",
        f.pipeline(NewPrice)
        .create("price", T14Price, data=lambda c: T14Price(amount=c.payload.amount))
        .return_(lambda c: ok(c.steps["price"].entity.amount)),
    )
    return f, create


@pytest.mark.parametrize(
    ("amount", "message"),
    [
        (12345.5, "must have at most 4 digits before the decimal point"),
        (1.125, "must have at most 2 digits after the decimal point"),
    ],
)
def test_a_float_that_does_not_fit_a_numeric_column_is_refused_at_its_field(
    app_on: Callable[..., App], admin: User, amount: float, message: str
) -> None:
    f, _create = _feature()
    app = app_on([f])
    result = app.dispatch_json("t14:price:new", {"amount": amount}, user=admin)
    assert isinstance(result, Failure) and result.code == "validation_error", result
    assert result.details == [
        {"path": "$.amount", "message": message, "column": "t14_price.amount", "step": '0 aggregate.create "price"'}
    ]


def test_a_float_that_fits_is_stored(app_on: Callable[..., App], admin: User) -> None:
    f, _create = _feature()
    app = app_on([f])
    assert app.dispatch_json("t14:price:new", {"amount": 1234.5}, user=admin) == Ok(1234.5)
    assert app.dispatch_json("t14:price:new", {"amount": 0.1}, user=admin) == Ok(0.1)


class T14Count(Entity):
    __tablename__ = "t14_count"
    pieces: Mapped[int] = mapped_column(default=0)


@attrs.frozen
class Share:
    total: int
    ways: int


@attrs.frozen
class Shared:
    ways: int


def _counting() -> Feature[str]:
    """A projector dividing with ``/``: a float, whole only when the division comes out even."""
    f = Feature("t14c")
    f.entity(T14Count)
    f.event(Shared)

    @f.projector(T14Count, Shared)
    def _share(row: T14Count, event: Shared) -> None:
        row.pieces = row.pieces / event.ways  # type: ignore[assignment]

    f.write_handler(
        "share",
        f.pipeline(Share)
        .create("count", T14Count, data=lambda c: T14Count(pieces=c.payload.total))
        .append_event(T14Count, id=lambda c: c.steps["count"].id, event=lambda c: Shared(c.payload.ways))
        .return_(lambda c: ok(c.steps["count"].entity.pieces)),
    )
    return f


def test_a_fraction_for_an_integer_column_is_refused_the_same_on_both_databases(
    app_on: Callable[..., App], admin: User
) -> None:
    """Before: SQLite stored 2.5 in the INTEGER column (and read it back as 2.5) while
    PostgreSQL rounded it to 2; a Decimal could not be bound on SQLite at all."""
    app = app_on([_counting()])
    refused = app.dispatch_json("t14c:share", {"total": 5, "ways": 2}, user=admin)
    assert isinstance(refused, Failure) and refused.code == "validation_error", refused
    step = "1 aggregate.append_event"
    assert refused.details == [
        {"path": "$", "message": "must be a whole number", "column": "t14_count.pieces", "step": step}
    ]
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(T14Count.__table__)) == 0
    # A division that comes out even is a whole number, the same integer on both.
    assert app.dispatch_json("t14c:share", {"total": 6, "ways": 2}, user=admin) == Ok(3)
