"""A key named by a ``Final`` name declared ``str`` is read by that name, as at run time:
mypy types such a name ``str`` and refused it as a key (``TypedDict key must be a string
literal``), though the step it named has the name's value as its key.  With the plugin it
reads as the key's type, in a step, a loop body, ``when=`` (which narrows the arms), ``.get``
and ``return_``; pyright reads a module's own constant as its literal (one imported, or held
by a class, as ``str``: docs/plugin.md)."""

from __future__ import annotations

from typing import Final

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")

COUNT: Final[str] = "count"
LINE: Final[str] = "line"
NOTE: Final[str] = "note"

declared = (
    shop.pipeline(Order)
    .compute(COUNT, lambda c: len(c.payload.lines))
    .compute("read", lambda c: reveal_type(c.steps[COUNT]))  # R: int # PR: int
    .compute("got", lambda c: reveal_type(c.steps.get(COUNT)))  # R: int # PR: Any
    .for_each(LINE, over=lambda c: c.payload.lines, do=lambda b: b.compute("sku", lambda c: reveal_type(c.scope[LINE]).sku))  # R: _models.Line # PR: Line
    .branch(
        when=lambda c: c.steps[COUNT] > 1,
        on_true=lambda b: b.compute("doubled", lambda c: reveal_type(c.steps[COUNT]) * 2),  # R: int # PR: int
    )
    .compute(NOTE, lambda c: c.payload.note or None)
    .branch(
        when=lambda c: c.steps[NOTE] is not None,  # narrows the arm as a literal key does (mypy only)
        on_true=lambda b: b.compute("upper", lambda c: reveal_type(c.steps[NOTE])),  # R: str # PR: str | None
    )
    .return_(lambda c: ok(c.steps[COUNT]))
)
reveal_type(declared)  # R: kumiko_typed._finished.Finished[_models.Order, int] # PR: Finished[Order, int]
