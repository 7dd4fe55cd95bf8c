"""A receiver's ``Retry-After`` (429 Too Many Requests, 503 Service Unavailable) is
honoured: the next attempt waits at least what it asks, at most an hour
(``RETRY_AFTER_MAX``), never less than the retry policy's own backoff.  Before, the header
was ignored: a receiver asking for an hour got the policy's 5 s, 10 s, ... and the row was
dead within a minute.  Real peer on 127.0.0.1, both databases, a hand-moved clock."""

from __future__ import annotations

import email.utils
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs
import pytest
from _receiver import Receiver
from _support import Hook, hook_feature, ok_data

from kumiko_typed import App, DeliveryError, Feature, MailMessage, RetryPolicy, User, ok
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)

f, hook = hook_feature("retry_after", RetryPolicy(times=3, base_delay=timedelta(seconds=5)))


@pytest.mark.parametrize(
    ("status", "value", "wait", "error"),
    [
        (429, "120", timedelta(seconds=120), "HTTP 429 Too Many Requests (Retry-After: 120 s)"),
        (503, " 600 ", timedelta(seconds=600), "HTTP 503 Service Unavailable (Retry-After: 600 s)"),
        (429, "1", timedelta(seconds=5), "HTTP 429 Too Many Requests (Retry-After: 1 s)"),
        (429, "0", timedelta(seconds=5), "HTTP 429 Too Many Requests (Retry-After: 0 s)"),
        (429, "9" * 40, timedelta(hours=1), "HTTP 429 Too Many Requests (Retry-After: 3600 s, at most an hour)"),
        (429, "soon", timedelta(seconds=5), "HTTP 429 Too Many Requests"),
        (429, "-30", timedelta(seconds=5), "HTTP 429 Too Many Requests"),
        (429, "Wed, 21 Oct 2015 07:28:00 GMT", timedelta(seconds=5), "HTTP 429 Too Many Requests"),  # past
        # Before, the first nine digits were read: a wait of 0 s for this one.
        (429, "0000000000120", timedelta(seconds=120), "HTTP 429 Too Many Requests (Retry-After: 120 s)"),
        (429, "1" + "0" * 30, timedelta(hours=1), "HTTP 429 Too Many Requests (Retry-After: 3600 s, at most an hour)"),
        # A redirect fails too: its Retry-After was ignored, the policy's 5 s went first.
        (
            307,
            "120",
            timedelta(seconds=120),
            "HTTP 307 redirect without a Location (redirects are not followed) (Retry-After: 120 s)",
        ),
    ],
    ids=[
        "429",
        "503-blanks",
        "below-backoff",
        "zero",
        "huge",
        "garbage",
        "negative",
        "past-date",
        "leading-zeros",
        "huge-round",
        "redirect",
    ],
)
def test_retry_after_sets_the_next_attempt(
    app_on: AppOn, receiver: Receiver, status: int, value: str, wait: timedelta, error: str
) -> None:
    receiver.respond = lambda _i, _p: (status, {"Retry-After": value})
    app = app_on([f], clock=FakeClock(T0))
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))

    assert app.run_worker(once=True)["retried"] == 1

    (item,) = app.outbox()
    assert (item.status, item.attempts, item.last_error) == ("pending", 1, error)
    assert item.next_attempt_at == T0 + wait


def test_retry_after_as_an_http_date_counts_from_now(app_on: AppOn, receiver: Receiver) -> None:
    """An HTTP-date is the receiver's wall clock: the wait is that date less the time now."""
    when = datetime.now(UTC) + timedelta(minutes=10)
    receiver.respond = lambda _i, _p: (503, {"Retry-After": email.utils.format_datetime(when, usegmt=True)})
    app = app_on([f], clock=FakeClock(T0))
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))

    assert app.run_worker(once=True)["retried"] == 1

    (item,) = app.outbox()
    assert item.next_attempt_at is not None
    assert timedelta(minutes=9) < item.next_attempt_at - T0 <= timedelta(minutes=10)
    assert item.last_error is not None and item.last_error.startswith("HTTP 503 Service Unavailable (Retry-After: ")


