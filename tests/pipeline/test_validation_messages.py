"""A payload's own checks through ``dispatch_json`` (issue 15, item 6): an attrs validator's or
converter's failure and a value outside a ``Literal`` are a ``validation_error`` detail at the
field's path, in words a client reads (never the tuple repr of an attrs ``Attribute``, never
the refused value where the message is the library's), and every failing field is listed,
not only the first the constructor met.  Dispatch runs on both databases."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from typing import Any, Literal

import attrs
import pytest
from attrs import validators as v
from hypothesis import given, settings
from hypothesis import strategies as st

from kumiko_typed import App, Failure, Feature, Ok, User, ok

SECRET = "hunter2-SECRET-value"


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Kind(str, enum.Enum):  # noqa: UP042 - the mixin style older code uses for string enums
    GIFT = "gift"
    SALE = "sale"


@attrs.frozen
class Item:
    sku: str = attrs.field(validator=v.matches_re(r"[a-z]{2,8}"))
    qty: int = attrs.field(validator=v.gt(0))
    size: Literal["s", "m", "l"] = "m"


def _before_end(instance: Booking, _attribute: Any, value: int) -> None:
    if value >= instance.end:
        raise ValueError("must be before end")


@attrs.frozen
class Booking:
    end: int
    start: int = attrs.field(validator=_before_end)
    room: str = attrs.field(default="a", validator=v.in_(["a", "b"]))
    token: str = attrs.field(default="0" * 8, validator=v.matches_re(r"[0-9a-f]{8}"))
    mode: Literal["draft", "final", 1] = "draft"
    size: Literal[Size.SMALL, Size.LARGE] | None = None
    limit: int | None = attrs.field(default=0, validator=v.instance_of(int))
    name: str = attrs.field(default="x", converter=str.strip, validator=v.min_len(1))
    items: list[Item] = attrs.Factory(list)
    level: Level = Level.LOW
    kind: Kind | None = None


@attrs.frozen
class Period:
    start: int
    end: int

    def __attrs_post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError("end is before start")


def _app(build: Callable[..., App]) -> App:
    f = Feature("book")
    f.write_handler("booking", f.pipeline(Booking).return_(lambda c: ok(c.payload)))
    f.write_handler("period", f.pipeline(Period).return_(lambda c: ok(c.payload)))
    return build([f])


@pytest.fixture
def app(app_on: Callable[..., App]) -> App:
    return _app(app_on)


def _problems(app: App, data: object, user: User, name: str = "book:booking") -> list[tuple[str, str]]:
    result = app.dispatch_json(name, data, user=user)
    assert isinstance(result, Failure), result
    assert (result.code, result.http_status, result.message) == ("validation_error", 400, f"invalid payload for {name}")
    assert isinstance(result.details, list)
    for detail in result.details:
        assert set(detail) == {"path", "message"}
        assert "Attribute(" not in detail["message"] and "<class" not in detail["message"]
    return [(d["path"], d["message"]) for d in result.details]


def test_every_failing_field_is_listed_at_its_path(app: App, user: User) -> None:
    data = {
        "end": 5,
        "start": 9,
        "room": "z",
        "token": SECRET,
        "mode": "done",
        "size": "m",
        "limit": None,
        "name": "   ",
        "items": [{"sku": "ok", "qty": 1}, {"sku": "NO", "qty": 0, "size": "xl"}],
    }
    assert _problems(app, data, user) == [
        ("$.start", "must be before end"),
        ("$.room", 'expected one of "a", "b"'),
        ("$.token", "expected a string matching the pattern '[0-9a-f]{8}'"),
        ("$.mode", 'expected one of "draft", "final", 1'),
        ("$.size", 'expected one of "s", "l"'),
        ("$.limit", "expected int, got null"),
        ("$.name", "Length of 'name' must be >= 1: 0"),
        ("$.items[1].sku", "expected a string matching the pattern '[a-z]{2,8}'"),
        ("$.items[1].qty", "'qty' must be > 0: 0"),
        ("$.items[1].size", 'expected one of "s", "m", "l"'),
    ]
    good = {**data, "start": 1, "room": "b", "token": "00ff00ff", "mode": 1, "size": "l", "limit": 3, "name": " x "}
    result = app.dispatch_json("book:booking", {**good, "items": [{"sku": "ok", "qty": 1}]}, user=user)
    assert result == Ok(Booking(5, 1, "b", "00ff00ff", 1, Size.LARGE, 3, "x", [Item("ok", 1)]))


def test_type_errors_validators_and_unknown_keys_come_together(app: App, user: User) -> None:
    """A mistyped field no longer hides the validator failures of the others (attrs alone
    would only run them once every field had its type); the mistyped field's own
    validator waits for a value of the right type."""
    data = {"end": "5", "start": 1, "room": "z", "mode": True, "zzz": 1, "items": [{"sku": 1, "qty": -1}]}
    assert _problems(app, data, user) == [
        ("$.end", "expected an integer, got string"),
        ("$.room", 'expected one of "a", "b"'),
        ("$.mode", 'expected one of "draft", "final", 1, got boolean'),
        ("$.items[0].sku", "expected a string, got number"),
        ("$.items[0].qty", "'qty' must be > 0: -1"),
        ("$.zzz", "unknown field"),
    ]


def test_a_literal_or_an_enum_is_matched_as_json_spells_it(app: App, user: User) -> None:
    """``true`` is not ``1`` and ``1.0`` is not ``1`` (cattrs' own check took both); an
    enum member is sent as its value and comes back as the member, an ``IntEnum`` or a
    ``str`` mixin enum too (they were taken as any integer or string)."""
    base = {"end": 5, "start": 1}
    assert _problems(app, {**base, "mode": True}, user) == [
        ("$.mode", 'expected one of "draft", "final", 1, got boolean')
    ]
    assert _problems(app, {**base, "mode": 1.0}, user) == [("$.mode", 'expected one of "draft", "final", 1')]
    assert _problems(app, {**base, "mode": ["draft"]}, user) == [
        ("$.mode", 'expected one of "draft", "final", 1, got array')
    ]
    assert _problems(app, {**base, "size": "SMALL"}, user) == [("$.size", 'expected one of "s", "l"')]
    assert _problems(app, {**base, "level": 3, "kind": "gifts"}, user) == [
        ("$.level", "expected one of 1, 2"),
        ("$.kind", 'expected one of "gift", "sale"'),
    ]
    assert _problems(app, {**base, "level": True, "kind": ["gift"]}, user) == [
        ("$.level", "expected one of 1, 2, got boolean"),
        ("$.kind", 'expected one of "gift", "sale", got array'),
    ]
    data = {**base, "mode": 1, "size": "s", "level": 2, "kind": "sale"}
    result = app.dispatch_json("book:booking", data, user=user)
    assert isinstance(result, Ok)
    assert (result.data.mode, result.data.size, result.data.level, result.data.kind) == (1, Size.SMALL, 2, "sale")
    assert (type(result.data.level), type(result.data.kind)) == (Level, Kind)


def test_the_refused_value_is_not_echoed(app: App, user: User) -> None:
    """Where the message is the library's (a Literal, attrs' in_, matches_re, instance_of),
    it says what was expected, not what came: a mistyped secret stays out of logs."""
    for field in ("room", "token", "mode"):
        problems = _problems(app, {"end": 5, "start": 1, field: SECRET}, user)
        assert [path for path, _ in problems] == [f"$.{field}"]
        assert SECRET not in problems[0][1] and "hunter2" not in problems[0][1]


def test_a_rule_across_fields_is_at_the_class_path(app: App, user: User) -> None:
    """``__attrs_post_init__`` belongs to no one field: its failure is the class's, and it
    only runs once the fields are valid."""
    assert _problems(app, {"start": 5, "end": 1}, user, "book:period") == [("$", "end is before start")]
    assert _problems(app, {"start": "5", "end": 1}, user, "book:period") == [
        ("$.start", "expected an integer, got string")
    ]


def _raising(exc: BaseException) -> Callable[[Any, Any, Any], None]:
    def check(_instance: Any, _attribute: Any, _value: Any) -> None:
        raise exc

    return check


class _Unprintable(ValueError):
    def __str__(self) -> str:
        raise RuntimeError("no words")


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (ValueError("x" * 10_000), "x" * 197 + "..."),
        (ValueError(object()), "ValueError"),
        (ValueError("   "), "ValueError"),
        (_Unprintable("bad"), "bad"),
        (_Unprintable(), "_Unprintable"),
        (LookupError("not in our catalogue"), "not in our catalogue"),
        (TypeError("msg", 1, 2, 3), "msg"),  # a four-argument layout that is not attrs'
    ],
    ids=["huge", "not-text", "blank", "unprintable", "unprintable-bare", "any-exception", "four-args"],
)
def test_a_validator_raising_anything_is_worded_safely(
    make_app: Callable[..., App], user: User, exc: Exception, message: str
) -> None:
    @attrs.frozen
    class Odd:
        n: int = attrs.field(validator=_raising(exc))

    f = Feature("odd")
    f.write_handler("odd", f.pipeline(Odd).return_(lambda c: ok(c.payload.n)))
    app = make_app([f])
    assert _problems(app, {"n": 1}, user, "odd:odd") == [("$.n", message)]


class _Incomparable:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")

    __hash__ = object.__hash__


def test_a_validator_raising_incomparable_arguments_is_still_a_detail(make_app: Callable[..., App], user: User) -> None:
    """The constructor's error is matched to a field's by its arguments; arguments that
    cannot be compared leave both in (a duplicate at worst, never an exception)."""

    @attrs.frozen
    class Odd:
        n: int = attrs.field(validator=lambda _i, _a, _v: _raise(ValueError(_Incomparable())))

    f = Feature("odd")
    f.write_handler("odd", f.pipeline(Odd).return_(lambda c: ok(c.payload.n)))
    assert _problems(make_app([f]), {"n": 1}, user, "odd:odd") == [("$.n", "ValueError"), ("$", "ValueError")]


def _raise(exc: Exception) -> None:
    raise exc


def test_a_validator_reading_a_field_that_failed_waits_for_it(make_app: Callable[..., App], user: User) -> None:
    """``start``'s validator reads ``end``; with ``end`` mistyped it cannot be judged yet, so
    only ``end`` is reported — not a confusing AttributeError."""
    app = _app(make_app)
    assert _problems(app, {"end": None, "start": 9}, user) == [("$.end", "expected an integer, got null")]


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
_fields = st.sampled_from(
    ["end", "start", "room", "token", "mode", "size", "limit", "name", "items", "sku", "qty", "level", "kind"]
)


@settings(max_examples=150, deadline=None)
@given(data=st.dictionaries(_fields, _values, max_size=8))
def test_any_json_is_ok_or_problems_at_paths(data: dict[str, Any]) -> None:
    app = _shared()
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    result = app.dispatch_json("book:booking", data, user=user)
    if isinstance(result, Failure):
        assert result.code == "validation_error"
        assert isinstance(result.details, list) and result.details
        for detail in result.details:
            assert detail["path"].startswith("$")
            assert detail["message"] and "Attribute(" not in detail["message"]
    else:
        assert isinstance(result, Ok) and isinstance(result.data, Booking)


_SHARED: list[App] = []


def _shared() -> App:
    """One in-memory App for every hypothesis example (validation never reaches the database)."""
    if not _SHARED:
        _SHARED.append(_app(lambda features: App(features, database_url="sqlite://")))
    return _SHARED[0]
