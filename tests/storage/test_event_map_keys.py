"""Event fields that are mappings: an event is stored as JSON, whose object keys are text.
A mapping keyed by a type never read from text (``bool``, ``float``, ``None``, a tuple, a
class, an enum of other values) could hold only ``{}``: an event with one non-empty was
refused at every append, though boot had passed.  Boot refuses such a class, naming the
class, the field and the fix; keys of the types it names are stored and read back, a
text enum's member as its value (it was written ``Size.S``, which no read gave back).
Both databases."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Literal

import attrs
import pytest
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, BootError, Entity, Feature, Ok, User, ok

AppOn = Callable[..., App]
FIX = "key it by str, int, UUID, date, datetime, Decimal or an enum of text or integer values"


class EmkShelf(Entity):
    __tablename__ = "emk_shelf"
    label: Mapped[str] = mapped_column(sa.String(40), default="")


class Size(str, enum.Enum):  # noqa: UP042  # not StrEnum: str() of this one is "Size.SMALL"
    SMALL = "s"
    LARGE = "l"


class Level(enum.IntEnum):
    LOW = 1


class Colour(enum.Enum):  # neither text nor an IntEnum: "1" is no member
    RED = 1


@attrs.frozen
class Cell:
    weights: dict[float, int]


@attrs.frozen
class Flagged:
    seen: dict[bool, str]
    cells: list[Cell]
    fine: dict[str, int]


@attrs.frozen
class Painted:
    by_colour: dict[Colour, int]
    by_pair: dict[tuple[int, int], int] | None = None


@attrs.frozen
class Counted:
    """Every key type boot names as fine, each read back as it was appended."""

    by_size: dict[Size, int]
    by_level: dict[Level, int]
    by_day: dict[date, int]
    by_moment: dict[datetime, int]
    by_id: dict[uuid.UUID, int]
    by_price: dict[Decimal, int]
    by_name: dict[Literal["a", "b"], int]
    by_number: dict[int, dict[str, int]]


def test_boot_refuses_an_event_keyed_by_what_json_cannot_give_back(app_on: AppOn) -> None:
    f = Feature("emk-bad")
    f.entity(EmkShelf)
    f.event(Flagged, name="emk-flagged")
    f.event(Painted, name="emk-painted")
    f.event(Counted, name="emk-counted")  # fine: not named
    with pytest.raises(BootError) as caught:
        app_on([f])
    refused = "which no JSON object key (text) gives back, so only {} would be stored"
    assert sorted(caught.value.problems) == [
        f"feature 'emk-bad': event Flagged: field Cell.weights is keyed by float, {refused}: {FIX}",
        f"feature 'emk-bad': event Flagged: field Flagged.seen is keyed by bool, {refused}: {FIX}",
        f"feature 'emk-bad': event Painted: field Painted.by_colour is keyed by Colour, {refused}: {FIX}",
        f"feature 'emk-bad': event Painted: field Painted.by_pair is keyed by tuple[int, int], {refused}: {FIX}",
    ]


f = Feature("emk")
f.entity(EmkShelf)
f.event(Counted, name="emk-counted")


@attrs.frozen
class Count:
    id: uuid.UUID


open_shelf = f.write_handler(
    "open",
    f.pipeline(Count).create("s", EmkShelf, data=lambda c: EmkShelf()).return_(lambda c: ok(c.steps["s"].id)),
)
COUNTED = Counted(
    by_size={Size.SMALL: 1, Size.LARGE: 2},
    by_level={Level.LOW: 3},
    by_day={date(2026, 3, 2): 4},
    by_moment={datetime(2026, 3, 2, 9, 30, tzinfo=UTC): 5},
    by_id={uuid.UUID(int=7): 6},
    by_price={Decimal("1.50"): 7},
    by_name={"a": 8},
    by_number={9: {"x": 10}},
)
count = f.write_handler(
    "count",
    f.pipeline(Count)
    .append_event(EmkShelf, id=lambda c: c.payload.id, event=lambda c: COUNTED)
    .return_(lambda c: ok(None)),
)


def test_an_event_keyed_by_text_enums_dates_ids_and_numbers_reads_back_as_appended(app_on: AppOn, user: User) -> None:
    app = app_on([f])
    shelf: uuid.UUID = ok_data(app.dispatch(open_shelf, Count(uuid.uuid4()), user=user))
    assert app.dispatch(count, Count(shelf), user=user) == Ok(None)
    stream: list[Any] = ok_data(app.read_stream(EmkShelf, shelf, user=user))
    assert stream[-1].event == COUNTED
    assert stream[-1].event.by_size == {Size.SMALL: 1, Size.LARGE: 2}