@pytest.mark.parametrize(
    "form",
    [
        lambda w: f"{w:%a, %d %b %Y %H:%M:%S} GMT",  # IMF-fixdate
        lambda w: f"{w:%A, %d-%b-%y %H:%M:%S} GMT",  # RFC 850
        lambda w: f"{w:%a %b} {w.day:2d} {w:%H:%M:%S %Y}",  # asctime: no zone, and GMT
    ],
    ids=["imf-fixdate", "rfc850", "asctime"],
)
def test_retry_after_is_read_in_each_http_date_form(
    app_on: AppOn, receiver: Receiver, form: Callable[[datetime], str]
) -> None:
    """RFC 9110 5.6.7: a recipient accepts all three HTTP-date forms.  Before, the asctime
    one (which has no zone: it is GMT) was taken for no date, and the wait it asked for
    ignored."""
    when = datetime.now(UTC) + timedelta(minutes=10)
    receiver.respond = lambda _i, _p: (503, {"Retry-After": form(when)})
    app = app_on([f], clock=FakeClock(T0))
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))

    assert app.run_worker(once=True)["retried"] == 1

    (item,) = app.outbox()
    assert item.next_attempt_at is not None
    assert timedelta(minutes=9) < item.next_attempt_at - T0 <= timedelta(minutes=10)


def test_the_last_attempt_is_dead_whatever_the_receiver_asks(app_on: AppOn, receiver: Receiver) -> None:
    receiver.respond = lambda _i, _p: (429, {"Retry-After": "60"})
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))
    for _ in range(2):
        assert app.run_worker(once=True)["retried"] == 1
        clock.advance(seconds=60)

    assert app.run_worker(once=True)["dead"] == 1
    (item,) = app.outbox()
    assert (item.status, item.attempts, item.next_attempt_at) == ("dead", 3, None)


@attrs.frozen
class Note:
    text: str


@pytest.mark.parametrize(
    ("asked", "error"),
    [
        ({"retry_after": 30}, "DeliveryError(retry_after=...) must be a datetime.timedelta (timedelta(seconds=30))"),
        ({"permanent": "no"}, "DeliveryError(permanent=...) must be True or False, not 'no'"),
    ],
    ids=["seconds-as-a-number", "permanent-as-text"],
)
def test_a_transports_delivery_error_of_the_wrong_kind_is_a_failed_attempt_not_a_dead_row(
    app_on: AppOn, asked: dict[str, object], error: str
) -> None:
    """A mail transport of your own asking for a wait of ``retry_after=30`` (seconds) made
    the next attempt unschedulable, and the row dead at once, unsent; ``permanent="no"``
    (true) made it dead too.  Now the transport's DeliveryError refuses them: a failed
    attempt, retried by the policy, whose error says what to pass."""

    class Busy:
        def send(self, message: MailMessage, secrets: Callable[[str], str], /) -> None:
            raise DeliveryError("the mail API is busy", **asked)  # type: ignore[arg-type]

    mailer = Feature("busy_mail", requires=["mail.send"])
    note = mailer.write_handler(
        "note",
        mailer.pipeline(Note)
        .send_mail(to=lambda c: ["ada@example.com"], subject=lambda c: "s", body=lambda c: c.payload.text)
        .return_(lambda c: ok(None)),
    )
    app = app_on([mailer], clock=FakeClock(T0), mail=Busy())
    ok_data(app.dispatch(note, Note("hi"), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))
    assert app.run_worker(once=True)["retried"] == 1
    (item,) = app.outbox()
    assert (item.status, item.attempts) == ("pending", 1)
    assert item.last_error is not None and item.last_error.startswith(f"TypeError: {error}"), item.last_error
