"""What is not a MailTransport is refused where it is passed to App(mail=)."""

from __future__ import annotations

from kumiko_typed import App, Feature, MailMessage

shop = Feature("shop")


class NoSecrets:
    def send(self, message: MailMessage) -> None: ...


class WrongMessage:
    def send(self, message: str, secrets: object, /) -> None: ...


App([shop], mail=NoSecrets())  # E: arg-type
App([shop], mail=WrongMessage())  # E: arg-type
App([shop], mail="mail/")  # E: arg-type
