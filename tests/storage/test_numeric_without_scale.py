"""A ``Numeric`` of no scale reads back in one form on SQLite and PostgreSQL.

PostgreSQL's ``numeric`` keeps each value's own scale, SQLite's float keeps none: before,
``Decimal("1.50")`` read back ``1.50`` there and ``1.5`` here, and a large whole number
``1000000000000000`` there and ``1E+15`` here — equal values whose texts (a JSON answer,
an event, ``str()``) differed.  Now both read such a column as ``plain_decimal`` writes
it: no trailing zeros after the point, no exponent before it (docs/design-decisions.md,
"A ``Numeric`` keeps 15 significant digits").  A column with a scale reads padded to it,
as before.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import attrs
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok


class NsAmount(Entity):
    __tablename__ = "ns_amount"
    plain: Mapped[Decimal | None] = mapped_column(sa.Numeric, default=None)
    scaled: Mapped[Decimal | None] = mapped_column(sa.Numeric(30, 2), default=None)


@attrs.frozen
class Put:
    v: Any


f = Feature("ns")
f.entity(NsAmount)
put = f.write_handler(
    "put",
    f.pipeline(Put)
    .create("x", NsAmount, data=lambda c: NsAmount(plain=c.payload.v))
    .return_(lambda c: ok(c.steps["x"].id)),
)
get = f.query_handler(
    "get",
    f.query_pipeline(Put)
    .get_one("x", lambda c: sa.select(NsAmount).where(NsAmount.id == c.payload.v))
    .return_(lambda c: ok(str(c.steps["x"].plain))),
)

#: (written, the text it reads back as on both)
WRITTEN: list[tuple[object, str]] = [
    (Decimal("1.50"), "1.5"),
    (Decimal("-2.500"), "-2.5"),
    (Decimal("100"), "100"),
    (Decimal("1E+2"), "100"),
    (Decimal(10**15), "1000000000000000"),
    (Decimal("1E+20"), "100000000000000000000"),
    (Decimal("-0.00"), "0"),
    (Decimal("0.0000001"), "1E-7"),
    (Decimal("123456789012.345"), "123456789012.345"),
    (7, "7"),
    (2.5, "2.5"),
]


def test_a_numeric_without_a_scale_reads_back_in_one_form_on_both(app_on: Callable[..., App], user: User) -> None:
    app = app_on([f])
    table = NsAmount.__table__
    for written, text in WRITTEN:
        made = ok_data(app.dispatch(put, Put(written), user=user))
        with app.engine.connect() as conn:
            read = conn.execute(sa.select(table.c.plain).where(table.c.id == made)).scalar_one()
        assert (type(read), str(read)) == (Decimal, text), written
        assert ok_data(app.query(get, Put(made), user=user)) == text, written
    with app.engine.connect() as conn:
        texts = sorted(str(v) for v in conn.scalars(sa.select(table.c.plain)))
    assert texts == sorted(t for _, t in WRITTEN)
    # The events keep the values as written: replayed, the rows are equal.
    report = ok_data(app.rebuild_projection(NsAmount, user=user, verify=True))
    assert report.matches, report


def test_a_numeric_with_a_scale_reads_back_padded_to_it_on_both(app_on: Callable[..., App], user: User) -> None:
    app = app_on([f])
    table = NsAmount.__table__
    with app.engine.begin() as conn:  # a computed value of the column's type
        read = conn.scalar(sa.select(sa.cast(sa.literal(Decimal("1.5")), table.c.scaled.type)))
    assert str(read) == "1.50"
