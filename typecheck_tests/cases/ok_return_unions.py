"""A ``return_`` that chooses between two results, ``ok(a) if ... else ok(b)``: the result
type is their union, as pyright reads it (``Payment | Refund``, not mypy's join of the two
``Ok``s, ``object``, which left ``app.dispatch``'s data to be cast); a side that fails
adds nothing, and a key one side returns keeps its own type.  A result whose type is
expected (a function's return type) is still read in that context, as mypy does."""

from __future__ import annotations

import uuid
from typing import Literal

from kumiko_typed import App, Feature, Finished, User, fail, manual, ok

from _models import Order, Payment, Refund

shop = Feature("shop")
settled = shop.write_handler(
    "settle",
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .return_(lambda c: ok(Payment("paid", 1)) if c.steps["count"] else ok(Refund("refunded", 1, c.payload.note))),
)
reveal_type(settled)  # R: kumiko_typed._feature.WriteHandler[_models.Order, _models.Payment | _models.Refund] # PR: WriteHandler[Order, Payment | Refund]

# Nested, with a failing side, in a query and a workflow.
counted = shop.query_handler(
    "counted",
    shop.query_pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .return_(lambda c: ok(c.steps["count"]) if c.steps["count"] else (ok(c.payload.note) if c.payload.note else fail("not_found", "empty"))),
)
reveal_type(counted)  # R: kumiko_typed._feature.QueryHandler[_models.Order, int | str] # PR: QueryHandler[Order, int | str]
flow = shop.workflow(
    "flow",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order).wait("PT1H").return_(lambda c: ok(1) if c.payload.note else ok(b"")),
)


def results(app: App, run_id: uuid.UUID, user: User, order: Order) -> None:
    reveal_type(app.dispatch(settled, order, user=user))  # R: kumiko_typed._results.Ok[_models.Payment | _models.Refund] | kumiko_typed._results.Failure # PR: Ok[Payment | Refund] | Failure
    reveal_type(app.result(flow, run_id, user=user))  # R: kumiko_typed._results.Ok[int | bytes] | kumiko_typed._results.Failure # PR: Ok[bytes | int] | Failure


def done() -> Finished[Order, Literal["done", "empty"]]:
    return shop.pipeline(Order).return_(lambda c: ok("done") if c.payload.lines else ok("empty"))
