"""Each kumiko-* error at the line of the offending step."""

from __future__ import annotations

from datetime import timedelta

from kumiko_typed import Feature, ok

from _models import EmailVerified, Order

plain = Feature("plain")
name = "dynamic"

bad_name = plain.pipeline(Order).compute(
    name,  # E: kumiko-step-name
    lambda c: 1,
)

dup = (
    plain.pipeline(Order)
    .compute("x", lambda c: 1)
    .compute("x", lambda c: 2)  # E: kumiko-duplicate-step
)

dup_in_arm = (
    plain.pipeline(Order)
    .compute("x", lambda c: 1)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.compute("x", lambda c: 2),  # E: kumiko-duplicate-step
    )
)

returns_in_arm = (
    plain.pipeline(Order)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.return_(lambda c: ok(1)),  # E: kumiko-return-in-subpipeline
    )
)

mail_undeclared = (
    plain.pipeline(Order)
    .send_mail(to="a@example.com", subject="s", body="b")  # E: kumiko-tier
)

waits_in_handler = (
    plain.pipeline(Order)
    .wait(timedelta(hours=1))  # E: kumiko-workflow-only
)

event_wait_in_arm = (
    plain.pipeline(Order)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.wait_for_event("v", EmailVerified, key=lambda c: 1, event_key=lambda e: 1, timeout="P1D"),  # E: kumiko-workflow-only
    )
)

wait_in_retry = plain.workflow_pipeline(Order).retry(
    times=2,
    do=lambda b: b.wait("PT1M"),  # E: kumiko-workflow-only
)

typo = Feature("typo", requires=["mail.sned"])  # E: kumiko-tier
caps = ["mail.send"]
not_literal = Feature("nl", requires=caps)  # E: kumiko-tier
