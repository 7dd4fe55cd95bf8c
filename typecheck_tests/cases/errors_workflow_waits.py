"""``wait_for_event`` ending the pipeline given to ``feature.workflow``: its ``event_key=``
is checked against the awaited event in both checkers.  pyright solved the step's type
variables from the type ``workflow`` expected of the pipeline first, which was
``WorkflowPipeline[P, Any, Any, Any]``: the event became ``Any`` and a misspelt attribute
passed."""

from __future__ import annotations

from kumiko_typed import Feature, manual, ok

from _models import EmailVerified, Order

shop = Feature("shop")

last = shop.workflow(
    "last",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order).wait_for_event(
        "verified",
        EmailVerified,
        key=lambda c: c.payload.id,
        event_key=lambda e: reveal_type(e).user_ud,  # E: attr-defined # R: _models.EmailVerified # PE: reportAttributeAccessIssue # PR: EmailVerified
        timeout="P1D",
    ),
)
reveal_type(last)  # R: kumiko_typed._feature.Workflow[_models.Order, None] # PR: Workflow[Order, None]

ended = shop.workflow(
    "ended",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order)
    .wait_for_event(
        "verified",
        EmailVerified,
        key=lambda c: c.payload.id,
        event_key=lambda e: reveal_type(e).user_ud,  # E: attr-defined # R: _models.EmailVerified # PE: reportAttributeAccessIssue # PR: EmailVerified
        timeout="P1D",
    )
    .return_(lambda c: ok(c.steps["verified"] is not None)),
)
reveal_type(ended)  # R: kumiko_typed._feature.Workflow[_models.Order, bool] # PR: Workflow[Order, bool]
