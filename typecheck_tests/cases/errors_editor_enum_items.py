"""In a loop whose item is named by a ``StrEnum`` member, a key no step produced is still an
error for pyright, as with the plugin; a misspelt read of the item by its value is ``Any`` in
pyright, which cannot compare a member with a string (docs/plugin.md, "In your editor")."""

from __future__ import annotations

import enum

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")


class Item(enum.StrEnum):
    LINE = "line"


typos = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .for_each(
        Item.LINE,
        over=lambda c: c.payload.lines,
        do=lambda b: b.compute("qty", lambda c: c.scope[Item.LINE].qty * c.steps["cuont"])  # E: misc # PE: reportArgumentType
        .compute("sku", lambda c: reveal_type(c.scope["lien"])),  # E: misc # R: Any # PR: Any
    )
    .return_(lambda c: ok(1))
)
