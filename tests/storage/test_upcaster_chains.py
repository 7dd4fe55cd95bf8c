"""Upcasting across several schema versions (docs/event-store.md, "Upcasting"), on SQLite
and PostgreSQL: events stored at versions 1 and 2 of a class now at version 3 are read
through each upcaster they need, in order; and an upcaster of the chain that fails is
named by the version it makes, whether it raised or returned no dict."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]


class UcStay(Entity):
    __tablename__ = "uc_stay"
    nights: Mapped[int] = mapped_column(default=0)
    note: Mapped[str] = mapped_column(sa.String(40), default="")


@attrs.frozen
class ExtendedV1:
    days: int


@attrs.frozen
class ExtendedV2:
    nights: int


@attrs.frozen
class Extended:
    nights: int
    note: str


@attrs.frozen
class Open:
    pass


@attrs.frozen
class Extend:
    id: uuid.UUID
    nights: int


def days_to_nights(payload: dict[str, Any]) -> dict[str, Any]:
    return {"nights": payload["days"]}


def with_note(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "note": "(before notes)"}


def _deploy(version: int, upcasters: dict[int, Any]) -> tuple[Feature[Any], Any, Any]:
    """The stay feature as deploy ``version`` wrote it: its class of "extended" at that
    schema version, appended by ``extend``."""
    cls = {1: ExtendedV1, 2: ExtendedV2, 3: Extended}[version]
    f: Feature[Any] = Feature("uc")
    f.entity(UcStay)
    f.event(cls, name="extended", version=version, upcasters=upcasters)

    @f.projector(UcStay, cls)
    def extended(row: UcStay, event: Any) -> None:
        row.nights += event.days if version == 1 else event.nights
        row.note = getattr(event, "note", "")

    made: dict[int, Callable[[Any], object]] = {
        1: lambda c: ExtendedV1(c.payload.nights),
        2: lambda c: ExtendedV2(c.payload.nights),
        3: lambda c: Extended(c.payload.nights, "asked"),
    }
    opened = f.write_handler(
        "open", f.pipeline(Open).create("s", UcStay, data=lambda c: UcStay()).return_(lambda c: ok(c.steps["s"].id))
    )
    extend = f.write_handler(
        "extend",
        f.pipeline(Extend)
        .append_event(UcStay, id=lambda c: c.payload.id, event=made[version])
        .return_(lambda c: ok(None)),
    )
    return f, opened, extend


@pytest.fixture
def stay(app_on: AppOn, user: User) -> tuple[AppOn, uuid.UUID]:
    """A stay extended by three deploys in turn: by 1 night at schema version 1, by 2 at
    version 2 and by 3 at version 3."""
    f1, opened, extend1 = _deploy(1, {})
    f2, _, extend2 = _deploy(2, {1: days_to_nights})
    f3, _, extend3 = _deploy(3, {1: days_to_nights, 2: with_note})
    first = app_on([f1])
    stay_id = ok_data(first.dispatch(opened, Open(), user=user))
    for nights, (f, extend) in enumerate([(f1, extend1), (f2, extend2), (f3, extend3)], start=1):
        ok_data(app_on([f]).dispatch(extend, Extend(stay_id, nights), user=user))
    return app_on, stay_id


def test_each_stored_version_is_read_through_the_upcasters_it_needs_in_order(
    stay: tuple[AppOn, uuid.UUID], user: User
) -> None:
    app_on, stay_id = stay
    f3, _, _ = _deploy(3, {1: days_to_nights, 2: with_note})
    app = app_on([f3])
    read = ok_data(app.read_stream(UcStay, stay_id, user=user))[1:]
    assert [(e.schema_version, e.event) for e in read] == [
        (1, Extended(1, "(before notes)")),
        (2, Extended(2, "(before notes)")),
        (3, Extended(3, "asked")),
    ]
    assert ok_data(app.rebuild_projection(UcStay, user=user, verify=True)).matches


def _broken(version: int) -> Any:
    """``with_note`` gone wrong the ``version``-th way."""
    return {
        0: lambda payload: payload["weeks"],  # raises KeyError
        1: lambda payload: None,  # forgot its return
        2: lambda payload: [payload],
    }[version]


@pytest.mark.parametrize(
    ("upcasters", "reason"),
    [
        # The first of the chain raised: it makes version 2, not the class's 3.
        (
            {1: _broken(0), 2: with_note},
            "the event at version 2 of UcStay {id} ('extended', stored at schema version 1): "
            "an upcaster to schema version 2 raised KeyError",
        ),
        (
            {1: days_to_nights, 2: _broken(0)},
            "the event at version 2 of UcStay {id} ('extended', stored at schema version 1): "
            "an upcaster to schema version 3 raised KeyError",
        ),
        # No dict back: the upcaster is named, not the stored payload ("expected a JSON object at $").
        (
            {1: _broken(1), 2: with_note},
            "the event at version 2 of UcStay {id} ('extended', stored at schema version 1): "
            "an upcaster to schema version 2 returned a NoneType, not the payload as a dict",
        ),
        (
            {1: days_to_nights, 2: _broken(2)},
            "the event at version 2 of UcStay {id} ('extended', stored at schema version 1): "
            "an upcaster to schema version 3 returned a list, not the payload as a dict",
        ),
    ],
)
def test_an_upcaster_of_a_chain_that_fails_is_named_by_the_version_it_makes(
    stay: tuple[AppOn, uuid.UUID], user: User, upcasters: dict[int, Any], reason: str
) -> None:
    app_on, stay_id = stay
    f3, _, _ = _deploy(3, upcasters)
    app = app_on([f3])
    expected = reason.format(id=stay_id)
    read = failure_of(app.read_stream(UcStay, stay_id, user=user), "internal_error")
    assert f"raised UnreadableEvent: {expected} (error id " in read.message
    with app.engine.begin() as conn:  # a row the rebuild would repair, if it wrote anything
        conn.execute(sa.update(UcStay).values(nights=0))
    rebuilt = failure_of(app.rebuild_projection(UcStay, user=user), "internal_error")
    assert f"raised UnreadableEvent: {expected} (error id " in rebuilt.message
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(UcStay.nights)).scalar_one() == 0
