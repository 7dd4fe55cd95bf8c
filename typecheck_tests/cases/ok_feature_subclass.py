"""A subclass of Feature is checked as Feature is: mypy names a call by its receiver's
class (``Team.pipeline``), so the plugin finds the hooks of the Feature methods and of
the Feature.__init__ a subclass inherits. A generic subclass takes its capabilities from
requires= (no kumiko-tier error for a declared step), and a subclass's pipeline starts
with no keys, exactly as one of Feature's. A class named in lower case is one too (its
constructor was not looked up: each declared step was a false kumiko-tier error)."""

from __future__ import annotations

from typing import Literal, TypeVar

from kumiko_typed import Feature, ok

from _models import Order

C = TypeVar("C", bound=str, covariant=True)


class Team(Feature[C]):
    def owner(self) -> str:
        return self.name


class Mailer(Feature[Literal["mail.send"]]):
    def __init__(self, name: str) -> None:
        super().__init__(name, requires=["mail.send"])


team = Team("team", requires=["mail.send"])
reveal_type(team.pipeline(Order))  # R: kumiko_typed._builders.Pipeline[_models.Order, TypedDict({}), TypedDict({}), Literal['mail.send']] # PR: Pipeline[Order, Keys[*tuple[()]], Scope[*tuple[()]], str]
notify = team.write_handler(
    "notify",
    team.pipeline(Order)
    .send_mail(to="a@example.com", subject="s", body="b")
    .compute("count", lambda c: len(c.payload.lines))
    .return_(lambda c: ok(reveal_type(c.steps["count"]))),  # R: int # PR: int
)
reveal_type(notify)  # R: kumiko_typed._feature.WriteHandler[_models.Order, int] # PR: WriteHandler[Order, int]

mailer = Mailer("mailer")
welcome = mailer.write_handler(
    "welcome",
    mailer.pipeline(Order).send_mail(to="a@example.com", subject="s", body="b").return_(lambda c: ok(c.payload.note)),
)
reveal_type(mailer.pipeline(Order))  # R: kumiko_typed._builders.Pipeline[_models.Order, TypedDict({}), TypedDict({}), Literal['mail.send']] # PR: Pipeline[Order, Keys[*tuple[()]], Scope[*tuple[()]], Literal['mail.send']]


class squad(Feature[C]):
    pass


crew = squad("crew", requires=["mail.send"])
reveal_type(crew.pipeline(Order))  # R: kumiko_typed._builders.Pipeline[_models.Order, TypedDict({}), TypedDict({}), Literal['mail.send']] # PR: Pipeline[Order, Keys[*tuple[()]], Scope[*tuple[()]], str]
page = crew.write_handler(
    "page",
    crew.pipeline(Order).send_mail(to="a@example.com", subject="s", body="b").return_(lambda c: ok(1)),
)
