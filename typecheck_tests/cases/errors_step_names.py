"""Step names: empty names are refused; a duplicate keeps the first definition's type."""

from __future__ import annotations

import enum
from typing import Final

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")


class Key(enum.StrEnum):
    TOTAL = "total"
    COUNT = enum.auto()


empty = shop.pipeline(Order).compute("", lambda c: 1)  # E: kumiko-step-name  # M: The name of step "compute" is empty; name the key it adds, e.g. "total"
# An empty name= of a wait, a branch or a retry, which the App refuses at boot: a stored run
# finds its step by that name.
EMPTY: Final = ""
empty_given = (
    shop.workflow_pipeline(Order)
    .wait("PT1H", name="")  # E: kumiko-step-name  # M: name= of step "wait" is empty; give it a name such as "cool-off", or leave name= out
    .branch(when=lambda c: True, on_true=lambda b: b.wait("PT1H"), name=EMPTY)  # E: kumiko-step-name  # M: name= of step "branch" is empty; give it a name such as "cool-off", or leave name= out
    .retry(times=2, do=lambda r: r.compute("tried", lambda c: 1), name="")  # E: kumiko-step-name  # M: name= of step "retry" is empty; give it a name such as "cool-off", or leave name= out
    .wait("PT1H", name="cool-off")
)
empty_arm = shop.pipeline(Order).branch(when=lambda c: True, on_true=lambda b: b.compute("a", lambda c: 1), name="")  # E: kumiko-step-name  # M: name= of step "branch" is empty; give it a name such as "cool-off", or leave name= out
empty_item = shop.pipeline(Order).for_each(
    "",  # E: kumiko-step-name  # M: The name of step "for_each" is empty; name the item it puts in c.scope, e.g. "line"
    over=lambda c: c.payload.lines,
    do=lambda b: b,
)
dup = (
    shop.pipeline(Order)
    .compute("x", lambda c: 1)
    .compute("x", lambda c: "s")  # E: kumiko-duplicate-step  # M: Step name "x" is already used in this pipeline; give each step a unique name
    .compute("y", lambda c: c.steps["x"] + 1)
)
by_value = (
    shop.pipeline(Order)
    .compute(Key.TOTAL, lambda c: 1.5)
    .compute(Key.COUNT, lambda c: 2)
    .compute("read", lambda c: (c.steps["total"], c.steps["count"]))
    .return_(lambda c: ok(c.steps))
)
reveal_type(by_value)  # R: kumiko_typed._finished.Finished[_models.Order, TypedDict({'total'=: float, 'count'=: int, 'read'=: tuple[float, int]})]
# Read by a member whose value no step produced: mypy's error for that value, as for a
# literal (it named the member's name, "COUNT", also for a key that exists).
by_member = shop.pipeline(Order).compute(Key.TOTAL, lambda c: 1.5).compute("r", lambda c: c.steps[Key.COUNT])  # E: misc


class Names:
    TOTAL: Final[str] = "total"  # declared str: only its Final value names the key
    LINE: Final = "line"


# Names held by a class, and a StrEnum member as a loop's item name, as at run time.
held = (
    shop.pipeline(Order)
    .compute(Names.TOTAL, lambda c: 1.5)
    .for_each(Names.LINE, over=lambda c: c.payload.lines, do=lambda b: b.compute("qty", lambda c: c.scope["line"].qty))
    .for_each(Key.COUNT, over=lambda c: range(3), do=lambda b: b.compute("n", lambda c: c.scope["count"]))
    .return_(lambda c: ok((c.steps[Names.TOTAL], c.steps["qty"], c.steps["n"])))  # read by the Final[str] too
)
reveal_type(held)  # R: kumiko_typed._finished.Finished[_models.Order, tuple[float, int | None, int | None]]


class Report:
    STEP: Final = "counted"
    ITEM: Final = "entry"

    def build(self) -> None:
        # Read through the instance: a compute's name and a loop's item name alike.
        built = (
            shop.pipeline(Order)
            .compute(self.STEP, lambda c: 1)
            .for_each(self.ITEM, over=lambda c: c.payload.lines, do=lambda b: b.compute("sku", lambda c: c.scope["entry"].sku))
        )
        reveal_type(built)  # R: kumiko_typed._builders.Pipeline[_models.Order, TypedDict({'counted'=: int, 'sku'=: str | None}), TypedDict({}), Never]


# Steps named in a loop: each name is known only at run time.  The error says what to write.
def per_region(regions: list[str]) -> None:
    p = shop.pipeline(Order)
    for region in regions:
        p = p.compute(region, lambda c: len(c.payload.lines))  # E: kumiko-step-name # M: The name of step "compute" must be a string literal, a Final constant or a StrEnum member: the plugin types c.steps["..."] from it; for values named at run time (in a loop, by an f-string), compute one key holding them by name, .compute("totals", lambda c: {n: ... for n in names})
    counts = shop.pipeline(Order).compute("counts", lambda c: {r: len(c.payload.lines) for r in regions})
    counts.compute("eu", lambda c: reveal_type(c.steps["counts"]["eu"]))  # R: int
