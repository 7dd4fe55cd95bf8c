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

# The same at return_: the result type is what the handler and dispatch give, and mypy
# would report it for the variable (or not at all, once the handler's type solved it).
listed = (
    shop.pipeline(Order)
    .return_(lambda c: ok([]))  # E: var-annotated
)
reveal_type(listed)  # R: kumiko_typed._finished.Finished[_models.Order, list[Any]]
registered = shop.write_handler(
    "listed",
    shop.pipeline(Order)
    .compute("count", lambda c: 1)
    .return_(lambda c: ok({})),  # E: var-annotated
)
reveal_type(registered)  # R: kumiko_typed._feature.WriteHandler[_models.Order, dict[Any, Any]]
inline = shop.write_handler(
    "inline", shop.pipeline(Order).return_(lambda c: ok([]))  # E: var-annotated
)
typed = shop.write_handler("typed", shop.pipeline(Order).return_(lambda c: ok(list[str]())))
reveal_type(typed)  # R: kumiko_typed._feature.WriteHandler[_models.Order, list[str]]
flow = (
    shop.workflow_pipeline(Order)
    .return_(lambda c: ok(set()))  # E: var-annotated
)

# A loop over an empty display: mypy's own ``for x in []`` needs an annotation for x; the
# error is at over= (not at the first step that returns the item, a Never), and the item
# reads as Any.
looped = (
    shop.pipeline(Order)
    .for_each("tag", over=lambda c: set(), do=lambda b: b.compute("seen", lambda c: c.scope["tag"]))  # E: var-annotated
    .for_each("cell", over=lambda c: [], do=lambda b: b.compute("kept", lambda c: reveal_type(c.scope["cell"])))  # E: var-annotated # R: Any
    .for_each("cell", over=lambda c: list[str](), do=lambda b: b.compute("typed", lambda c: reveal_type(c.scope["cell"])))  # R: str
    .return_(lambda c: ok(1))
)
