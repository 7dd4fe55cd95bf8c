"""The public names this release added, used as documented: cron in a zone, a signed
webhook, the private-address switch, implicit TLS, an HTML mail with a Reply-To, a
stream's page; the values they return have exact types in both checkers."""

from __future__ import annotations

import uuid
from datetime import timedelta

from kumiko_typed import AggregateCreated, App, CronTick, Feature, Ok, SmtpTransport, User, cron, ok, signed

from _models import Order, Product, SignedUp

shop = Feature("shop", requires=["mail.send", "webhook.send"])
shop.entity(Product)

nightly = cron("0 9 * * *", timezone="Europe/Berlin")
reveal_type(nightly)  # R: kumiko_typed._triggers.Trigger[kumiko_typed._triggers.CronTick] # PR: Trigger[CronTick]
bounded = cron("*/5 * * * *", catch_up=timedelta(hours=1))
reveal_type(bounded)  # R: kumiko_typed._triggers.Trigger[kumiko_typed._triggers.CronTick] # PR: Trigger[CronTick]
every_missed = cron("*/5 * * * *", timezone="Europe/Berlin", catch_up=None)
report = shop.workflow(
    "report",
    trigger=nightly,
    pipeline=shop.workflow_pipeline(CronTick).send_webhook(
        url="https://reports.example/hook",
        body=lambda c: {"at": c.payload.scheduled_at.isoformat()},
        auth=signed("REPORTS_KEY"),
    ),
)

signup = shop.write_handler(
    "signup",
    shop.pipeline(SignedUp)
    .send_mail(
        to=lambda c: c.payload.email,
        subject="Welcome",
        body="Hello!",
        html=lambda c: f"<p>Hello {c.payload.email}</p>",
        reply_to="support@example.com",
    )
    .send_mail(to="team@example.com", subject="New", body="b", html="<p>b</p>", reply_to=lambda c: c.payload.email)
    .return_(lambda c: ok(c.payload.user_id)),
)
notes = shop.write_handler(
    "notes",
    shop.pipeline(Order)
    .send_mail(to="a@example.com", subject="s", body="b", html=lambda c: c.payload.note or None, reply_to=None)
    .return_(lambda c: ok(None)),
)

app = App([shop], database_url="sqlite://", webhook_private_addresses=False, mail=SmtpTransport("mx", implicit_tls=True))
user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
page = app.read_stream(Product, uuid.uuid4(), user=user, from_version=2, limit=10)
reveal_type(page)  # R: kumiko_typed._results.Ok[list[kumiko_typed._streams.StoredEvent[object]]] | kumiko_typed._results.Failure # PR: Ok[list[StoredEvent[object]]] | Failure
if isinstance(page, Ok):
    next_page = page.data[-1].version + 1
    reveal_type(page.data[0])  # R: kumiko_typed._streams.StoredEvent[object] # PR: StoredEvent[object]
    # A stream's event is an object: a class pattern narrows it, no cast (docs/event-store.md).
    for stored in page.data:
        match stored.event:
            case SignedUp(email=email):
                reveal_type(email)  # R: str # PR: str
            case AggregateCreated(values=values):
                reveal_type(values)  # R: typing.Mapping[str, Any] # PR: Mapping[str, Any]
            case _:
                pass
