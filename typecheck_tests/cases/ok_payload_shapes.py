"""Payload classes and resolvers as users write them: attrs validators with the library's
mail_address among others (a tuple; a list display's join is no callable, docs/steps.md),
a dataclass payload, a helper typed by a Protocol, a class's static and class methods."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any, Protocol

import attrs
from attrs.validators import and_, max_len

from kumiko_typed import Ctx, Feature, mail_address, ok


@attrs.frozen
class Invite:
    email: str = attrs.field(validator=(mail_address, max_len(200)))
    cc: str = attrs.field(validator=and_(max_len(200), mail_address))


@dataclasses.dataclass(frozen=True)
class Ticket:
    id: uuid.UUID
    note: str | None = None


class HasId(Protocol):
    @property
    def id(self) -> uuid.UUID: ...


def the_id(c: Ctx[HasId, Any, Any]) -> uuid.UUID:
    return c.payload.id


class Resolvers:
    @staticmethod
    def note(c: Ctx[Ticket, Any, Any]) -> str:
        return c.payload.note or ""

    @classmethod
    def size(cls, c: Ctx[Ticket, Any, Any]) -> int:
        return len(c.steps["note"])


desk = Feature("desk")
invite = desk.write_handler("invite", desk.pipeline(Invite).return_(lambda c: ok(reveal_type(c.payload.email))))  # R: str # PR: str
ticket = (
    desk.pipeline(Ticket)
    .compute("id", the_id)
    .compute("note", Resolvers.note)
    .compute("size", Resolvers.size)
    .compute("both", lambda c: reveal_type((c.steps["id"], c.steps["size"])))  # R: tuple[uuid.UUID, int] # PR: tuple[UUID, int]
    .return_(lambda c: ok(c.steps["both"]))
)


def stepwise() -> None:
    """A pipeline extended by reassigning its variable in a function (and a class attribute
    extending its base's): each step keeps its own result type, with or without the plugin."""
    grown = desk.pipeline(Ticket).compute("count", lambda c: 1)
    grown = grown.compute("label", lambda c: "one")
    grown = grown.compute("both", lambda c: reveal_type((c.steps["count"], c.steps["label"])))  # R: tuple[int, str] # PR: tuple[int, str]


class BaseFlows:
    flow = desk.pipeline(Ticket).compute("count", lambda c: 1)


class MoreFlows(BaseFlows):
    flow = BaseFlows.flow.compute("label", lambda c: "one")
