"""``send_mail(..., reply_to=...)``: a ``Reply-To`` header, checked as the sender is (one
address, no line break: a value from the payload could otherwise add recipients or
headers), refused at dispatch naming the payload field.  Before, a reply always went to the
sender (a contact form could not route the answer to the customer).  Both databases."""

from __future__ import annotations

import email.parser
import email.policy
import uuid
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path

import attrs
import pytest
from _support import failure_of, ok_data

from kumiko_typed import App, Feature, MaildirTransport, User, ok
from kumiko_typed.testing import MemoryMail

AppOn = Callable[..., App]


@attrs.frozen
class Contact:
    customer: str | None
    text: str = "Where is my order?"


f = Feature("contact", requires=["mail.send"])
contact = f.write_handler(
    "contact",
    f.pipeline(Contact)
    .send_mail(
        to="support@example.com",
        subject="A customer asks",
        body=lambda c: c.payload.text,
        sender="shop@example.com",
        reply_to=lambda c: c.payload.customer,
    )
    .return_(lambda c: ok(None)),
)


def _user() -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def test_the_reply_to_header_names_the_given_address(app_on: AppOn, tmp_path: Path) -> None:
    folder = tmp_path / "mail"
    app = app_on([f], mail=MaildirTransport(str(folder)))
    ok_data(app.dispatch(contact, Contact("Ann Example <ann@bücher.example>"), user=_user()))
    assert app.run_worker(once=True)["sent"] == 1
    (eml,) = folder.glob("*.eml")
    parsed = email.parser.BytesParser(policy=email.policy.default).parsebytes(eml.read_bytes())
    assert isinstance(parsed, EmailMessage)
    (address,) = parsed["Reply-To"].addresses
    # The domain in its ASCII form, as the recipients' and the sender's are.
    assert (address.display_name, address.addr_spec) == ("Ann Example", "ann@xn--bcher-kva.example")
    assert parsed["From"] == "shop@example.com"


@pytest.mark.parametrize("given", [None, ""])
def test_no_reply_to_given_is_no_header(app_on: AppOn, given: str | None) -> None:
    memory = MemoryMail()
    app = app_on([f], mail=memory)
    ok_data(app.dispatch(contact, Contact(given), user=_user()))
    assert app.run_worker(once=True)["sent"] == 1
    (sent,) = memory.sent
    assert sent.reply_to is None


@pytest.mark.parametrize(
    ("customer", "problem"),
    [
        ("ann@example.com\r\nBcc: victim@example.com", "must not contain line breaks or control characters"),
        ("ann@example.com, victim@example.com", "must be one mail address"),
        ("not an address", "must be one mail address"),
    ],
)
def test_a_reply_to_that_is_not_one_address_is_refused_at_its_payload_field(
    app_on: AppOn, customer: str, problem: str
) -> None:
    memory = MemoryMail()
    app = app_on([f], mail=memory)
    failure = failure_of(app.dispatch(contact, Contact(customer), user=_user()), "validation_error")
    assert failure.details is not None
    (detail,) = failure.details
    assert detail["path"] == "$.customer"
    assert str(detail["message"]).startswith(problem)
    assert app.outbox() == []
