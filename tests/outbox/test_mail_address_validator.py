"""``mail_address``: an attrs validator that refuses, at the dispatch and at its payload
field, exactly the addresses ``send_mail`` refuses, with the same words.

A port's usual ``matches_re(r"[^@\\s]+@[^@\\s]+")`` took ``ada@example.com,boss`` or ``a\\x01@b.c``; the
handler answered ``Ok``, and the workflow that mailed the address when the hold ended failed
at its mail step (``validation_error``, its segment rolled back): the seats it was to release
stayed held for good (examples/ports/tickets.py).  There was no way to check a payload field
by the rule the mail step checks by.  Both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import attrs
import pytest
from _support import failure_of, ok_data

from kumiko_typed import App, Feature, User, mail_address, manual, ok
from kumiko_typed.testing import FakeClock, MemoryMail

AppOn = Callable[..., App]
USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


@attrs.frozen
class Checked:
    to: str = attrs.field(validator=mail_address)


@attrs.frozen
class Unchecked:
    to: str


f = Feature("addresses", requires=["mail.send"])
checked = f.write_handler(
    "checked",
    f.pipeline(Checked).send_mail(to=lambda c: c.payload.to, subject="s", body="b").return_(lambda c: ok(None)),
)
unchecked = f.write_handler(
    "unchecked",
    f.pipeline(Unchecked).send_mail(to=lambda c: c.payload.to, subject="s", body="b").return_(lambda c: ok(None)),
)
# What the port does: the address is taken now and mailed when the run ends, later.
later = f.workflow(
    "later",
    trigger=manual(Unchecked),
    pipeline=f.workflow_pipeline(Unchecked).wait("PT1M").send_mail(to=lambda c: c.payload.to, subject="s", body="b"),
)

REFUSED = [
    "a@b,c@d",
    "ada@example.com,boss",
    "a(b@c.d",
    '"a@b.c',
    "a@b.c)",
    "a@b;c",
    "a@",
    "no-at-sign",
    "",
    "=?utf-8?q?a?=@b.c",
    "a\x01@b.c",
    "a@b.c\x7f",
    "a@b.c\nBcc: x@y.z",
    "a@b.c\u2028",
    # Domains no mail server can be found for: queued before, and dead at the first attempt.
    "anna@" + "ü" * 64 + ".example",
    "a@" + "x" * 64 + ".example",
    "a@xn--ü.example",
]
TAKEN = ["ada@example.com", "Ada Lovelace <ada@example.com>", "ü@ß.例"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 2, tzinfo=UTC))


@pytest.fixture
def app(app_on: AppOn, clock: FakeClock) -> App:
    return app_on([f], mail=MemoryMail(), clock=clock)


@pytest.mark.parametrize("address", REFUSED)
def test_the_validator_refuses_at_the_field_what_send_mail_refuses_in_its_words(app: App, address: str) -> None:
    refused = failure_of(app.dispatch_json("addresses:checked", {"to": address}, user=USER), "validation_error")
    assert refused.details is not None and [d["path"] for d in refused.details] == ["$.to"]
    step = failure_of(app.dispatch_json("addresses:unchecked", {"to": address}, user=USER), "validation_error")
    assert step.details is not None
    assert refused.details[0]["message"] == step.details[0]["message"]
    assert app.outbox() == []


@pytest.mark.parametrize("address", TAKEN)
def test_the_validator_takes_what_send_mail_takes(app: App, address: str) -> None:
    ok_data(app.dispatch_json("addresses:checked", {"to": address}, user=USER))
    ok_data(app.dispatch_json("addresses:unchecked", {"to": address}, user=USER))
    assert [item.target for item in app.outbox()] == [address, address]


def test_an_address_taken_unchecked_fails_the_run_that_mails_it_later(app: App, clock: FakeClock) -> None:
    """Why the validator is there: without it, the run fails at its mail step."""
    run_id = app.start_workflow(later, Unchecked("a@b,c@d"), user=USER)
    clock.advance(minutes=1)
    app.run_worker(once=True)
    run = app.get_run(run_id)
    assert run is not None and run.status == "failed" and run.error is not None
    assert run.error["code"] == "validation_error"
    with pytest.raises(ValueError, match="must be one mail address"):
        Checked("a@b,c@d")


def test_a_value_that_is_no_text_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="must be a text, not int"):
        mail_address(None, attrs.fields(Checked).to, 5)  # type: ignore[arg-type]
