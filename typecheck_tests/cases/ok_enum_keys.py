"""A key named by a ``StrEnum`` member (or a member of a ``str`` mix-in ``Enum``) is read by
that member, as at run time, where the member is the string it holds: mypy with the plugin
gives the key's type (it read the member's name, ``"TOTAL"``, and reported no such key),
pyright ``Any`` (it refused the member), in a step, a loop body, ``when=``, ``.get`` and
``return_``; pyright reads a loop item by the member that names it exactly (ok_enum_items.py)."""

from __future__ import annotations

import enum
from typing import Any, Final

from kumiko_typed import Ctx, Feature, ok

from _models import Order

shop = Feature("shop")


class Key(enum.StrEnum):
    TOTAL = "total"
    LINE = enum.auto()


class Legacy(str, enum.Enum):
    NOTE = "note"


keyed = (
    shop.pipeline(Order)
    .compute(Key.TOTAL, lambda c: 1.5)
    .compute(Legacy.NOTE, lambda c: c.payload.note or None)
    .compute("total_read", lambda c: reveal_type(c.steps[Key.TOTAL]))  # R: float # PR: Any
    .compute("note_read", lambda c: reveal_type(c.steps[Legacy.NOTE]))  # R: str | None # PR: Any
    .compute("got", lambda c: reveal_type(c.steps.get(Key.TOTAL)))  # R: float # PR: Any
    .for_each(Key.LINE, over=lambda c: c.payload.lines, do=lambda b: b.compute("qty", lambda c: reveal_type(c.scope[Key.LINE]).qty))  # R: _models.Line # PR: Line
    .branch(
        when=lambda c: c.steps[Key.TOTAL] > 1,
        on_true=lambda b: b.compute("doubled", lambda c: reveal_type(c.steps[Key.TOTAL]) * 2),  # R: float # PR: Any
    )
    .branch(
        when=lambda c: c.steps[Legacy.NOTE] is not None,  # narrows in the arms as a literal key does
        on_true=lambda b: b.compute("upper", lambda c: reveal_type(c.steps[Legacy.NOTE]).upper()),  # R: str # PR: Any
    )
    .return_(lambda c: ok(c.steps[Key.TOTAL]))
)
reveal_type(keyed)  # R: kumiko_typed._finished.Finished[_models.Order, float] # PR: Finished[Order, Any]


# A member reached through a Final name, a class's Final or an alias of the enum class is
# the same key (mypy alone read each by the member's name: "TOTAL" is not a valid key).
TOTAL: Final = Key.TOTAL
K = Key


class Names:
    NOTE: Final = Legacy.NOTE


indirect = (
    shop.pipeline(Order)
    .compute(TOTAL, lambda c: 1.5)
    .compute(Names.NOTE, lambda c: c.payload.note or None)
    .compute("total_read", lambda c: reveal_type(c.steps[TOTAL]))  # R: float # PR: Any
    .compute("aliased", lambda c: reveal_type(c.steps[K.TOTAL]))  # R: float # PR: Any
    .compute("got", lambda c: reveal_type(c.steps.get(TOTAL)))  # R: float # PR: Any
    .branch(
        when=lambda c: c.steps[Names.NOTE] is not None,
        on_true=lambda b: b.compute("upper", lambda c: reveal_type(c.steps[Names.NOTE]).upper()),  # R: str # PR: Any
    )
)

# A def resolver is typed by its annotation: with Any steps, a read by the member is Any
# (neither a rewritten key nor mypy's reading by the member's name, "TOTAL").
def total_of(c: Ctx[Order, Any, Any]) -> object:
    return reveal_type(c.steps[Key.TOTAL])  # R: Any # PR: Any


by_def = shop.pipeline(Order).compute(Key.TOTAL, lambda c: 1.5).compute("read", total_of)
reveal_type(by_def)  # R: kumiko_typed._builders.Pipeline[_models.Order, TypedDict({'total'=: float, 'read'=: object}), TypedDict({}), Never] # PR: Pipeline[Order, Keys[Open, Key[Literal['read'], object]], Scope[*tuple[()]], Never]
