"""Delivery options of the outbox steps: authentication references and retry policy.

Authentication names a *secret reference*, never a secret: the value is resolved at
delivery time by the App's ``secrets`` resolver, so it never enters the database.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Literal
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

import attrs

from ._rules import negative_duration

__all__ = [
    "CLIENT_HEADERS",
    "HEADERS_MAX",
    "HEADER_NAME",
    "Auth",
    "OutboxItem",
    "RetryPolicy",
    "bearer",
    "header_auth",
    "masked_url",
    "signed",
    "target_of",
]


#: An HTTP field name: an RFC 9110 token.
HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Headers the HTTP client sets, never a step (lower case): the message's framing and
#: routing, and the hop-by-hop ones (RFC 9110 7.6.1).  ``Transfer-Encoding`` beside the
#: client's ``Content-Length`` frames one request two ways (request smuggling), a
#: ``Content-Length`` not the body's fails every attempt, ``Host`` routes the request to
#: another virtual host than its URL names.
CLIENT_HEADERS = frozenset(
    {
        "content-length",
        "transfer-encoding",
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    }
)

#: The most bytes a step's headers may take together, names, values, ``: `` and line ends
#: counted: 8 KiB, nginx's default for one header line and half of Node's for a request's
#: whole head (the framework's own headers need the rest).  Larger, a receiver answers 431
#: or drops the connection at every attempt, and the row was dead only after them all.
HEADERS_MAX = 8 * 1024


@attrs.frozen
class Auth:
    """How a webhook's receiver knows who sent it, by a secret looked up at delivery time:
    a header holding the secret (:func:`bearer`, :func:`header_auth`), or a signature made
    with it (:func:`signed`, ``signs=True``), the secret staying here."""

    header: str
    secret_ref: str
    scheme: str = ""
    signs: bool = False


def bearer(secret_ref: str) -> Auth:
    """``Authorization: Bearer <secret>`` with the secret looked up by ``secret_ref``."""
    return Auth("Authorization", _ref("bearer", secret_ref), "Bearer")


def signed(secret_ref: str) -> Auth:
    """Sign each attempt as Standard Webhooks specifies (``webhook-id``, ``webhook-timestamp``,
    ``webhook-signature: v1,<base64 HMAC-SHA256>``) with the key ``secret_ref`` names
    (``whsec_`` + base64); the receiver verifies it with the same key, which never travels."""
    return Auth("webhook-signature", _ref("signed", secret_ref), signs=True)


def header_auth(header: str, secret_ref: str) -> Auth:
    """``<header>: <secret>`` with the secret looked up by ``secret_ref``."""
    if not HEADER_NAME.fullmatch(header):
        raise ValueError(f"header_auth: {header!r} is not an HTTP header name")
    return Auth(header, _ref("header_auth", secret_ref))


def _ref(function: str, secret_ref: object) -> str:
    """A secret's name, refused when the step is built: a number or "" was stored and
    every delivery then failed looking it up (or signed with whatever the resolver said)."""
    if not isinstance(secret_ref, str) or not secret_ref:
        raise ValueError(f"{function}: secret_ref must name a secret (a non-empty text), not {secret_ref!r}")
    return secret_ref


#: The most attempts a row stores (its column is a 32-bit integer on PostgreSQL).
MAX_TIMES = 2**31 - 1


def _positive(_inst: object, attribute: attrs.Attribute[int], value: object) -> None:
    # "3" was a TypeError here, 2.5 and True were taken, and 2**31 failed the dispatch
    # queuing the row on PostgreSQL only.
    if type(value) is not int or not 1 <= value <= MAX_TIMES:
        raise ValueError(f"{attribute.name} must be a whole number from 1 to {MAX_TIMES}, not {value!r}")


def _backoff(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in ("exponential", "linear"):
        raise ValueError(f"{attribute.name} must be 'exponential' or 'linear', not {value!r}")


def _delay(_inst: object, attribute: attrs.Attribute[timedelta], value: timedelta) -> None:
    """Refused when the policy is made: at delivery a negative delay would make every
    retry due at once, and a number of seconds would fail the dispatch queuing the row."""
    if not isinstance(value, timedelta):
        raise TypeError(f"{attribute.name} must be a timedelta, not {type(value).__name__}")
    negative = negative_duration(value)  # a wait's duration is refused in the same words
    if negative is not None:
        raise ValueError(f"{attribute.name} {negative}")


@attrs.frozen
class RetryPolicy:
    """How often and how far apart a failed delivery is tried (``times`` counts all attempts)."""

    times: int = attrs.field(default=3, validator=_positive)
    backoff: Literal["exponential", "linear"] = attrs.field(default="exponential", validator=_backoff)
    base_delay: timedelta = attrs.field(default=timedelta(seconds=10), validator=_delay)

    def delay(self, attempt: int) -> timedelta:
        """The pause after failed attempt number ``attempt`` (1-based)."""
        if self.backoff == "linear":
            return self.base_delay * attempt
        return self.base_delay * (1 << (attempt - 1))


@attrs.frozen
class OutboxItem:
    """One deferred delivery as ``app.outbox()`` shows it."""

    id: UUID
    kind: Literal["mail", "webhook"]
    status: Literal["pending", "sent", "dead"]
    attempts: int
    last_error: str | None
    next_attempt_at: datetime | None = None
    #: Where it goes: the mail's recipients, or the webhook's URL without its password and
    #: with its query values masked (a token there is a secret too).
    target: str = ""


def target_of(kind: str, message: object) -> str:
    """``OutboxItem.target`` of a stored message ("" for one too damaged to tell)."""
    if not isinstance(message, Mapping):
        return ""
    if kind == "mail":
        to = message.get("to")
        return ", ".join(str(t) for t in to) if isinstance(to, list) else ""
    url = message.get("url")
    return masked_url(url) if kind == "webhook" and isinstance(url, str) else ""


def masked_url(url: str) -> str:
    """``url`` without its password and with its query values masked ("" if unparsable)."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return ""
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.username is not None:
        netloc = parts.username + (":***" if parts.password is not None else "") + "@" + netloc
    pairs = (pair.partition("=") for pair in parts.query.split("&") if pair)
    query = "&".join(name + ("=***" if sep else "") for name, sep, _ in pairs)
    return urlunsplit((parts.scheme, netloc + port, parts.path, query, ""))
