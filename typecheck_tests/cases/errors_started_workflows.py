"""``app.start_workflow`` of a workflow a worker starts, by its ``cron(...)`` or ``on_event(...)``
trigger: the App raises ``TypeError`` at the call; the plugin says so at the argument, in the
App's words (``kumiko-started-by-trigger``).  A ``manual`` workflow, and one the plugin cannot
tell (a union of a manual and an event workflow), are no error (pyright sees a ``Workflow``)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Final

from kumiko_typed import App, CronTick, Feature, User, cron, manual, on_event

from _models import EmailVerified, Order

shop = Feature("shop")
HOURLY: Final = "0 * * * *"
ticking = shop.workflow("tick", trigger=cron(HOURLY), pipeline=shop.workflow_pipeline(CronTick).compute("a", lambda c: 1))
zoned = shop.workflow(
    "zoned",
    trigger=cron("30 9 * * *", timezone="Europe/Berlin"),
    pipeline=shop.workflow_pipeline(CronTick).compute("a", lambda c: 1),
)
evented = shop.workflow(
    "evented", trigger=on_event(EmailVerified), pipeline=shop.workflow_pipeline(EmailVerified).compute("a", lambda c: 1)
)
by_hand = shop.workflow("by-hand", trigger=manual(Order), pipeline=shop.workflow_pipeline(Order).compute("a", lambda c: 1))
verified_by_hand = shop.workflow(
    "verified-by-hand",
    trigger=manual(EmailVerified),
    pipeline=shop.workflow_pipeline(EmailVerified).compute("a", lambda c: 1),
)

app = App([shop], database_url="sqlite://")
admin = User(uuid.uuid4(), uuid.uuid4(), {"Admin"})
tick = CronTick(datetime(2026, 1, 1, tzinfo=UTC))
app.start_workflow(ticking, tick, user=admin)  # E: kumiko-started-by-trigger  # M: this workflow is started by its trigger, cron("0 * * * *"), not by start_workflow (a worker starts one run per tick); a workflow you start yourself has trigger=manual(...)
app.start_workflow(zoned, tick, user=admin)  # E: kumiko-started-by-trigger  # M: this workflow is started by its trigger, cron("30 9 * * *", timezone='Europe/Berlin'), not by start_workflow (a worker starts one run per tick); a workflow you start yourself has trigger=manual(...)
app.start_workflow(evented, EmailVerified(uuid.uuid4()), user=admin)  # E: kumiko-started-by-trigger  # M: this workflow is started by its trigger, on_event(EmailVerified), not by start_workflow (a worker starts one run per event); a workflow you start yourself has trigger=manual(...)
app.start_workflow(by_hand, Order(uuid.uuid4(), []), user=admin)
either = evented if admin.roles else verified_by_hand
app.start_workflow(either, EmailVerified(uuid.uuid4()), user=admin)
reveal_type(evented)  # R: kumiko_typed._feature.Workflow[_models.EmailVerified, None]
