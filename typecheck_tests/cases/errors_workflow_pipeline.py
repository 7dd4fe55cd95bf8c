"""Registering a workflow: a write handler's or a query's pipeline is not a workflow's."""

from __future__ import annotations

from kumiko_typed import Feature, manual, ok

from _models import Order, SignedUp

shop = Feature("shop")

unended = shop.workflow(
    "unended",
    trigger=manual(SignedUp),
    pipeline=shop.pipeline(SignedUp).compute("a", lambda c: 1),  # E: kumiko-workflow-pipeline  # M: A workflow needs a pipeline built with feature.workflow_pipeline(P), got a write-handler pipeline (Pipeline); build it with feature.workflow_pipeline(P), which offers the same steps and can wait
)
ended = shop.workflow(
    "ended",
    trigger=manual(SignedUp),
    pipeline=shop.pipeline(SignedUp).compute("a", lambda c: 1).return_(lambda c: ok(c.steps["a"])),  # E: kumiko-workflow-pipeline  # M: A workflow needs a pipeline built with feature.workflow_pipeline(P), got a write-handler pipeline (Finished); build it with feature.workflow_pipeline(P), which offers the same steps and can wait
)
query = shop.workflow("query", trigger=manual(Order), pipeline=shop.query_pipeline(Order).return_(lambda c: ok(1)))  # E: kumiko-workflow-pipeline  # M: A workflow needs a pipeline built with feature.workflow_pipeline(P), got a query pipeline (QueryFinished); build it with feature.workflow_pipeline(P), which offers the same steps and can wait
unended_query = shop.workflow("uq", trigger=manual(Order), pipeline=shop.query_pipeline(Order))  # E: kumiko-workflow-pipeline  # M: A workflow needs a pipeline built with feature.workflow_pipeline(P), got a query pipeline (QueryPipeline); build it with feature.workflow_pipeline(P), which offers the same steps and can wait
kept = shop.pipeline(Order).compute("a", lambda c: 1)
from_variable = shop.workflow("kept", trigger=manual(Order), pipeline=kept)  # E: kumiko-workflow-pipeline  # M: A workflow needs a pipeline built with feature.workflow_pipeline(P), got a write-handler pipeline (Pipeline); build it with feature.workflow_pipeline(P), which offers the same steps and can wait
reveal_type(from_variable)  # R: Any

own = shop.workflow("own", trigger=manual(Order), pipeline=shop.workflow_pipeline(Order).compute("a", lambda c: 1))
reveal_type(own)  # R: kumiko_typed._feature.Workflow[_models.Order, None]
