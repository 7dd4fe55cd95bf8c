"""A step or loop item named by an enum member whose value mypy cannot know is a
``kumiko-step-name`` error that says how to name it (never a silent ``Any``, DESIGN §4.7):
the key is what the enum's own ``_generate_next_value_`` (or a ``str`` mix-in ``Enum``'s
counting ``auto()``) returns at run time.  The mistake is reported once: reads of that key
are ``Any`` after it, the keys before it keep their types.  pyright reads such a member's
key as ``Any`` and reports nothing."""

from __future__ import annotations

import enum
from typing import Final

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")


class Upper(enum.StrEnum):
    @staticmethod
    def _generate_next_value_(name: str, start: int, count: int, last_values: list[str]) -> str:
        return f"{name}!"

    TOTAL = enum.auto()
    LINE = enum.auto()


class Counted(str, enum.Enum):
    TOTAL = enum.auto()


generated = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute(Upper.TOTAL, lambda c: 1.5)  # E: kumiko-step-name  # M: The name of step "compute" is an enum member whose value mypy cannot know (an auto() of an enum with its own _generate_next_value_, or of a str mix-in Enum, which counts); give the member a string value (TOTAL = "total") or name the step with a string literal
    .compute(Counted.TOTAL, lambda c: "s")  # E: kumiko-step-name  # M: The name of step "compute" is an enum member whose value mypy cannot know (an auto() of an enum with its own _generate_next_value_, or of a str mix-in Enum, which counts); give the member a string value (TOTAL = "total") or name the step with a string literal
    .compute("by_member", lambda c: reveal_type(c.steps[Upper.TOTAL]))  # R: Any # PR: Any
    .compute("by_value", lambda c: reveal_type(c.steps["TOTAL!"]))  # R: Any # PR: Any
    .compute("counted", lambda c: reveal_type(c.steps.get(Counted.TOTAL)))  # R: Any # PR: Any
    .compute("known", lambda c: reveal_type(c.steps["count"]))  # R: int # PR: Any
    .for_each(Upper.LINE, over=lambda c: c.payload.lines, do=lambda b: b.compute("qty", lambda c: reveal_type(c.scope[Upper.LINE])))  # E: kumiko-step-name  # M: The name of step "for_each" is an enum member whose value mypy cannot know (an auto() of an enum with its own _generate_next_value_, or of a str mix-in Enum, which counts); give the member a string value (TOTAL = "total") or name the step with a string literal  # R: Any # PR: Line
    .return_(lambda c: ok(c.steps["count"]))
)
reveal_type(generated)  # R: kumiko_typed._finished.Finished[_models.Order, int] # PR: Finished[Order, Any]


# A constant declared Final[Item] is typed as the enum, not as the member it holds (mypy keeps
# no value for such a constant, nor does its cache): no key can be read from it, and the error
# says to declare it Final without the type, which is the member (exact), as a parameter typed
# Item would be told to pass the member.  pyright reads either as Any, with no error.
class Item(enum.StrEnum):
    LINE = "line"
    TOTAL = "total"


TYPED_LINE: Final[Item] = Item.LINE
TYPED_TOTAL: Final[Item] = Item.TOTAL
LINE: Final = Item.LINE

typed = (
    shop.pipeline(Order)
    .compute(TYPED_TOTAL, lambda c: 1)  # E: kumiko-step-name  # M: The name of step "compute" is typed as the enum Item, not as one of its members, so the key it adds has no one name the plugin can type (a constant declared Final[Item] is typed so: mypy keeps its type, not the member it holds); declare it without the type, NAME: Final = Item.LINE, or pass the member itself, Item.LINE
    .for_each(TYPED_LINE, over=lambda c: c.payload.lines, do=lambda b: b.compute("qty", lambda c: reveal_type(c.scope["line"]).qty))  # E: kumiko-step-name  # M: The name of step "for_each" is typed as the enum Item, not as one of its members, so the item it adds has no one name the plugin can type (a constant declared Final[Item] is typed so: mypy keeps its type, not the member it holds); declare it without the type, NAME: Final = Item.LINE, or pass the member itself, Item.LINE  # R: Any # PR: Any
    .for_each(LINE, over=lambda c: c.payload.lines, do=lambda b: b.compute("sku", lambda c: reveal_type(c.scope["line"]).sku))  # R: _models.Line # PR: Any
    .return_(lambda c: ok(1))
)
