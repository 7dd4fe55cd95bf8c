"""A member of an enum that is no ``str`` (``class Item(enum.Enum)``) names no key: keys are
strings, and the run refuses it at boot.  mypy alone said only that the enum is no ``str``
(``arg-type``); with the plugin it is one ``kumiko-step-name`` error saying to make it a
``StrEnum``, and the key (or item) then reads as ``Any``.  pyright refuses it as a step's name,
but accepts it as a loop's item name: the item name's type variable is bound by
``LiteralString | Enum`` so that a ``str`` mix-in enum's member binds it as cheaply as a
literal, and no bound says "an Enum that is a str" (docs/plugin.md)."""

from __future__ import annotations

import enum
from typing import reveal_type

from kumiko_typed import Feature

from _models import Order

shop = Feature("shop")


class Item(enum.Enum):
    LINE = "line"
    COUNT = 3


keyed = shop.pipeline(Order).compute(Item.LINE, lambda c: 1)  # E: kumiko-step-name # M: The name of step "compute" is Item.LINE, a member of an Enum that is not a str, and the key it adds must be named by a string; make Item a StrEnum (class Item(enum.StrEnum)), or name the step with its value, "line" # PE: reportArgumentType # PE: reportCallIssue
looped = shop.pipeline(Order).for_each(Item.COUNT, over=lambda c: c.payload.lines, do=lambda b: b.compute("qty", lambda c: reveal_type(c.scope["line"])))  # E: kumiko-step-name # M: The name of step "for_each" is Item.COUNT, a member of an Enum that is not a str, and the item it adds must be named by a string; make Item a StrEnum (class Item(enum.StrEnum)), or name the step with a string literal # R: Any # PR: Any
