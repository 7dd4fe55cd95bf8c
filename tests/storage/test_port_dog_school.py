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

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok


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


def test_a_stream_of_a_thousand_events_reads_back_whole_and_in_order(app_on: Callable[..., App], user: User) -> None:
    """A long stream (1001 events): every one read back, versions 1..1001 and positions
    rising, and the rebuild's replay gives the row the writes gave."""
    app = app_on([school])
    dog = ok_data(app.dispatch(register_dog, RegisterDog("Rex"), user=user))
    for n in range(1000):
        assert app.dispatch(add_trick, AddTrick(dog, f"t{n}"), user=user) == Ok(None)
    stream = ok_data(app.read_stream(DsDog, dog, user=user))
    assert [e.version for e in stream] == list(range(1, 1002))
    assert [e.position for e in stream] == sorted(e.position for e in stream)
    assert [e.event for e in stream[1:]] == [TrickAdded(f"t{n}") for n in range(1000)]
    report = ok_data(app.rebuild_projection(DsDog, user=user, verify=True))
    assert report.matches and report.streams == 1, report


def test_hostile_tricks_are_stored_exactly_or_refused_naming_the_field(
    app_on: Callable[..., App], user: User, make_user: Callable[..., User]
) -> None:
    """A trick of 1 MB, a line separator, an emoji and quotes are stored and read back
    exactly on both databases; a NUL or a lone surrogate is a ``validation_error`` at
    ``$.trick``, nothing stored. Another tenant's read of the stream is the answer for
    a stream that does not exist."""
    app = app_on([school])
    dog = ok_data(app.dispatch(register_dog, RegisterDog("Rex"), user=user))
    kept = ["z" * 1_000_000, "a\u2028b", "\U0001f436", "'; DROP TABLE ds_dog; --\""]
    for trick in kept:
        assert app.dispatch(add_trick, AddTrick(dog, trick), user=user) == Ok(None)
    for trick in ("a\x00b", "x\ud800y"):
        refused = app.dispatch(add_trick, AddTrick(dog, trick), user=user)
        assert isinstance(refused, Failure) and refused.code == "validation_error", refused
        assert isinstance(refused.details, list) and [d["path"] for d in refused.details] == ["$.trick"]
        assert trick not in refused.message
    stream = ok_data(app.read_stream(DsDog, dog, user=user))
    assert [e.event for e in stream[1:]] == [TrickAdded(t) for t in kept]
    assert ok_data(app.rebuild_projection(DsDog, user=user, verify=True)).matches
    stranger = make_user()
    hidden, missing = app.read_stream(DsDog, dog, user=stranger), app.read_stream(DsDog, uuid.UUID(int=7), user=user)
    assert isinstance(hidden, Failure) and isinstance(missing, Failure)
    assert (hidden.code, hidden.message.replace(str(dog), "ID")) == (
        missing.code,
        missing.message.replace(str(uuid.UUID(int=7)), "ID"),
    )
    assert hidden.details == {"entity_id": str(dog)}
