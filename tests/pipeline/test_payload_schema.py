"""kumiko_typed.contrib.schema: the JSON Schema of a payload class says what dispatch_json
accepts.  Every sample below is judged by a draft 2020-12 validator and by a real App on
SQLite, and the two must agree."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal, Optional

import attrs
import jsonschema
import pytest

from kumiko_typed import App, Feature, Ok, User, ok
from kumiko_typed.contrib.schema import payload_schema


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Address:
    """Where it goes.

    Only the first paragraph is the description."""

    street: str
    zip: str | None = None


@attrs.frozen
class Category:
    name: str
    children: list[Category] = attrs.field(factory=list)


@attrs.frozen
class Everything:
    text: str
    count: int
    ratio: float
    flag: bool
    ref: uuid.UUID
    at: datetime
    day: date
    price: Decimal
    blob: bytes
    mode: Literal["fast", "slow", 3]
    size: Size
    level: Level
    maybe: Optional[int]  # noqa: UP045 - the typing spelling is covered on purpose
    also: str | None
    target: Address | Category
    either: int | str
    choice: Address | int | None
    names: list[str]
    items: Sequence[Address]
    pair: tuple[int, str]
    many: tuple[int, ...]
    labels: frozenset[str]
    scores: dict[str, int]
    meta: Mapping[str, Any]
    home: Address
    tree: Category
    note: str = "none"
    extra: list[int] = attrs.field(factory=list)
    hidden: int = attrs.field(init=False, default=0)


GOOD: dict[str, Any] = {
    "text": "hi",
    "count": 3,
    "ratio": 0.5,
    "flag": True,
    "ref": str(uuid.UUID(int=1)),
    "at": "2026-03-01T10:00:00+00:00",
    "day": "2026-03-01",
    "price": "12.50",
    "blob": "AP8=",
    "mode": "fast",
    "size": "s",
    "level": 2,
    "maybe": None,
    "also": "x",
    "target": {"street": "Main 1"},
    "either": 1,
    "choice": 2,
    "names": ["a", "b"],
    "items": [{"street": "Main 1"}, {"street": "Side 2", "zip": "1234"}],
    "pair": [1, "one"],
    "many": [1, 2, 3],
    "labels": ["x"],
    "scores": {"a": 1},
    "meta": {"anything": [1, {"x": None}]},
    "home": {"street": "Main 1", "zip": None},
    "tree": {"name": "root", "children": [{"name": "leaf", "children": []}]},
}

ACCEPTED: list[dict[str, Any]] = [
    {},
    {
        "ratio": 2,
        "price": 12.5,
        "maybe": 4,
        "also": None,
        "target": {"name": "c"},
        "mode": 3,
        "note": "n",
        "extra": [1],
    },
    {"price": "-1e3", "size": "l", "level": 1, "many": [], "labels": [], "items": []},
    {"blob": ""},
    {"blob": "AAAA"},
    {"tree": {"name": "root"}},
    {"either": "x", "choice": {"street": "Main 1"}},
    {"choice": None},
]

REFUSED: list[dict[str, Any]] = [
    {"text": 1},
    {"count": "3"},
    {"count": True},
    {"count": 1.5},
    {"ratio": "0.5"},
    {"flag": 1},
    {"price": "twelve"},
    {"price": True},
    # Decimal() reads these too, a validator of the schema's pattern does not (the App took them).
    {"price": " 12"},
    {"price": "1_000"},
    {"price": "\u0661\u0662"},  # Arabic-Indic digits
    {"price": "\uff11"},  # a full-width 1
    {"price": "12\n"},
    {"blob": 5},
    {"blob": "AP8"},
    {"blob": "not base64!"},
    {"blob": "AP8=\n"},
    {"mode": "medium"},
    {"size": "SMALL"},
    {"also": 1},
    {"maybe": "4"},
    {"target": {"street": "Main 1", "name": "c"}},
    {"target": None},
    {"either": True},
    {"either": None},
    {"either": 1.5},
    {"either": ["x"]},
    {"choice": "2"},
    {"choice": {"street": 1}},
    {"names": "ab"},
    {"names": [1]},
    {"items": [{"street": "x", "floor": 2}]},
    {"items": [{}]},
    {"pair": [1]},
    {"pair": [1, "one", 2]},
    {"pair": ["1", "one"]},
    {"many": ["1"]},
    {"scores": {"a": "1"}},
    {"scores": []},
    {"home": "Main 1"},
    {"tree": {"name": "root", "children": [{"children": []}]}},
    {"unknown": 1},
    {"hidden": 1},
]


def _sample(change: dict[str, Any]) -> dict[str, Any]:
    return {**GOOD, **change}


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[dict[str, Any]], tuple[bool, bool]]]:
    """(the schema accepts it, the App accepts it) for a payload of Everything."""
    f = Feature("schema")
    f.write_handler("everything", f.pipeline(Everything).return_(lambda c: ok(True)))
    app = App([f], database_url=f"sqlite:///{tmp_path_factory.mktemp('schema') / 'app.sqlite3'}")
    app.create_all()
    validator = jsonschema.Draft202012Validator(payload_schema(Everything))
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())

    def verdicts(payload: dict[str, Any]) -> tuple[bool, bool]:
        dispatched = app.dispatch_json("schema:everything", payload, user=user)
        return validator.is_valid(payload), isinstance(dispatched, Ok)

    yield verdicts
    app.dispose()


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = payload_schema(Everything)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "Everything" and schema["additionalProperties"] is False
    assert "hidden" not in schema["properties"] and "note" not in schema["required"]
    assert schema["properties"]["note"]["default"] == "none"
    assert schema["$defs"]["Address"]["description"] == "Where it goes."
    assert schema["$defs"]["Category"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Category"}
    assert schema["properties"]["size"] == {"title": "Size", "enum": ["s", "l"]}
    assert schema["properties"]["level"] == {"title": "Level", "enum": [1, 2]}


@pytest.mark.parametrize("change", ACCEPTED, ids=[str(sorted(c)) for c in ACCEPTED])
def test_what_the_app_accepts_the_schema_accepts(
    judge: Callable[[dict[str, Any]], tuple[bool, bool]], change: dict[str, Any]
) -> None:
    assert judge(_sample(change)) == (True, True)


@pytest.mark.parametrize("change", REFUSED, ids=[repr(c) for c in REFUSED])
def test_what_the_app_refuses_the_schema_refuses(
    judge: Callable[[dict[str, Any]], tuple[bool, bool]], change: dict[str, Any]
) -> None:
    assert judge(_sample(change)) == (False, False)


@pytest.mark.parametrize(
    "field", sorted(k for k, v in attrs.fields_dict(Everything).items() if v.default is attrs.NOTHING)
)
def test_a_missing_required_field_is_refused_by_both(
    judge: Callable[[dict[str, Any]], tuple[bool, bool]], field: str
) -> None:
    payload = dict(GOOD)
    del payload[field]
    assert judge(payload) == (False, False)


def test_a_recursive_root_refers_to_itself() -> None:
    schema = payload_schema(Category)
    assert schema["properties"]["children"] == {"type": "array", "items": {"$ref": "#"}}
    assert "$defs" not in schema
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]})
    assert not validator.is_valid({"name": "a", "children": [{"name": "b", "children": [{}]}]})


def test_only_attrs_classes_have_a_payload_schema() -> None:
    with pytest.raises(TypeError, match="needs an attrs class"):
        payload_schema(dict)
