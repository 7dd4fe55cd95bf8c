"""The public names this release added, given values of the wrong type by code no checker
read: each is refused where it is given, naming the argument (a ``ValueError`` when the
value is made, a ``BootError`` at the App, a ``validation_error`` at dispatch with no row
written), never stored as its repr or read as true.  The checkers' side of the same
misuses: typecheck_tests/cases/errors_new_apis.py."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from _support import failure_of, ok_data

from kumiko_typed import (
    App,
    BootError,
    Feature,
    RetryPolicy,
    SmtpTransport,
    User,
    bearer,
    cron,
    header_auth,
    ok,
    signed,
)
from kumiko_typed.testing import MemoryMail

AppOn = Callable[..., App]


@attrs.frozen
class Note:
    count: int
    tags: list[str]


def _user() -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def _mail_feature(**options: Any) -> tuple[Feature[str], Any]:
    f = Feature("notes", requires=["mail.send"])
    handler = f.write_handler(
        "note",
        f.pipeline(Note).send_mail(to="a@example.com", subject="s", body="b", **options).return_(lambda c: ok(None)),
    )
    return f, handler


@pytest.mark.parametrize(
    ("option", "value"),
    [("html", 5), ("html", b"<p>hi</p>"), ("reply_to", ["a@example.com", "b@example.com"]), ("reply_to", 7)],
)
def test_a_mail_option_of_another_type_is_a_boot_problem(option: str, value: object) -> None:
    f, _ = _mail_feature(**{option: value})
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://", mail=MemoryMail())
    (problem,) = raised.value.problems
    assert f"send_mail {option}= takes a text or a function of the context, not {type(value).__name__}" in problem


@pytest.mark.parametrize(
    ("option", "fn", "path"),
    [
        ("html", lambda c: c.payload.count, "$.count"),
        ("reply_to", lambda c: c.payload.tags, "$.tags"),
    ],
)
def test_a_mail_option_whose_function_gives_another_type_writes_no_row(
    app_on: AppOn, option: str, fn: Callable[[Any], object], path: str
) -> None:
    """Before, ``html`` was stored as ``str(5)`` and sent; ``reply_to`` as a list's repr."""
    f, handler = _mail_feature(**{option: fn})
    memory = MemoryMail()
    app = app_on([f], mail=memory)
    failure = failure_of(app.dispatch(handler, Note(5, ["a@example.com"]), user=_user()), "validation_error")
    assert failure.details is not None
    (detail,) = failure.details
    assert detail["path"] == path
    assert detail["column"] == f"kumiko_outbox.message.{option}"
    assert str(detail["message"]).startswith("must be a text")
    assert app.outbox() == []
    assert app.run_worker(once=True)["sent"] == 0
    assert memory.sent == []


@attrs.frozen
class Letter:
    email: str | None
    count: int
    totals: dict[str, int]
    emails: set[str]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            {"to": None},
            "send_mail to= takes an address, a list of addresses or a function of the context, not NoneType",
        ),
        (
            {"to": ["a@example.com", 5]},
            "send_mail to= takes an address, a list of addresses or a function of the context, not a list holding int",
        ),
        ({"subject": 5}, "send_mail subject= takes a text or a function of the context, not int"),
        ({"body": None}, "send_mail body= takes a text or a function of the context, not NoneType"),
        ({"sender": b"a@example.com"}, "send_mail sender= takes a text or a function of the context, not bytes"),
    ],
)
def test_a_mail_field_of_another_type_is_a_boot_problem(options: dict[str, object], problem: str) -> None:
    """Before, ``to=None`` was an internal_error at every dispatch and the others were
    stored as their repr (``subject=5`` sent "5")."""
    f = Feature("notes", requires=["mail.send"])
    fields: dict[str, object] = {"to": "a@example.com", "subject": "s", "body": "b", **options}
    f.write_handler("note", f.pipeline(Note).send_mail(**fields).return_(lambda c: ok(None)))  # type: ignore[arg-type]
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://", mail=MemoryMail())
    (found,) = raised.value.problems
    assert problem in found


