"""The added public names' arguments of the wrong type are refused where they are given,
by mypy and by pyright (at run time: tests/outbox/test_new_api_misuse.py)."""

from __future__ import annotations

import uuid

from kumiko_typed import App, Feature, SmtpTransport, User, cron, signed

from _models import Order, Product

shop = Feature("shop", requires=["mail.send", "webhook.send"])
shop.entity(Product)

html_number = shop.pipeline(Order).send_mail(to="a@example.com", subject="s", body="b", html=5)  # E: arg-type # PE: reportArgumentType
reply_list = shop.pipeline(Order).send_mail(to="a@example.com", subject="s", body="b", reply_to=["a@x", "b@x"])  # E: arg-type # PE: reportArgumentType
html_fn = shop.pipeline(Order).send_mail(to="a@example.com", subject="s", body="b", html=lambda c: len(c.payload.lines))  # E: arg-type # PE: reportArgumentType
reply_fn = shop.pipeline(Order).send_mail(to="a@example.com", subject="s", body="b", reply_to=lambda c: c.payload.lines)  # E: arg-type # PE: reportArgumentType
key = signed(123)  # E: arg-type # PE: reportArgumentType
zone = cron("0 9 * * *", timezone=3)  # E: arg-type # PE: reportArgumentType
seconds = cron("0 9 * * *", catch_up=3600)  # E: arg-type # PE: reportArgumentType
App([shop], webhook_private_addresses="no")  # E: arg-type # PE: reportArgumentType
SmtpTransport("mx", implicit_tls="yes")  # E: arg-type # PE: reportArgumentType
user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
App([shop]).read_stream(Product, uuid.uuid4(), user=user, limit="10")  # E: arg-type # PE: reportArgumentType
App([shop]).read_stream(Product, uuid.uuid4(), user=user, from_version=None)  # E: arg-type # PE: reportArgumentType
App([shop]).read_stream(Product, "id", user=user)  # E: arg-type # PE: reportArgumentType
