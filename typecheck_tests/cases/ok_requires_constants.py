"""A feature's ``requires=`` given as a constant whose type names the kinds (a ``Final``
tuple of literals, a list typed ``list[Literal[...]]``) or unpacked into a display: the
plugin reads the kinds from the type, as from a display written out, and checks each
tier-2 step against them (these were kumiko-tier errors saying to write a list of literals)."""

from __future__ import annotations

from typing import Final, Literal

from kumiko_typed import Feature, ok

from _models import Order

OUTBOX: Final = ("mail.send", "webhook.send")
MAIL_ONLY: list[Literal["mail.send"]] = ["mail.send"]

notifier = Feature("notifier", requires=OUTBOX)
reveal_type(notifier)  # R: kumiko_typed._feature.Feature[Literal['mail.send'] | Literal['webhook.send']] # PR: Feature[Literal['mail.send', 'webhook.send']]
mailer = Feature("mailer", requires=MAIL_ONLY)
reveal_type(mailer)  # R: kumiko_typed._feature.Feature[Literal['mail.send']] # PR: Feature[Literal['mail.send']]
caller = Feature("caller", requires=["call_feature", *OUTBOX])

notify = notifier.write_handler(
    "notify",
    notifier.pipeline(Order)
    .send_mail(to="a@example.com", subject="s", body="b")
    .send_webhook(url="https://example.com/hook")
    .return_(lambda c: ok(1)),
)
mail = mailer.write_handler(
    "mail", mailer.pipeline(Order).send_mail(to="a@example.com", subject="s", body="b").return_(lambda c: ok(1))
)
call = caller.write_handler(
    "call",
    caller.pipeline(Order)
    .call_feature("sent", mail, payload=lambda c: c.payload)
    .send_webhook(url="https://example.com/hook")
    .return_(lambda c: ok(c.steps["sent"])),
)
reveal_type(call)  # R: kumiko_typed._feature.WriteHandler[_models.Order, int] # PR: WriteHandler[Order, int]