@pytest.mark.parametrize(
    ("field", "fn", "path", "message"),
    [
        ("to", lambda c: c.payload.email, "$.email", "must be an address or a list of addresses, not None"),
        ("to", lambda c: c.payload.emails, "$.emails", "must be an address or a list of addresses, not set"),
        ("to", lambda c: [c.payload.count], "$", "must be an address or a list of addresses, not list"),
        ("subject", lambda c: c.payload.count, "$.count", "must be a text, not int"),
        ("body", lambda c: c.payload.totals, "$.totals", "must be a text, not dict"),
        ("body", lambda c: c.payload.email, "$.email", "must be a text, not None"),
        ("sender", lambda c: c.payload.count, "$.count", "must be a text (or None), not int"),
    ],
)
def test_a_mail_field_whose_function_gives_another_type_writes_no_row(
    app_on: AppOn, field: str, fn: Callable[[Any], object], path: str, message: str
) -> None:
    """Before, ``to`` of None was an internal_error (a ``TypeError`` in the step, logged
    with its traceback), a set of addresses was sent in no order, and a subject, body or
    sender of another type was stored as its repr: a body of a dict went out as
    "{'total': 5}"."""
    f = Feature("letters", requires=["mail.send"])
    fields: dict[str, object] = {"to": "a@example.com", "subject": "s", "body": "b", field: fn}
    handler = f.write_handler("letter", f.pipeline(Letter).send_mail(**fields).return_(lambda c: ok(None)))  # type: ignore[arg-type]
    memory = MemoryMail()
    app = app_on([f], mail=memory)
    letter = Letter(None, 12345, {"total": 5}, {"a@example.com", "b@example.com"})
    failure = failure_of(app.dispatch(handler, letter, user=_user()), "validation_error")
    assert failure.details == [
        {"path": path, "message": message, "column": f"kumiko_outbox.message.{field}", "step": "0 mail.send"}
    ]
    assert app.outbox() == []
    assert app.run_worker(once=True)["sent"] == 0
    assert memory.sent == []


@pytest.mark.parametrize("given", ["function", "value"])
@pytest.mark.parametrize("to", [("a@example.com", "b@example.com"), ["a@example.com"]])
def test_mail_to_a_tuple_or_list_of_addresses_is_sent_to_each(app_on: AppOn, to: object, given: str) -> None:
    """Given as it is too, not only by a function: boot takes a tuple as a list (a mutation
    run found a tuple given as it is untested)."""
    f = Feature("letters", requires=["mail.send"])
    recipients: object = (lambda c: to) if given == "function" else to
    handler = f.write_handler(
        "letter",
        f.pipeline(Note).send_mail(to=recipients, subject="s", body="b").return_(lambda c: ok(None)),  # type: ignore[arg-type]
    )
    memory = MemoryMail()
    app = app_on([f], mail=memory)
    ok_data(app.dispatch(handler, Note(1, []), user=_user()))
    assert app.run_worker(once=True)["sent"] == 1
    assert [list(m.to) for m in memory.sent] == [list(to)]  # type: ignore[call-overload]


@pytest.mark.parametrize("make", [signed, bearer, lambda ref: header_auth("X-Key", ref)])
@pytest.mark.parametrize("ref", [123, None, b"KEY", ""])
def test_a_secret_reference_must_be_a_name(make: Callable[[object], object], ref: object) -> None:
    with pytest.raises(ValueError, match=r"secret_ref must name a secret \(a non-empty text\), not "):
        make(ref)


