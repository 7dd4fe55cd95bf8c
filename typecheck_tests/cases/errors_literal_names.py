"""A step name typed as a union of literals, ``name: Literal["y", "z"]``: every value is a
literal, but which one names the key only the run knows, so no key read after the step
could be checked (DESIGN 1: names are literal, so that keys are exact).  mypy refuses it,
saying why and what to write; pyright accepts it and reads ``c.steps["y"]`` as the step's
type, though at run time the key may be "z" (docs/plugin.md, "In your editor")."""

from __future__ import annotations

import enum
from typing import Literal, reveal_type

from kumiko_typed import Feature

from _models import Order

shop = Feature("shop")


class Size(enum.StrEnum):
    SMALL = "small"
    LARGE = "large"


def sized(name: Literal["y", "z"], size: Literal[Size.SMALL, Size.LARGE]) -> None:
    p = shop.pipeline(Order).compute(name, lambda c: 2)  # E: kumiko-step-name  # M: The name of step "compute" may be any of "y", "z" (its type is a union of literals), so the key it adds has no one name the plugin can type; name the step with one literal; to add one key or the other, use a branch step, .branch(when=..., on_true=lambda b: b.compute("y", ...), on_false=lambda b: b.compute("z", ...)), after which each key is T | None
    p.compute("read", lambda c: reveal_type(c.steps["y"]))  # R: Any  # PR: int
    shop.pipeline(Order).for_each(size, over=lambda c: c.payload.lines, do=lambda b: b)  # E: kumiko-step-name  # M: The name of step "for_each" may be any of "small", "large" (its type is a union of literals), so the item it adds has no one name the plugin can type; name the item with one literal, .for_each("small", ...): the body reads it by that name
