"""Outbox steps: ``send_mail`` and ``send_webhook`` insert a row in the pipeline's
transaction (a rollback leaves none); the worker side is :mod:`kumiko_typed._outbox`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
from sqlalchemy import insert

from .._delivery import HEADER_VALUE, json_text, url_problem
from .._errors import Problem, Unfit
from .._jsonable import jsonable
from .._limits import refuse, source_path, stored_json
from .._mail_address import address_problem, header_problem
from .._notify import notify
from .._ordered_ids import ordered_uuid
from .._outbox_types import CLIENT_HEADERS, HEADER_NAME, HEADERS_MAX, Auth, RetryPolicy
from .._tables import outbox
from ._base import Result, Step, called, resolve

if TYPE_CHECKING:
    from .._interpreter import Run

__all__ = ["DEFAULT_POLICY", "SendMail", "SendWebhook"]

DEFAULT_POLICY = RetryPolicy()
_BAD_URL = "the webhook URL cannot be delivered"


@attrs.frozen(slots=True)
class SendMail(Step):
    kind = "mail.send"
    to: object
    subject: object
    body: object
    sender: object
    html: object = None
    reply_to: object = None

    def execute(self, run: Run) -> Result:
        to = resolve(self.to, run, "to=")
        if isinstance(to, str):
            recipients = [to]
        elif isinstance(to, Sequence) and not isinstance(to, bytes) and all(isinstance(t, str) for t in to):
            recipients = list(to)
        else:  # None (an optional payload field) was an internal_error; a set's order is none
            raise Unfit([_to_problem(run, to, f"must be an address or a list of addresses, not {_kind(to)}")])
        if not recipients:  # a payload's empty list is the caller's mistake, not a bug
            raise Unfit([_to_problem(run, to, "must name at least one recipient")])
        subject, body = resolve(self.subject, run, "subject="), resolve(self.body, run, "body=")
        sender = None if self.sender is None else resolve(self.sender, run, "sender=")
        html = None if self.html is None else resolve(self.html, run, "html=")
        reply_to = None if self.reply_to is None else resolve(self.reply_to, run, "reply_to=")
        # A function's result is typed a text, but without a checker its repr was stored:
        # a body of a dict was sent as "{'total': 5}".
        refuse(_text_problems([("subject", subject), ("body", body)], run.payload, optional=False))
        refuse(_text_problems([("sender", sender), ("html", html), ("reply_to", reply_to)], run.payload))
        message: dict[str, object] = {"to": recipients, "subject": subject, "body": body}
        if sender is not None:  # absent (or resolved to None), the transport's default applies
            message["sender"] = sender
        if html is not None:  # an HTML alternative to the text body; absent, text only
            message["html"] = html
        if reply_to:  # where a reader's reply goes; absent (None or ""), to the sender
            message["reply_to"] = reply_to
        fields = [*(("to", t) for t in (to if isinstance(to, list | tuple) else [to])), ("subject", subject)]
        optional = [("sender", sender), ("reply_to", reply_to)]
        refuse(_header_problems([*fields, *optional], run.payload))
        refuse(_address_problems([*fields[:-1], *optional], run.payload))
        _enqueue(run, "mail", message, DEFAULT_POLICY)
        return None


def _to_problem(run: Run, to: object, message: str) -> Problem:
    return {"path": source_path(run.payload, to), "message": message, "column": f"{outbox.name}.message.to"}


def _kind(value: object) -> str:
    return "None" if value is None else type(value).__name__


def _text_problems(fields: list[tuple[str, object]], payload: object, *, optional: bool = True) -> list[Problem]:
    allowed = " (or None)" if optional else ""
    return [
        {
            "path": source_path(payload, value),
            "message": f"must be a text{allowed}, not {_kind(value)}",
            "column": f"{outbox.name}.message.{name}",
        }
        for name, value in fields
        if not isinstance(value, str) and (value is not None or not optional)
    ]


def _header_problems(fields: list[tuple[str, object]], payload: object) -> list[Problem]:
    """Header injection: a recipient, subject or sender with a line break would add
    headers (``Bcc:``) in a transport that writes them as given.  Refused when the row
    would be written, naming the payload field the value came from, on every database."""
    return [
        {"path": source_path(payload, value), "message": problem, "column": f"{outbox.name}.message.{name}"}
        for name, value in fields
        if value is not None and (problem := header_problem(str(value))) is not None
    ]


def _address_problems(fields: list[tuple[str, object]], payload: object) -> list[Problem]:
    """Recipient injection: a recipient or sender that is several addresses (a comma, a
    group) would send the mail to addresses no one meant to.  Refused when the row would
    be written, naming the payload field."""
    problems: list[Problem] = []
    for name, value in fields:
        # A sender or reply-to of "" (or None) is none given; a recipient of "" is no address.
        problem = None if name in ("sender", "reply_to") and not value else address_problem(str(value))
        if problem is not None:
            column = f"{outbox.name}.message.{name}"
            problems.append({"path": source_path(payload, value), "message": problem, "column": column})
    return problems


@attrs.frozen(slots=True)
class SendWebhook(Step):
    kind = "webhook.send"
    url: object
    method: str
    headers: object
    body: object
    auth: object
    retry: object

    def execute(self, run: Run) -> Result:
        auth = self.auth
        assert auth is None or isinstance(auth, Auth)  # boot refuses any other
        policy = self.retry if isinstance(self.retry, RetryPolicy) else DEFAULT_POLICY
        url = resolve(self.url, run, "url=")
        problem = url_problem(str(url))
        if problem is not None:  # refused now, not first tried (and dead) after the commit
            column = f"{outbox.name}.message.url"
            raise Unfit([{"path": source_path(run.payload, url), "message": problem, "column": column}], _BAD_URL)
        headers = dict(resolve(self.headers, run, "headers=") or {})
        refuse(_http_header_problems(headers, run.payload))
        # Stored as the text sent (delivery's ``str()``), not as JSON numbers: PostgreSQL's
        # jsonb gave a float back as its numeric, so a header of 1e20 went out as
        # 100000000000000000000 and one of -0.0 as 0.0 from PostgreSQL, 1e+20 and -0.0 from SQLite.
        headers = {name: value if type(value) is str else str(jsonable(value)) for name, value in headers.items()}
        message = {
            "url": str(url),
            "method": self.method.upper(),
            "headers": headers,
            # Their order as given: PostgreSQL's jsonb sorts an object's keys (SQLite's
            # JSON text keeps them), so the headers went out in another order from each.
            # Beside "headers", not instead: a worker of an earlier release reads that.
            "header_order": list(headers),
            "body": called(self.body, run, "body=") if callable(self.body) else None,
            "auth": None
            if auth is None or auth.signs
            else {"header": auth.header, "secret_ref": auth.secret_ref, "scheme": auth.scheme},
        }
        if auth is not None and auth.signs:
            # Not under "auth": a worker of an earlier release would send that secret as a
            # header; this key it does not know, and it sends the request unsigned.
            message["sign"] = {"secret_ref": auth.secret_ref}
        _enqueue(run, "webhook", message, policy, body_as_text=True)
        return None


def _http_header_problems(headers: Mapping[object, object], payload: object) -> list[Problem]:
    """Headers no HTTP request can carry (a line break, a non-ASCII character, a name that is
    no token), that only the HTTP client may set (``CLIENT_HEADERS``) or the outbox sets
    (``Idempotency-Key``: one key a row, the same on each attempt), or more of them than
    a receiver takes (``HEADERS_MAX``): refused when the row would be written, not tried
    until it is dead (or sent as a smuggled request)."""
    problems: list[Problem] = []
    for name, value in headers.items():
        if not HEADER_NAME.fullmatch(str(name)):
            offending, message = name, "is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)"
        elif str(name).lower() in CLIENT_HEADERS:
            offending, message = name, "is set by the HTTP client (framing, routing and hop-by-hop headers)"
        elif str(name).lower() == "idempotency-key":
            # Was replaced by the row's id without a word: a step that set its own (an
            # order number for the receiver to deduplicate on) saw another key arrive.
            offending, message = name, _OWN_KEY
        elif value is None or isinstance(value, bool | bytes | bytearray | Mapping | list | tuple | set | frozenset):
            # Their text is no one's header: "None", "True", a base64 or a Python repr.
            offending, message = value, f"is not an HTTP header value (a text or a number), not {type(value).__name__}"
        elif str(value) and not HEADER_VALUE.fullmatch(str(value)):
            offending, message = value, "is not an HTTP header value (printable ASCII, no line breaks or outer blanks)"
        else:
            continue
        problems.append({"path": source_path(payload, offending), "message": message, "column": _HEADERS})
    size = 0 if problems else sum(len(str(name)) + len(str(value)) + 4 for name, value in headers.items())
    if size > HEADERS_MAX:
        longest = max(headers.values(), key=lambda value: len(str(value)))
        message = (
            f"the step's headers take {size} bytes, more than the {HEADERS_MAX} a webhook's may "
            "(receivers refuse larger ones: 431): send large values in the body"
        )
        problems.append({"path": source_path(payload, longest), "message": message, "column": _HEADERS})
    return problems


_HEADERS: Final = f"{outbox.name}.message.headers"
_OWN_KEY: Final = (
    "is set by the outbox: every attempt of the webhook carries its row's id as the Idempotency-Key, "
    "the same on each retry; leave this header out (a receiver that deduplicates on your own key "
    "reads it from the body or another header)"
)


def _enqueue(
    run: Run, kind: str, message: Mapping[str, Any], policy: RetryPolicy, *, body_as_text: bool = False
) -> None:
    stored = stored_json(message, f"{outbox.name}.message", run.payload)
    if body_as_text:
        # The body's JSON text, written as the HTTP client writes it, is what is posted:
        # PostgreSQL's jsonb sorts an object's keys and writes 1e20 as an integer, so a
        # document read back from it posted other bytes than from SQLite.
        body = stored.pop("body")
        stored["text"] = None if body is None else json_text(body)
    notify(run.db)
    run.db.execute(
        insert(outbox).values(
            id=ordered_uuid(),  # rows queued at one instant are listed and delivered as queued
            kind=kind,
            message=stored,
            status="pending",
            attempts=0,
            max_attempts=policy.times,
            backoff=policy.backoff,
            base_delay_seconds=policy.base_delay.total_seconds(),
            next_attempt_at=run.now,
            created_at=run.now,
            handler=run.event.handler,
            tenant_id=run.user.tenant_id,
            correlation_id=run.event.correlation_id,
        )
    )
