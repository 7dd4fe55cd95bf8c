"""``renamed=``: an old name must be gone from the pipeline, a new one must be a step's
(checked when the whole pipeline is written in the call, arms and bodies as lambdas)."""

from __future__ import annotations

from kumiko_typed import Feature, manual, ok

from _models import Order

shop = Feature("shop")

shop.workflow(
    "moved",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .branch(name="vip", when=lambda c: c.steps["count"] > 2, on_true=lambda b: b.wait("PT1H", name="hold"))
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.wait("PT1H", name="tick"))
    .return_(lambda c: ok(c.steps["count"])),
    renamed={
        "cool-off": "hold",
        "old-vip": "vip",
        "old-line": "line",
        "old-tick": "tick",
        "total": "count",
        "count": "vip",  # E: kumiko-renamed  # M: renamed= maps "count", which is still a step of this workflow (a stored path is ambiguous); map only names the workflow no longer has
        "pause": "nowhere",  # E: kumiko-renamed  # M: renamed= maps "pause" to "nowhere", which is no step of this workflow; map it to the name of the step that replaces it
    },
)
