"""Quick start: price an order line by line, apply a coupon, and answer with a total.

Run it:  python examples/quickstart.py
Every ``c.steps[...]`` below is typed exactly by mypy with the kumiko-typed plugin.
"""

from __future__ import annotations

import tempfile
import uuid
from decimal import Decimal
from pathlib import Path

import attrs

from kumiko_typed import App, Feature, User, fail, ok


@attrs.frozen
class OrderLine:
    sku: str
    quantity: int
    unit_price: Decimal


@attrs.frozen
class PlaceOrder:
    customer: str
    lines: list[OrderLine]
    coupon: str | None = None


@attrs.frozen
class Quote:
    customer: str
    subtotal: Decimal
    discount: Decimal
    total: Decimal


orders = Feature("orders")

quote_order = orders.write_handler(
    "order:quote",
    orders.pipeline(PlaceOrder)
    .compute("subtotal", lambda c: sum((li.quantity * li.unit_price for li in c.payload.lines), Decimal(0)))
    .guard(lambda c: bool(c.payload.lines), otherwise=lambda c: fail("unprocessable", "an order needs lines"))
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.guard(
            lambda c: c.scope["line"].quantity > 0,
            otherwise=lambda c: fail("unprocessable", f"line {c.scope['line'].sku}: the quantity must be positive"),
        ),
    )
    .branch(
        when=lambda c: c.payload.coupon == "TENOFF",
        on_true=lambda b: b.compute("discount", lambda c: c.steps["subtotal"] / 10),
        on_false=lambda b: b.compute("discount", lambda c: Decimal(0)),
    )
    .return_(
        lambda c: ok(
            Quote(
                customer=c.payload.customer,
                subtotal=c.steps["subtotal"],
                discount=c.steps["discount"],
                total=c.steps["subtotal"] - c.steps["discount"],
            )
        )
    ),
    roles=["Sales"],
)


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="kumiko-quickstart-"))
    app = App([orders], database_url=f"sqlite:///{folder / 'kumiko.sqlite3'}")
    app.create_all()
    seller = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles={"Sales"})
    visitor = User(id=uuid.uuid4(), tenant_id=seller.tenant_id)

    order = PlaceOrder("ada", [OrderLine("tea", 2, Decimal("4.50")), OrderLine("cup", 1, Decimal("12.00"))], "TENOFF")
    print("typed dispatch       ->", app.dispatch(quote_order, order, user=seller))
    print("no lines             ->", app.dispatch(quote_order, PlaceOrder("bob", []), user=seller))
    bad_line = PlaceOrder("bob", [OrderLine("tea", 0, Decimal(1))])
    print("a bad line           ->", app.dispatch(quote_order, bad_line, user=seller))
    print(
        "JSON dispatch        ->",
        app.dispatch_json(
            "orders:order:quote",
            {"customer": "cy", "lines": [{"sku": "pot", "quantity": 1, "unit_price": "30.00"}]},
            user=seller,
        ),
    )
    print(
        "JSON with bad fields ->",
        app.dispatch_json(
            "orders:order:quote",
            {"customer": 7, "lines": [{"sku": "pot", "quantity": "1"}], "extra": True},
            user=seller,
        ),
    )
    print("without the role     ->", app.dispatch(quote_order, order, user=visitor))
    app.dispose()


if __name__ == "__main__":
    main()
