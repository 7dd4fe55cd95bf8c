"""Delivery options of the outbox steps: authentication references and retry policy.

Authentication names a *secret reference*, never a secret: the value is resolved at
delivery time by the App's ``secrets`` resolver, so it never enters the database.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal
from uuid import UUID

import attrs


@attrs.frozen
class Auth:
    """A header whose value comes from a secret reference at delivery time."""

    header: str
    secret_ref: str
    scheme: str = ""


def bearer(secret_ref: str) -> Auth:
    """``Authorization: Bearer <secret>`` with the secret looked up by ``secret_ref``."""
    return Auth("Authorization", secret_ref, "Bearer")


def header_auth(header: str, secret_ref: str) -> Auth:
    """``<header>: <secret>`` with the secret looked up by ``secret_ref``."""
    return Auth(header, secret_ref)


def _positive(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value}")


@attrs.frozen
class RetryPolicy:
    """How often and how far apart a failed delivery is tried (``times`` counts all attempts)."""

    times: int = attrs.field(default=3, validator=_positive)
    backoff: Literal["exponential", "linear"] = "exponential"
    base_delay: timedelta = timedelta(seconds=10)

    def delay(self, attempt: int) -> timedelta:
        """The pause after failed attempt number ``attempt`` (1-based)."""
        if self.backoff == "linear":
            return self.base_delay * attempt
        return self.base_delay * (1 << (attempt - 1))


@attrs.frozen
class MaildirTransport:
    """The embedded mail default: one RFC 5322 ``.eml`` file per message in ``folder``."""

    folder: str = "kumiko-mail"


@attrs.frozen
class SmtpTransport:
    """Deliver mail with ``smtplib``; ``password_ref`` names a secret, resolved at delivery."""

    host: str
    port: int = 25
    username: str | None = None
    password_ref: str | None = None
    starttls: bool = False
    timeout: float = 30.0


@attrs.frozen
class OutboxItem:
    """One deferred delivery as ``app.outbox()`` shows it."""

    id: UUID
    kind: Literal["mail", "webhook"]
    status: Literal["pending", "sent", "dead"]
    attempts: int
    last_error: str | None
    next_attempt_at: datetime | None = None
