# mypy: enable-error-code="deprecated"
"""A refused step is a ``@deprecated`` stub: with ``deprecated`` enabled mypy reports it too,
in the same words.  With the plugin the mistake is one error, under the plugin's code, so
that ``# type: ignore[kumiko-workflow-only]`` silences it."""

from __future__ import annotations

from datetime import timedelta

from kumiko_typed import Feature, ok

from _models import Order, Product

shop = Feature("shop")

waits = shop.pipeline(Order).wait(timedelta(hours=1))  # E: kumiko-workflow-only  # M: Step "wait" (workflow.wait) suspends a workflow run and is only allowed in a workflow pipeline, not in a Pipeline; build it with feature.workflow_pipeline(P) and register it with feature.workflow(...)
returns = shop.pipeline(Order).branch(
    when=lambda c: True,
    on_true=lambda b: b.return_(lambda c: ok(1)),  # E: kumiko-return-in-subpipeline  # M: return_ is not allowed inside a sub-pipeline (SubPipeline: a branch arm, for_each or retry body); end the top-level pipeline with .return_(...) instead, reading what the arm or body set from c.steps; to stop early with a failure, use .guard(check, otherwise=lambda c: fail(...))
)
writes = shop.query_pipeline(Order).create("p", Product, data=lambda c: Product(name="x"))  # E: kumiko-read-only  # M: Step "create" (aggregate.create) does more than read, and a QueryPipeline only reads (a query runs in a read-only transaction); do it in a write handler built with feature.pipeline(P) (or a workflow), and keep the query to reads, compute, branch, for_each and guard
silenced = shop.pipeline(Order).wait(timedelta(hours=1))  # type: ignore[kumiko-workflow-only]
