"""``fill=``: each function fills a key a step sets, returns that key's type, and reads
the stored values by the pipeline's keys (a key no step sets is ``misc``, as in ``c.steps``)."""

from __future__ import annotations

from collections.abc import Mapping

from kumiko_typed import Feature, manual, ok

from _models import Order

shop = Feature("shop")


def as_text(stored: Mapping[str, object]) -> str:
    return "x"


shop.workflow(
    "priced",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute("price", lambda c: c.steps["count"] * 1.5)
    .wait("PT1H", name="pause")
    .return_(lambda c: ok(c.steps["price"])),
    fill={
        "price": lambda stored: stored.get("count"),  # E: kumiko-fill  # M: fill= for "price" returns "int | None", but step "price" sets "float"; return a "float" computed from the stored values
        "count": as_text,  # E: kumiko-fill  # M: fill= for "count" returns "str", but step "count" sets "int"; return a "int" computed from the stored values
        "total": lambda stored: stored["cuont"],  # E: kumiko-fill  # M: fill= fills "total", which no step of this workflow sets; fill a key one of its steps sets  # E: misc
    },
)
