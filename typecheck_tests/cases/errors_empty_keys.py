"""No silent Any before the first key: with the plugin, no steps and no scope are empty TypedDicts."""

from __future__ import annotations

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")

first_step = shop.pipeline(Order).compute("a", lambda c: c.steps["nope"])  # E: misc
first_in_arm = shop.pipeline(Order).branch(
    when=lambda c: True,
    on_true=lambda b: b.compute("a", lambda c: c.steps["nope"]),  # E: misc
)
first_in_body = shop.pipeline(Order).for_each(
    "line",
    over=lambda c: c.payload.lines,
    do=lambda b: b.compute("a", lambda c: c.steps["nope"]),  # E: misc
)
empty_return = shop.pipeline(Order).return_(lambda c: ok(c.steps["nope"]))  # E: misc
no_loop = shop.pipeline(Order).compute("a", lambda c: c.scope["line"])  # E: misc
after_loop = (
    shop.pipeline(Order)
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.compute("q", lambda c: c.scope["line"].qty))
    .compute("late", lambda c: c.scope["line"])  # E: misc
)
in_workflow = shop.workflow_pipeline(Order).compute("a", lambda c: c.steps["nope"])  # E: misc
reveal_type(shop.pipeline(Order))  # R: kumiko_typed._builders.Pipeline[_models.Order, TypedDict({}), TypedDict({}), Never]
