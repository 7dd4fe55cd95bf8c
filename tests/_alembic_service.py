"""The service of tests/storage/test_alembic.py, as a user's ``myservice`` would be: an
aggregate with the column kinds whose DDL the App's engine makes its own (text, a 4-byte
float, JSON), a projection on a base of its own, a handler appending events, and a
workflow with a ``wait``, a ``wait_for_event`` and a mail (the outbox).

The test's ``myservice`` package (written to a temporary folder, imported by the docs'
``env.py`` in an ``alembic`` process) re-exports it: one module, so the classes stored in
runs are named alike in every process."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
from sqlalchemy import JSON, REAL, String, Uuid
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from kumiko_typed import App, Entity, Feature, manual, ok
from kumiko_typed.testing import MemoryMail

START = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


class AlmNote(Entity):
    __tablename__ = "alm_note"
    title: Mapped[str] = mapped_column(String(40), unique=True)
    tag: Mapped[str]  # VARCHAR without a length
    ratio: Mapped[float] = mapped_column(REAL)
    data: Mapped[Any] = mapped_column(JSON)


class Projections(MappedAsDataclass, DeclarativeBase):
    """The service's read models, on a metadata of their own (docs/operations.md)."""


class AlmTagCount(Projections):
    __tablename__ = "alm_tag_count"
    tag: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(Uuid, index=True)
    notes: Mapped[int]


@attrs.frozen
class AddNote:
    title: str
    tag: str
    ratio: float
    data: Any


@attrs.frozen
class Tagged:
    tag: str


@attrs.frozen
class Follow:
    tag: str


alm = Feature("alm", requires=["mail.send"], projections=[AlmTagCount])
alm.entity(AlmNote)
alm.event(Tagged)

add_note = alm.write_handler(
    "note:add",
    alm.pipeline(AddNote)
    .create(
        "note",
        AlmNote,
        data=lambda c: AlmNote(title=c.payload.title, tag=c.payload.tag, ratio=c.payload.ratio, data=c.payload.data),
    )
    .append_event(AlmNote, id=lambda c: c.steps["note"].id, event=lambda c: Tagged(c.payload.tag))
    .unsafe_projection_upsert(
        AlmTagCount,
        on=["tag"],
        row=lambda c: {"tag": c.payload.tag, "tenant_id": c.user.tenant_id, "notes": 1},
    )
    .return_(lambda c: ok(str(c.steps["note"].id))),
)

follow = alm.workflow(
    "follow",
    trigger=manual(Follow),
    pipeline=alm.workflow_pipeline(Follow)
    .wait(timedelta(minutes=1))
    .wait_for_event("tagged", Tagged, key=lambda c: c.payload.tag, event_key=lambda e: e.tag, timeout=timedelta(days=1))
    .send_mail(to="ops@example.com", subject=lambda c: f"tagged {c.payload.tag}", body=lambda c: "seen"),
)


class Clock:
    """The App's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def make_app(database_url: str, clock: Clock | None = None, mail: MemoryMail | None = None) -> App:
    return App([alm], database_url=database_url, clock=clock, mail=mail)
