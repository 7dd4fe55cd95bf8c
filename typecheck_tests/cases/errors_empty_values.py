"""A step whose resolver returns an empty collection mypy cannot give an item type: the
error is at the step and says how to type it, not mypy's "Need type annotation" for the
variable holding the whole pipeline, whose annotation would not help."""

from __future__ import annotations

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")

cells = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute("cells", lambda c: [])  # E: var-annotated
    .compute("seen", lambda c: reveal_type(c.steps["cells"]))  # R: list[Any]
    .compute("index", lambda c: {})  # E: var-annotated
    .compute("typed", lambda c: list[str]())
    .return_(lambda c: ok((c.steps["cells"], reveal_type(c.steps["typed"]))))  # R: list[str]
)

handler = shop.write_handler(
    "arms",
    shop.pipeline(Order)
    .branch(when=lambda c: True, on_true=lambda b: b.compute("tags", lambda c: set()))  # E: var-annotated
    .return_(lambda c: ok(reveal_type(c.steps["tags"]))),  # R: set[Any] | None
)
