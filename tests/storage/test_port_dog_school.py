"""The ``eventsourcing`` library's "dog school" example, ported: a dog is registered, learns
tricks, and its row lists them.  Its projector appends to the row's JSON list in place
(``row.tricks.append(...)``), as the original's aggregate does: SQLAlchemy's change
tracking sees no attribute set, so the write path must, or the event is stored while the
row silently keeps its old list (it did: the row stayed ``[]``, and a rebuild found it
differing from its own events).  Both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import attrs
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, ok


class DsDog(Entity):
    __tablename__ = "ds_dog"
    name: Mapped[str] = mapped_column(sa.String(40))
    tricks: Mapped[list[str]] = mapped_column(sa.JSON, default_factory=list)
    #: Per trick, how many the dog knew once it had learnt it.
    learnt: Mapped[dict[str, int]] = mapped_column(sa.JSON, default_factory=dict)


@attrs.frozen
class DogRegistered:
    name: str


@attrs.frozen
class TrickAdded:
    trick: str


@attrs.frozen
class RegisterDog:
    name: str


@attrs.frozen
class AddTrick:
    dog_id: uuid.UUID
    trick: str


@attrs.frozen
class GetDog:
    dog_id: uuid.UUID


school = Feature("school")
school.entity(DsDog)
school.event(DogRegistered, name="dog-registered")
school.event(TrickAdded, name="trick-added")


@school.projector(DsDog, DogRegistered)
def _registered(row: DsDog, event: DogRegistered) -> None:
    row.name = event.name


@school.projector(DsDog, TrickAdded)
def _trick_added(row: DsDog, event: TrickAdded) -> None:
    row.tricks.append(event.trick)
    row.learnt[event.trick] = len(row.tricks)


register_dog = school.write_handler(
    "dog:register",
    school.pipeline(RegisterDog)
    .create("dog", DsDog, data=lambda c: DsDog(name=c.payload.name), event=lambda c: DogRegistered(c.payload.name))
    .return_(lambda c: ok(c.steps["dog"].id)),
)
add_trick = school.write_handler(
    "dog:add-trick",
    school.pipeline(AddTrick)
    .append_event(DsDog, id=lambda c: c.payload.dog_id, event=lambda c: TrickAdded(c.payload.trick))
    .return_(lambda c: ok(None)),
)
get_dog = school.query_handler(
    "dog:get",
    school.query_pipeline(GetDog)
    .get_one("dog", lambda c: sa.select(DsDog).where(DsDog.id == c.payload.dog_id))
    .return_(lambda c: ok((c.steps["dog"].name, c.steps["dog"].tricks, c.steps["dog"].learnt))),
)


def test_a_dog_learns_tricks_and_its_row_lists_them(app_on: Callable[..., App], user: User) -> None:
    app = app_on([school])
    dog = ok_data(app.dispatch(register_dog, RegisterDog("Fido"), user=user))
    for trick in ("roll over", "play dead"):
        assert app.dispatch(add_trick, AddTrick(dog, trick), user=user) == Ok(None)
    expected = ("Fido", ["roll over", "play dead"], {"roll over": 1, "play dead": 2})
    assert app.query(get_dog, GetDog(dog), user=user) == Ok(expected)
    stream = ok_data(app.read_stream(DsDog, dog, user=user))
    assert [e.event for e in stream] == [DogRegistered("Fido"), TrickAdded("roll over"), TrickAdded("play dead")]
    report = ok_data(app.rebuild_projection(DsDog, user=user, verify=True))
    assert report.changed == {} and report.matches, report
