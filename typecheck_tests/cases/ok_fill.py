"""``fill=``: a function reads the run's stored values, typed by the pipeline's keys
(each possibly absent), and returns the value of the key it fills."""

from __future__ import annotations

from kumiko_typed import Feature, manual, ok

from _models import Order

shop = Feature("shop")

builder = (
    shop.workflow_pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute("price", lambda c: c.steps["count"] * 1.5)
    .wait("PT1H", name="pause")
)
priced = shop.workflow(
    "priced",
    trigger=manual(Order),
    pipeline=builder.return_(lambda c: ok(c.steps["price"])),
    renamed={"cool-off": "pause"},
    fill={"price": lambda stored: stored.get("count", 0) * 1.5},
)
reveal_type(priced)  # R: kumiko_typed._feature.Workflow[_models.Order, float] # PR: Workflow[Order, float]
unended = shop.workflow(
    "unended", trigger=manual(Order), pipeline=builder, fill={"price": lambda stored: float(stored["count"])}
)
