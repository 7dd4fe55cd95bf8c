"""``c.workflow`` is the run's ``RunInfo`` in every resolver of a workflow pipeline (its
top level, a branch's condition and arms, a loop's ``over`` and body, nested), and stays
``RunInfo | None`` in a handler's and a query's, where it is ``None``.  Resolvers typed
against ``Ctx`` are still accepted by a workflow's steps, and the plugin reads a key named
by an enum member there as in a handler."""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Any

from kumiko_typed import Ctx, Feature, manual, ok

from _models import EmailVerified, Order


def deadline(c: Ctx[Order, Any, Any]) -> datetime:
    return c.now + timedelta(days=len(c.payload.lines))


class Key(enum.StrEnum):
    LATE = "late_at"


shop = Feature("shop")
tracked = shop.workflow(
    "tracked",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order)
    .compute("run", lambda c: c.workflow.run_id)
    .compute("info", lambda c: reveal_type(c.workflow))  # R: kumiko_typed._runs.RunInfo # PR: RunInfo
    .branch(
        when=lambda c: c.workflow.path is None,
        on_true=lambda b: b.compute("arm", lambda c: reveal_type(c.workflow)),  # R: kumiko_typed._runs.RunInfo # PR: RunInfo
    )
    .for_each(
        "line",
        over=lambda c: c.payload.lines if c.workflow.status == "running" else [],
        do=lambda b: b.compute("body", lambda c: reveal_type(c.workflow)).branch(  # R: kumiko_typed._runs.RunInfo # PR: RunInfo
            when=lambda c: c.scope["line"].qty > 0,
            on_true=lambda b: b.compute("deep", lambda c: reveal_type(c.workflow.workflow)),  # R: str # PR: str
        ),
    )
    # A retry body is a handler's sub-pipeline (no wait in an attempt): there c.workflow
    # keeps its handler type (docs/plugin.md, "c.workflow"); read the run before the retry.
    .retry(times=2, do=lambda b: b.compute("attempt", lambda c: reveal_type(c.workflow)))  # R: kumiko_typed._runs.RunInfo | None # PR: RunInfo | None
    .compute("in_retry", lambda c: c.steps["run"])
    .wait(deadline)
    .wait_for_event(
        "verified",
        EmailVerified,
        key=lambda c: c.workflow.run_id,
        event_key=lambda e: e.user_id,
        timeout=lambda c: c.now + timedelta(days=1),
    )
    .return_(lambda c: ok(c.steps["run"])),
)
reveal_type(tracked)  # R: kumiko_typed._feature.Workflow[_models.Order, uuid.UUID] # PR: Workflow[Order, UUID]

# The plugin reads a key named by an enum member in a workflow's resolvers as in a handler's
# (pyright reads it as Any: it cannot compare the member with the names).
keyed = (
    shop.workflow_pipeline(Order)
    .compute(Key.LATE, lambda c: c.now)
    .compute("late", lambda c: reveal_type(c.steps[Key.LATE]))  # R: datetime.datetime # PR: Any
)

handler = shop.write_handler(
    "h",
    shop.pipeline(Order)
    .compute("info", lambda c: reveal_type(c.workflow))  # R: kumiko_typed._runs.RunInfo | None # PR: RunInfo | None
    .return_(lambda c: ok(c.steps["info"])),
)
query = shop.query_handler(
    "q",
    shop.query_pipeline(Order).return_(lambda c: ok(reveal_type(c.workflow))),  # R: kumiko_typed._runs.RunInfo | None # PR: RunInfo | None
)