def test_a_cron_expression_must_be_a_text() -> None:
    with pytest.raises(ValueError, match=r"cron expression must be a text such as '0 9 \* \* \*', not 5"):
        cron(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cron timezone 3 is not a time zone"):
        cron("0 9 * * *", timezone=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["implicit_tls", "starttls"])
@pytest.mark.parametrize("given", ["yes", 1, None])
def test_a_tls_mode_must_be_a_bool(mode: str, given: object) -> None:
    with pytest.raises(ValueError, match=rf"{mode} must be True or False, not {given!r}"):
        SmtpTransport("mx.example", **{mode: given})


@pytest.mark.parametrize("given", ["587", 0, 65536, -1, True, 25.0])
def test_an_smtp_port_must_be_a_port_number(given: object) -> None:
    """Before, ``port="587"`` or ``70000`` was taken and failed at every delivery."""
    with pytest.raises(
        ValueError, match=rf"port must be a number from 1 to 65535, or None for the mode's own, not {given!r}"
    ):
        SmtpTransport("mx.example", given)  # type: ignore[arg-type]


@pytest.mark.parametrize("given", [1, 65535, None])
def test_an_smtp_port_from_1_to_65535_is_taken(given: int | None) -> None:
    """The range's ends are ports (a mutation run found them untested)."""
    assert SmtpTransport("mx.example", given).port == given


@pytest.mark.parametrize("given", [None, "", " mx.example", "mx.example\r\nRCPT TO:<x@y>", 25])
def test_an_smtp_host_must_be_a_name_or_address(given: object) -> None:
    """Before, ``SmtpTransport(os.environ.get("SMTP_HOST"))`` with the variable unset was
    taken: smtplib connects to this machine for ``None``, and every mail went to whatever
    SMTP server listened there; the others failed at every delivery."""
    with pytest.raises(
        ValueError, match=rf"host must be the SMTP server's name or address, not {re.escape(repr(given))}"
    ):
        SmtpTransport(given)  # type: ignore[arg-type]


def test_an_smtp_host_with_its_port_says_to_give_the_port_apart() -> None:
    with pytest.raises(ValueError, match=r"name alone: SmtpTransport\('mx.example', 587\)"):
        SmtpTransport("mx.example:587")


@pytest.mark.parametrize("given", ["mx.example", "127.0.0.1", "::1", "bücher.example"])
def test_an_smtp_host_name_or_address_is_taken(given: str) -> None:
    assert SmtpTransport(given).host == given


def test_a_password_without_a_username_is_refused() -> None:
    """Before, it was taken and never used: smtplib logs in only with a username, so the
    mail went out unauthenticated (refused, or taken by a server that takes anyone's)."""
    with pytest.raises(ValueError, match="password_ref='SMTP' needs username=, the login the password is for"):
        SmtpTransport("mx.example", 587, password_ref="SMTP")
    assert SmtpTransport("mx.example", 587, username="", password_ref="SMTP").password_ref == "SMTP"


@pytest.mark.parametrize("field", ["timeout", "deadline"])
@pytest.mark.parametrize("given", ["30", True, 0, -1, 61, float("nan"), None])
def test_smtp_seconds_must_be_a_number_within_the_lease(field: str, given: object) -> None:
    """Before, ``timeout="30"`` was taken (a ``TypeError`` in the worker), ``timeout=600``
    held a send past the outbox's lease, and ``deadline="30"`` was a ``TypeError`` here."""
    if (field, given) == ("timeout", None):  # the default: 30 s, or the deadline if shorter
        assert SmtpTransport("mx.example", timeout=None).operation_timeout == 30
        return
    want = rf"{field} must be above 0 and at most 60 seconds \(inside the outbox's lease\), not {given!r}"
    with pytest.raises(ValueError, match=want):
        SmtpTransport("mx.example", **{field: given})


@pytest.mark.parametrize("given", ["3", True, 2.5, 0, -1, 2**31, None])
def test_a_retry_policys_times_must_be_a_whole_number_of_attempts(given: object) -> None:
    """Before, ``times="3"`` was a bare ``TypeError``, ``2.5`` and ``True`` were taken, and
    ``2**31`` failed every dispatch queuing the row on PostgreSQL (its column is 32 bits)."""
    with pytest.raises(ValueError, match=rf"times must be a whole number from 1 to 2147483647, not {given!r}"):
        RetryPolicy(times=given)  # type: ignore[arg-type]


def test_a_retry_policy_of_the_most_times_it_takes_is_queued_on_both(app_on: AppOn) -> None:
    """``2**31 - 1``, the most a row's 32-bit attempts column holds, is taken and queued:
    the check stops one past it, not at it (a mutation run found the bound untested)."""
    f = Feature("hooks", requires=["webhook.send"])
    policy = RetryPolicy(times=2**31 - 1)
    handler = f.write_handler(
        "hook",
        f.pipeline(Note).send_webhook(url="https://hooks.example/h", retry=policy).return_(lambda c: ok(None)),
    )
    app = app_on([f])
    ok_data(app.dispatch(handler, Note(1, []), user=_user()))
    (item,) = app.outbox()
    assert (item.status, item.attempts) == ("pending", 0)


@pytest.mark.parametrize("given", ["no", "false", 0, None])
def test_webhook_private_addresses_must_be_a_bool(given: object) -> None:
    """Before, ``"no"`` was true: webhooks went on reaching private addresses."""
    with pytest.raises(BootError) as raised:
        App([], database_url="sqlite://", webhook_private_addresses=given)  # type: ignore[arg-type]
    assert raised.value.problems == [f"webhook_private_addresses must be True or False, not {given!r}"]


@pytest.mark.parametrize("auth", ["HOOK_KEY", {"header": "X-Key"}])
def test_webhook_auth_of_another_type_is_a_boot_problem(auth: object) -> None:
    """``auth="HOOK_KEY"`` (the name ``signed`` takes) was an internal_error at every dispatch."""
    f = Feature("hooks", requires=["webhook.send"])
    f.write_handler(
        "hook",
        f.pipeline(Note).send_webhook(url="https://hooks.example/h", auth=auth).return_(lambda c: ok(None)),
    )
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    (problem,) = raised.value.problems
    want = "send_webhook auth= takes bearer(ref), header_auth(name, ref) or signed(ref), not "
    assert want + type(auth).__name__ in problem


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        (
            {"secrets": {"CRM": "s3cret"}},
            "secrets must be a function from a secret's name to its value (for a dict, its .get), not dict",
        ),
        (
            {"secrets": {}},
            "secrets must be a function from a secret's name to its value (for a dict, its .get), not dict",
        ),
        ({"secrets": "CRM"}, "secrets must be a function from a secret's name to its value, not str"),
        (
            {"mail": SmtpTransport},
            "mail must be a mail transport, not the class SmtpTransport: make one, SmtpTransport(...)",
        ),
        (
            {"mail": "smtp.example.com"},
            "mail must be a mail transport, an object with a method send(message, secrets), not str",
        ),
        ({"http": "https://proxy:3128"}, "http must be an httpx.Client, not str"),
        ({"clock": "2026-01-01"}, "clock must be a function returning the time, not str"),
    ],
    ids=["secrets-dict", "secrets-empty-dict", "secrets-text", "mail-class", "mail-text", "http-text", "clock-text"],
)
def test_an_app_part_that_cannot_do_its_job_is_a_boot_error(given: dict[str, object], problem: str) -> None:
    """Each was taken and failed only where it was first used: ``secrets={"CRM": ...}`` (the
    dict, not its ``.get``) failed every authenticated webhook until it was dead, an empty
    one read the environment instead, ``mail=SmtpTransport`` (the class) failed every
    mail; a clock or client that is none failed every dispatch or webhook."""
    with pytest.raises(BootError) as raised:
        App([Feature("parts")], database_url="sqlite://", **given)  # type: ignore[arg-type]
    assert raised.value.problems == [problem]
