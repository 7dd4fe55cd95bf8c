"""Writers for tests/test_write_concurrency_pg.py: a stock aggregate with a read-decide-write
``reserve`` handler (get_one, append_event, a guard that the stock stays >= 0, like the
inventory example's ``adjust_stock``) and ``hold``, which appends and then runs the hooks
in ``HOLD`` with its transaction still open.

As a script::

    python tests/_write_racer.py DATABASE_URL STOCK_ID TENANT_ID

builds its own App, prints ``ready``, waits for a line on stdin (the start signal, so that
every racer starts at the same moment), then reserves one unit at a time until it is
refused for want of stock (or 500 tries), and prints ``result <json>``: how many calls
ended with each code.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, fail, ok


class WrStock(Entity):
    __tablename__ = "write_racer_stock"
    count: Mapped[int]


@attrs.frozen
class NewStock:
    count: int


@attrs.frozen
class Take:
    id: uuid.UUID
    amount: int


@attrs.frozen
class Taken:
    amount: int


feature = Feature("write_racer")
feature.entity(WrStock)
feature.event(Taken, name="write-racer-taken")


@feature.projector(WrStock, Taken)
def _take(row: WrStock, event: Taken) -> None:
    row.count -= event.amount


#: Run by ``hold`` after its append, before its commit.
HOLD: list[Callable[[], object]] = []

new_stock = feature.write_handler(
    "stock:create",
    feature.pipeline(NewStock)
    .create("stock", WrStock, data=lambda c: WrStock(count=c.payload.count))
    .return_(lambda c: ok(c.steps["stock"].id)),
)

reserve = feature.write_handler(
    "stock:reserve",
    feature.pipeline(Take)
    .get_one("stock", lambda c: sa.select(WrStock).where(WrStock.id == c.payload.id))
    .append_event(WrStock, id=lambda c: c.payload.id, event=lambda c: Taken(c.payload.amount))
    .guard(
        lambda c: c.steps["stock"].count >= 0,
        otherwise=lambda c: fail("unprocessable", "not enough stock", {"count": c.steps["stock"].count}),
    )
    .return_(lambda c: ok(c.steps["stock"].count)),
)

hold = feature.write_handler(
    "stock:hold",
    feature.pipeline(Take)
    .get_one("stock", lambda c: sa.select(WrStock).where(WrStock.id == c.payload.id))
    .append_event(WrStock, id=lambda c: c.payload.id, event=lambda c: Taken(c.payload.amount))
    .compute("held", lambda c: [hook() for hook in HOLD])
    .return_(lambda c: ok(c.steps["stock"].count)),
)


def main(url: str, stock: str, tenant: str) -> None:
    app = App([feature], database_url=url)
    user = User(id=uuid.uuid4(), tenant_id=uuid.UUID(tenant))
    codes: Counter[str] = Counter()
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(500):
        result: Any = app.dispatch(reserve, Take(uuid.UUID(stock), 1), user=user)
        code = "ok" if isinstance(result, Ok) else result.code
        codes[code] += 1
        if code == "unprocessable":
            break
    print("result", json.dumps(codes))
    app.dispose()


if __name__ == "__main__":
    main(*sys.argv[1:4])
