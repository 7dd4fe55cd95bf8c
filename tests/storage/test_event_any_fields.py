"""Event fields typed ``Any``: an event is stored as JSON and read back (``read_stream``,
replays, triggers) as that JSON, so a ``Decimal``, a UUID, bytes or a datetime there came
back as text, a tuple as a list, an integer key as text — the event a rebuild replayed was
not the one the projector saw — and a naive datetime, refused in a ``datetime`` field, was
stored as text.  The append refuses such a value, a ``validation_error`` naming the event's
field (and the payload's it came from), nothing written, as it refuses a value a typed
field would not read back.  JSON's own values there are stored and read back as they were.
Both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, ok
from kumiko_typed._tables import events

AppOn = Callable[..., App]


class EafNote(Entity):
    __tablename__ = "eaf_note"
    text: Mapped[str] = mapped_column(sa.String(40), default="")


@attrs.frozen
class Annotated:
    meta: Any
    extras: dict[str, Any] = attrs.field(factory=dict)
    tags: list[Any] = attrs.field(factory=list)
    loose: list = attrs.field(factory=list)  # type: ignore[type-arg]  # items typed Any, by omission


@attrs.frozen
class Annotate:
    id: uuid.UUID
    what: str  # which of GIVEN the event holds
    amount: Decimal = Decimal("0")


#: What the event holds: (meta, extras, tags), resolved from the payload.
GIVEN: dict[str, Callable[[Annotate], Annotated]] = {
    "json": lambda p: Annotated({"a": [1, 2.5, None, True, "x"]}, {"k": {"n": [1]}}, ["t", 2]),
    "decimal": lambda p: Annotated(p.amount),
    "uuid-in-dict": lambda p: Annotated(None, {"by": p.id}),
    "bytes-in-list": lambda p: Annotated(None, {}, ["ok", b"raw"]),
    "naive-datetime": lambda p: Annotated({"at": datetime(2026, 3, 2, 9, 30)}),
    "tuple": lambda p: Annotated((1, 2)),
    "int-key": lambda p: Annotated({1: "one"}),
    "bare-list": lambda p: Annotated(None, {}, [], [p.id]),
}

f = Feature("eaf")
f.entity(EafNote)
f.event(Annotated, name="eaf-annotated")

open_note = f.write_handler(
    "open",
    f.pipeline(Annotate).create("n", EafNote, data=lambda c: EafNote()).return_(lambda c: ok(c.steps["n"].id)),
)
annotate = f.write_handler(
    "annotate",
    f.pipeline(Annotate)
    .append_event(EafNote, id=lambda c: c.payload.id, event=lambda c: GIVEN[c.payload.what](c.payload))
    .return_(lambda c: ok(None)),
)


@pytest.fixture
def app(app_on: AppOn) -> App:
    return app_on([f])


def _open(app: App, user: User) -> uuid.UUID:
    note: uuid.UUID = ok_data(app.dispatch(open_note, Annotate(uuid.uuid4(), ""), user=user))
    return note


def _count(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(events)).scalar_one())


def test_json_values_in_fields_typed_any_read_back_as_appended(app: App, user: User) -> None:
    note = _open(app, user)
    assert app.dispatch(annotate, Annotate(note, "json"), user=user) == Ok(None)
    stream: list[Any] = ok_data(app.read_stream(EafNote, note, user=user))
    assert stream[-1].event == GIVEN["json"](Annotate(note, "json"))


@pytest.mark.parametrize(
    ("what", "at", "given", "path"),
    [
        ("decimal", "$.meta", "a value of type Decimal", "$.amount"),
        ("uuid-in-dict", "$.extras.by", "a value of type UUID", "$.id"),
        ("bytes-in-list", "$.tags[1]", "a value of type bytes", "$"),
        ("naive-datetime", "$.meta.at", "a value of type datetime", "$"),
        ("tuple", "$.meta", "a value of type tuple", "$"),
        ("int-key", "$.meta", "a key of type int", "$"),
        ("bare-list", "$.loose[0]", "a value of type UUID", "$.id"),
    ],
)
def test_a_value_json_would_not_give_back_under_any_is_refused_at_the_append(
    app: App, user: User, what: str, at: str, given: str, path: str
) -> None:
    note = _open(app, user)
    before = _count(app)
    refused = failure_of(app.dispatch(annotate, Annotate(note, what, Decimal("1.50")), user=user), "validation_error")
    message = (
        f"Annotated could not read it back: a field typed Any gives back JSON's own values only, not {given};"
        f" type the field to hold it (at {at})"
    )
    assert isinstance(refused.details, list)
    assert [(d["path"], d["message"], d["column"]) for d in refused.details] == [
        (path, message, "kumiko_events.payload")
    ]
    assert _count(app) == before
