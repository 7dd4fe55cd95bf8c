"""A key whose resolver returns a Literal type: mypy keeps the literal; pyright widens a
lambda's literal result to its class (as it solves any type variable from a literal), so
a key that must stay a Literal in the editor too is computed by a def that declares it
(docs/plugin.md, "In your editor")."""

from __future__ import annotations

from typing import Any, Literal

from kumiko_typed import Ctx, Feature, Ok, ok

from _models import Payment

Kind = Literal["paid"]


def kind_of(c: Ctx[Payment, Any, Any]) -> Kind:
    return c.payload.kind


def needs(kind: Kind) -> bool:
    return kind == "paid"


def result(c: Ctx[Payment, Any, Any]) -> Ok[Kind]:
    return ok(c.payload.kind)


shop = Feature("shop")
paid = (
    shop.pipeline(Payment)
    .compute("widened", lambda c: c.payload.kind)
    .compute("declared", kind_of)
    .compute("read", lambda c: (reveal_type(c.steps["widened"]), reveal_type(c.steps["declared"])))  # R: Literal['paid'] # PR: str # PR: Literal['paid']
    .compute("both", lambda c: needs(c.steps["declared"]) and needs(c.payload.kind))
    .return_(result)
)
reveal_type(paid)  # R: kumiko_typed._finished.Finished[_models.Payment, Literal['paid']] # PR: Finished[Payment, Literal['paid']]
widened = shop.pipeline(Payment).return_(lambda c: ok(c.payload.kind))
reveal_type(widened)  # R: kumiko_typed._finished.Finished[_models.Payment, Literal['paid']] # PR: Finished[Payment, str]
