"""``call_feature`` given a query handler, a workflow or a pipeline for ``handler=``: mypy said
``expected "WriteHandler[Order, Never]"`` (the result type it had not solved); one sentence
says what was given and what the step takes (test_cases.py checks it)."""

from __future__ import annotations

from kumiko_typed import Feature, manual, ok

from _models import Order

shop = Feature("shop", requires=["call_feature"])
query = shop.query_handler("q", shop.query_pipeline(Order).return_(lambda c: ok(1)))
flow = shop.workflow("w", trigger=manual(Order), pipeline=shop.workflow_pipeline(Order).wait("PT1H"))
handler = shop.write_handler("h", shop.pipeline(Order).return_(lambda c: ok(len(c.payload.lines))))

calls = (
    shop.workflow_pipeline(Order)
    .call_feature("queried", query, payload=lambda c: c.payload)  # E: arg-type
    .call_feature("started", flow, payload=lambda c: c.payload)  # E: arg-type
    .call_feature("counted", handler, payload=lambda c: c.payload)
    .compute("n", lambda c: reveal_type(c.steps["counted"]))  # R: int
)
