"""A payload of another class than the handler's, given to ``app.dispatch``, ``app.query`` or
``app.start_workflow``: mypy said only ``Cannot infer value of type parameter "P"``; with the
plugin it names the payload's type and the one the handler takes, as pyright does."""

from __future__ import annotations

import uuid

from kumiko_typed import App, Feature, User, manual, ok

from _models import Order, SignedUp

shop = Feature("shop")
handler = shop.write_handler("h", shop.pipeline(Order).return_(lambda c: ok(len(c.payload.lines))))
query = shop.query_handler("q", shop.query_pipeline(Order).return_(lambda c: ok(c.payload.note)))
flow = shop.workflow("w", trigger=manual(Order), pipeline=shop.workflow_pipeline(Order).wait("PT1H"))


def wrong(app: App, user: User, signed_up: SignedUp) -> None:
    reveal_type(app.dispatch(handler, signed_up, user=user))  # E: arg-type # R: kumiko_typed._results.Ok[int] | kumiko_typed._results.Failure # PE: reportArgumentType # PR: Ok[int] | Failure
    reveal_type(app.query(query, signed_up, user=user))  # E: arg-type # R: kumiko_typed._results.Ok[str] | kumiko_typed._results.Failure # PE: reportArgumentType # PR: Ok[str] | Failure
    app.start_workflow(flow, signed_up, user=user)  # E: arg-type # PE: reportArgumentType
    app.start_workflow(flow, None, user=user)  # E: arg-type # PE: reportArgumentType


def right(app: App, user: User, order: Order) -> None:
    reveal_type(app.dispatch(handler, order, user=user))  # R: kumiko_typed._results.Ok[int] | kumiko_typed._results.Failure # PR: Ok[int] | Failure
    reveal_type(app.start_workflow(flow, Order(uuid.uuid4(), []), user=user))  # R: uuid.UUID # PR: UUID
