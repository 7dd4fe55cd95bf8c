"""App(mail=) takes any MailTransport: the kit's MemoryMail and a user's own class, no cast;
the plugin's App factories take the same keywords as App."""

from __future__ import annotations

from collections.abc import Callable

from kumiko_typed import App, Feature, MailMessage, MailTransport, SmtpTransport
from kumiko_typed.testing import AppFactory, FakeClock, MemoryMail

shop = Feature("shop")


class Outbox:
    """A user's transport: names its parameters as it likes."""

    def __init__(self) -> None:
        self.subjects: list[str] = []

    def send(self, mail: MailMessage, lookup: Callable[[str], str], /) -> None:
        self.subjects.append(mail.subject)


memory = MemoryMail()
App([shop], database_url="sqlite://", mail=memory, clock=FakeClock())
App([shop], database_url="sqlite://", mail=Outbox())
transports: list[MailTransport] = [memory, Outbox(), SmtpTransport("localhost")]
reveal_type(memory.sent)  # R: list[kumiko_typed._mail.MailMessage] # PR: list[MailMessage]


def build(factory: AppFactory) -> App:
    return factory([shop], mail=Outbox(), clock=FakeClock())
