"""A mail transport that keeps every mail it is given, for a test to read."""

from __future__ import annotations

import threading

from .._mail import MailMessage, SecretLookup

__all__ = ["MemoryMail"]


class MemoryMail:
    """``App(mail=MemoryMail())``: each delivery appends the typed :class:`MailMessage` to
    :attr:`sent` (a worker that redoes a delivery after a crash appends it again, same
    ``id``)."""

    def __init__(self) -> None:
        self._sent: list[MailMessage] = []
        self._lock = threading.Lock()  # workers in threads share one App

    def send(self, message: MailMessage, secrets: SecretLookup, /) -> None:
        with self._lock:
            self._sent.append(message)

    @property
    def sent(self) -> list[MailMessage]:
        """The mails delivered so far, oldest first (a copy)."""
        with self._lock:
            return list(self._sent)

    def clear(self) -> None:
        with self._lock:
            self._sent.clear()
