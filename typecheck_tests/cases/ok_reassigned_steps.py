"""A pipeline extended by reassigning its variable, with steps whose key's type mypy solved
from the arguments: without the plugin it solved it from the variable's earlier type first,
and refused the argument (``type[Shelf]`` where ``type[Product]`` was expected, a handler of
``str`` where one of ``int`` was, the second event class)."""

from __future__ import annotations

from datetime import timedelta

from kumiko_typed import Feature, ok

from _models import EmailVerified, Order, Product, Shelf, SignedUp

shop = Feature("shop", requires=["call_feature"])
counted = shop.write_handler("counted", shop.pipeline(Order).return_(lambda c: ok(len(c.payload.lines))))
named = shop.write_handler("named", shop.pipeline(Order).return_(lambda c: ok(c.payload.note)))


def stored() -> None:
    p = shop.pipeline(Order).create("product", Product, data=lambda c: Product(id=c.payload.id, name="n", stock=1))
    p = p.create("shelf", Shelf, data=lambda c: Shelf(id=c.payload.id, label="top"))
    p = p.update("moved", Shelf, id=lambda c: c.payload.id, changes=lambda c: {"label": "low"}, version=lambda c: 1)
    p = p.call_feature("count", counted, payload=lambda c: c.payload)
    p = p.call_feature("note", named, payload=lambda c: c.payload)
    p = p.compute("saved", lambda c: reveal_type((c.steps["product"], c.steps["shelf"])))  # R: tuple[kumiko_typed._saved.Saved[_models.Product], kumiko_typed._saved.Saved[_models.Shelf]] # PR: tuple[Saved[Product], Saved[Shelf]]
    p = p.compute("updated", lambda c: reveal_type(c.steps["moved"]))  # R: kumiko_typed._saved.Saved[_models.Shelf] # PR: Saved[Shelf]
    p = p.compute("called", lambda c: reveal_type((c.steps["count"], c.steps["note"])))  # R: tuple[int, str] # PR: tuple[int, str]


def waited() -> None:
    w = shop.workflow_pipeline(SignedUp).wait_for_event(
        "verified", EmailVerified, key=lambda c: c.payload.user_id, event_key=lambda e: e.user_id, timeout=timedelta(days=1)
    )
    w = w.wait_for_event(
        "again", SignedUp, key=lambda c: c.payload.email, event_key=lambda e: e.email, timeout=timedelta(days=1)
    )
    w = w.compute("both", lambda c: reveal_type((c.steps["verified"], c.steps["again"])))  # R: tuple[_models.EmailVerified | None, _models.SignedUp | None] # PR: tuple[EmailVerified | None, SignedUp | None]
