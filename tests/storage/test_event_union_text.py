"""Event fields typed as a union of text and a type JSON stores as text (``str |
datetime``, a mapping keyed by one): both are stored as text, and the read picks one member
for it, so a datetime key given to ``dict[str | datetime, int]`` was stored as its
``str()`` and read back as that text (``read_stream``, replays, triggers), and a datetime
value given to ``str | datetime`` came back as text too.  The append refuses such an
event, a ``validation_error`` naming the event's field and the payload's it came from,
nothing written; a single type (``dict[datetime, int]``) round-trips.  Both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok
from kumiko_typed._tables import events

T = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


class EutNote(Entity):
    __tablename__ = "eut_note"
    text: Mapped[str] = mapped_column(sa.String(40), default="")


@attrs.frozen
class Tallied:
    by_time: dict[datetime, int] = attrs.field(factory=dict)
    by_either: dict[str | datetime, int] = attrs.field(factory=dict)
    when: str | datetime = ""


@attrs.frozen
class Tally:
    id: uuid.UUID
    at: datetime
    what: str


GIVEN: dict[str, Callable[[Tally], Tallied]] = {
    "typed-key": lambda p: Tallied(by_time={p.at: 1}),
    "text-key": lambda p: Tallied(by_either={"x": 1}),
    "datetime-key-in-union": lambda p: Tallied(by_either={"x": 1, p.at: 2}),
    "datetime-in-union": lambda p: Tallied(when=p.at),
}

f = Feature("eut")
f.entity(EutNote)
f.event(Tallied, name="eut-tallied")
open_note = f.write_handler(
    "open", f.pipeline(Tally).create("n", EutNote, data=lambda c: EutNote()).return_(lambda c: ok(c.steps["n"].id))
)
tally = f.write_handler(
    "tally",
    f.pipeline(Tally)
    .append_event(EutNote, id=lambda c: c.payload.id, event=lambda c: GIVEN[c.payload.what](c.payload))
    .return_(lambda c: ok(None)),
)


def _count(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(events)).scalar_one())


@pytest.mark.parametrize("what", ["typed-key", "text-key"])
def test_keys_of_one_type_read_back_as_appended(app_on: Callable[..., App], user: User, what: str) -> None:
    app = app_on([f])
    note = ok_data(app.dispatch(open_note, Tally(uuid.uuid4(), T, ""), user=user))
    ok_data(app.dispatch(tally, Tally(note, T, what), user=user))
    read = ok_data(app.read_stream(EutNote, note, user=user))
    assert read[-1].event == GIVEN[what](Tally(note, T, what))


@pytest.mark.parametrize(
    ("what", "at", "given", "path"),
    [
        # The map is no payload field's, so its payload path is the whole payload's.
        ("datetime-key-in-union", "$.by_either", "a key of type datetime, read back as text", "$"),
        ("datetime-in-union", "$.when", "a value of type datetime, read back as text", "$.at"),
    ],
)
def test_a_datetime_a_union_would_read_back_as_text_is_refused_at_the_append(
    app_on: Callable[..., App], user: User, what: str, at: str, given: str, path: str
) -> None:
    app = app_on([f])
    note = ok_data(app.dispatch(open_note, Tally(uuid.uuid4(), T, ""), user=user))
    before = _count(app)
    refused = failure_of(app.dispatch(tally, Tally(note, T, what), user=user), "validation_error")
    message = (
        f"Tallied could not read it back: {given}: JSON stores both as text, and a union of text and another "
        f"type reads it as one of them; type the field with the one it holds (at {at})"
    )
    assert isinstance(refused.details, list)
    assert [(d["path"], d["message"], d["column"]) for d in refused.details] == [
        (path, message, "kumiko_events.payload")
    ]
    assert _count(app) == before
