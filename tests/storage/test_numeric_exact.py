"""A ``Numeric`` value reads back as the decimal that was written, on both databases.

SQLite keeps a NUMERIC value as a float. SQLAlchemy turned that float back into a ``Decimal``
by printing it with the column's scale (ten digits without one), so the float's binary error
showed: ``12345678.90`` in a ``Numeric()`` read back as ``12345678.9000000004`` and
``123456789012.345`` in a ``Numeric(30, 10)`` as ``123456789012.3450012207``, where PostgreSQL
gave the value written. A value of more significant digits than a float keeps (15) was
silently rounded on SQLite (``12345678901234567890.1234567891`` came back as
``12345678901234567168``) and kept on PostgreSQL; it is now refused on both, at its field."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from decimal import Decimal

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok


class NxAmount(Entity):
    __tablename__ = "nx_amount"
    bare: Mapped[Decimal | None] = mapped_column(sa.Numeric(), nullable=True, default=None)
    wide: Mapped[Decimal | None] = mapped_column(sa.Numeric(30, 10), nullable=True, default=None)
    padded: Mapped[Decimal | None] = mapped_column(sa.Numeric(40, 20), nullable=True, default=None)
    money: Mapped[Decimal | None] = mapped_column(sa.Numeric(12, 2), nullable=True, default=None)
    as_float: Mapped[float | None] = mapped_column(sa.Numeric(asdecimal=False), nullable=True, default=None)


@attrs.frozen
class Put:
    bare: Decimal | None = None
    wide: Decimal | None = None
    padded: Decimal | None = None
    money: Decimal | None = None
    as_float: float | None = None


@attrs.frozen
class Get:
    id: uuid.UUID


ledger = Feature("nx")
ledger.entity(NxAmount)
put = ledger.write_handler(
    "put",
    ledger.pipeline(Put)
    .create("row", NxAmount, data=lambda c: NxAmount(**attrs.asdict(c.payload)))
    .return_(lambda c: ok(c.steps["row"].id)),
)
get = ledger.query_handler(
    "get",
    ledger.query_pipeline(Get)
    .get_one("row", lambda c: sa.select(NxAmount).where(NxAmount.id == c.payload.id))
    .return_(lambda c: ok({f: getattr(c.steps["row"], f) for f in ("bare", "wide", "padded", "money", "as_float")})),
)
total = ledger.query_handler(
    "total",
    ledger.query_pipeline(Get)
    .compute("sum", lambda c: c.db.scalar(sa.select(sa.func.sum(NxAmount.money))))
    .return_(lambda c: ok(c.steps["sum"])),
)


def _read(app: App, user: User, payload: Put) -> dict[str, object]:
    row_id = ok_data(app.dispatch(put, payload, user=user))
    row: dict[str, object] = ok_data(app.query(get, Get(row_id), user=user))
    return row


@pytest.mark.parametrize(
    ("field", "written", "read"),
    [
        ("bare", "12345678.90", "12345678.90"),
        ("bare", "0.1", "0.1"),
        ("bare", "-999999999999999", "-999999999999999"),
        ("bare", "1E+20", "1E+20"),
        ("wide", "123456789012.345", "123456789012.3450000000"),
        ("wide", "99999999999999.9", "99999999999999.9000000000"),
        ("wide", "1234567890.12345", "1234567890.1234500000"),
        ("padded", "12345678901234.5", "12345678901234.50000000000000000000"),
        ("money", "4.2", "4.20"),
        ("money", "-0.01", "-0.01"),
    ],
)
def test_a_numeric_reads_back_as_written(
    app_on: Callable[..., App], user: User, field: str, written: str, read: str
) -> None:
    app = app_on([ledger])
    value = _read(app, user, Put(**{field: Decimal(written)}))[field]
    assert isinstance(value, Decimal) and value == Decimal(read)
    if field != "bare":  # a column without a scale keeps no trailing zeros on SQLite: equal, not same text
        assert str(value) == read


@pytest.mark.parametrize(
    ("field", "written", "digits"),
    [
        ("bare", "12345678901234567890.1234567891", 30),
        ("wide", "1234567890.123456", 16),
        ("bare", "10000000000000001", 17),
    ],
)
def test_more_digits_than_a_float_keeps_are_refused_on_both_databases(
    app_on: Callable[..., App], user: User, field: str, written: str, digits: int
) -> None:
    app = app_on([ledger])
    refused = failure_of(app.dispatch(put, Put(**{field: Decimal(written)}), user=user), "validation_error")
    assert refused.details == [
        {
            "path": f"$.{field}",
            "message": f"must have at most 15 significant digits, not {digits}",
            "column": f"nx_amount.{field}",
            "step": '0 aggregate.create "row"',
        }
    ]
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(NxAmount.__table__)) == 0


def test_a_float_numeric_and_a_sum_read_the_same_on_both_databases(app_on: Callable[..., App], user: User) -> None:
    app = app_on([ledger])
    assert _read(app, user, Put(as_float=12345678.9))["as_float"] == 12345678.9
    for amount in ("0.10", "0.20", "1234567890.07"):
        _read(app, user, Put(money=Decimal(amount)))
    summed = ok_data(app.query(total, Get(uuid.uuid4()), user=user))
    assert isinstance(summed, Decimal) and str(summed) == "1234567890.37"


padded_total = ledger.query_handler(
    "padded_total",
    ledger.query_pipeline(Get)
    .compute("sum", lambda c: c.db.scalar(sa.select(sa.func.sum(NxAmount.padded))))
    .return_(lambda c: ok(c.steps["sum"])),
)


def test_a_sum_of_more_than_15_digits_reads_as_postgresqls(app_on: Callable[..., App], user: User) -> None:
    """Each value has at most 15 digits, their sum has 16, and SQLite's float holds it
    exactly: it was cut to 15 digits (``12345678901234.8``), where PostgreSQL (and the
    float itself) gives ``12345678901234.75``."""
    app = app_on([ledger])
    for amount in ("12345678901234.5", "0.25"):
        _read(app, user, Put(padded=Decimal(amount)))
    summed = ok_data(app.query(padded_total, Get(uuid.uuid4()), user=user))
    assert isinstance(summed, Decimal) and str(summed) == "12345678901234.75000000000000000000"
