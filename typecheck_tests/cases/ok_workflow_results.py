"""Workflow results: ``app.result`` is typed by the workflow's ``return_`` (``None``
without one), and ``Workflow[P]`` annotations written before results were typed still hold."""

from __future__ import annotations

import uuid

from kumiko_typed import App, Feature, User, Workflow, manual, ok

from _models import Order

shop = Feature("shop")
counted = shop.workflow(
    "counted",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order).wait("PT1H").return_(lambda c: ok((len(c.payload.lines), c.payload.note))),
)
plain = shop.workflow("plain", trigger=manual(Order), pipeline=shop.workflow_pipeline(Order).wait("PT1H"))
annotated: Workflow[Order] = counted


def results(app: App, run_id: uuid.UUID, user: User) -> None:
    reveal_type(counted)  # R: kumiko_typed._feature.Workflow[_models.Order, tuple[int, str]] # PR: Workflow[Order, tuple[int, str]]
    reveal_type(app.result(counted, run_id, user=user))  # R: kumiko_typed._results.Ok[tuple[int, str]] | kumiko_typed._results.Failure # PR: Ok[tuple[int, str]] | Failure
    reveal_type(app.result(plain, run_id, user=user))  # R: kumiko_typed._results.Ok[None] | kumiko_typed._results.Failure # PR: Ok[None] | Failure
    reveal_type(app.result(annotated, run_id, user=user))  # R: kumiko_typed._results.Ok[object] | kumiko_typed._results.Failure # PR: Ok[object] | Failure
    app.start_workflow(annotated, Order(uuid.uuid4(), []), user=user)
