"""guard: a refusal at any depth adds no key; the steps after it see the same keys."""

from __future__ import annotations

from sqlalchemy import select

from kumiko_typed import Feature, fail, manual, ok

from _models import Order, Product

shop = Feature("shop")

checked = (
    shop.pipeline(Order)
    .get_one("product", lambda c: select(Product).where(Product.id == c.payload.id))
    .guard(
        lambda c: c.steps["product"].stock >= len(c.payload.lines),
        otherwise=lambda c: fail("unprocessable", f"only {c.steps['product'].stock} in stock"),
    )
    .branch(
        when=lambda c: c.payload.lines == [],
        on_true=lambda b: b.guard(lambda c: c.steps["product"].stock > 0, otherwise=lambda c: fail("empty", "none")),
    )
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.guard(lambda c: c.scope["line"].qty > 0, otherwise=lambda c: fail("bad_line", "no quantity"))
        .compute("seen", lambda c: c.scope["line"]),
    )
    .compute("keys", lambda c: reveal_type(c.steps))  # R: TypedDict({'product'=: _models.Product, 'seen'=: _models.Line | None}) # PR: Keys[Key[Literal['product'], Product], Key[Literal['seen'], Line | None]]
    .return_(lambda c: ok(c.steps["product"].stock))
)
reveal_type(checked)  # R: kumiko_typed._finished.Finished[_models.Order, int] # PR: Finished[Order, int]

flow = shop.workflow(
    "flow",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order)
    .guard(lambda c: bool(c.payload.lines), otherwise=lambda c: fail("unprocessable", "no lines"))
    .retry(times=2, do=lambda b: b.guard(lambda c: True, otherwise=lambda c: fail("unprocessable", "never")))
    .compute("n", lambda c: len(c.payload.lines)),
)
reveal_type(flow)  # R: kumiko_typed._feature.Workflow[_models.Order, None] # PR: Workflow[Order, None]

# The steps after a guard see what its test proves (with the plugin: pyright, which narrows
# across no lambdas, reads the key as declared), otherwise= what it disproves; a guard in an
# arm or a loop body narrows there only.
found = (
    shop.pipeline(Order)
    .find_one("product", lambda c: select(Product).where(Product.id == c.payload.id))
    .compute("note", lambda c: c.payload.note or None)
    .guard(
        lambda c: c.steps["product"] is not None,
        otherwise=lambda c: fail("not_found", str(reveal_type(c.steps["product"]))),  # R: None # PR: Product | None
    )
    .compute("stock", lambda c: reveal_type(c.steps["product"]))  # R: _models.Product # PR: Product | None
    .branch(
        when=lambda c: c.payload.lines == [],
        on_true=lambda b: b.guard(lambda c: isinstance(c.steps["note"], str), otherwise=lambda c: fail("x", "y"))
        .compute("upper", lambda c: reveal_type(c.steps["note"])),  # R: str # PR: str | None
    )
    .compute("kept", lambda c: reveal_type(c.steps["note"]))  # R: str | None # PR: str | None
    .return_(lambda c: ok(1))
)
