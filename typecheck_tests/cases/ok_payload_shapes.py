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
invite = desk.write_handler("invite", desk.pipeline(Invite).return_(lambda c: ok(c.payload.email)))
reveal_type(invite)  # R: kumiko_typed._feature.WriteHandler[ok_payload_shapes.Invite, str] # PR: WriteHandler[Invite, str]
ticket = (
    desk.pipeline(Ticket)
    .compute("id", the_id)
    .compute("note", Resolvers.note)
    .compute("size", Resolvers.size)
    .return_(lambda c: ok((c.steps["id"], c.steps["size"])))
)
reveal_type(ticket)  # R: kumiko_typed._finished.Finished[ok_payload_shapes.Ticket, tuple[uuid.UUID, int]] # PR: Finished[Ticket, tuple[UUID, int]]
