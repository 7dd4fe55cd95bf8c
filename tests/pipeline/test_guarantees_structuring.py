"""Payload structuring details (DESIGN §3.1) that no other test noticed losing, found by a
mutation run (mutmut) over _structuring.py: how a non-JSON value is named, a JSON number
read as the decimal it spells, set and tuple items checked, a string never taken for an
array, and a payload validator's message (or its exception's name when it has none)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import attrs
import pytest

from kumiko_typed import App, Failure, Feature, Ok, User, ok


def _positive(_self: Any, _attribute: Any, value: int) -> None:
    if value <= 0:
        raise ValueError("must be positive")


def _not_thirteen(_self: Any, _attribute: Any, value: int) -> None:
    if value == 13:
        raise ValueError  # no words of its own


@attrs.frozen
class Count:
    name: str
    n: int = attrs.field(validator=[_positive, _not_thirteen])


def _details(make_app: Callable[..., App], user: User, data: object) -> list[dict[str, str]]:
    f = Feature("gts")
    f.write_handler("count", f.pipeline(Count).return_(lambda c: ok(c.payload.n)))
    app = make_app([f])
    result = app.dispatch_json("gts:count", data, user=user)
    assert isinstance(result, Failure), result
    assert result.code == "validation_error"
    return list(result.details)


STRING_NOT_DATETIME = "expected a string, got datetime"


@pytest.mark.parametrize(
    ("data", "details"),
    [
        ({"a", "b"}, [{"path": "$", "message": "expected a JSON object, got set"}]),
        ({"name": datetime(2024, 1, 1, tzinfo=UTC), "n": 1}, [{"path": "$.name", "message": STRING_NOT_DATETIME}]),
        ({"name": "x", "n": -1}, [{"path": "$.n", "message": "must be positive"}]),
        ({"name": "x", "n": 13}, [{"path": "$.n", "message": "ValueError"}]),
    ],
    ids=["not-an-object", "python-value", "validator-message", "validator-without-message"],
)
def test_problems_are_named_for_the_client(
    make_app: Callable[..., App], user: User, data: object, details: list[Any]
) -> None:
    assert _details(make_app, user, data) == details


@attrs.frozen
class Priced:
    amount: Decimal
    pair: tuple[int, str]


def _priced(make_app: Callable[..., App], user: User, data: object) -> object:
    f = Feature("gts")
    f.write_handler("priced", f.pipeline(Priced).return_(lambda c: ok(c.payload)))
    return make_app([f]).dispatch_json("gts:priced", data, user=user)


def test_a_json_number_becomes_the_decimal_it_reads_as(make_app: Callable[..., App], user: User) -> None:
    """0.1 is Decimal("0.1"), not the binary float's 0.1000000000000000055511151231257827..."""
    assert _priced(make_app, user, {"amount": 0.1, "pair": [1, "a"]}) == Ok(Priced(Decimal("0.1"), (1, "a")))


def test_a_fixed_length_tuple_checks_each_position(make_app: Callable[..., App], user: User) -> None:
    result = _priced(make_app, user, {"amount": "1", "pair": [1, 2]})
    assert isinstance(result, Failure)
    assert result.details == [{"path": "$.pair[1]", "message": "expected a string, got number"}]


@attrs.frozen
class Tagged:
    tags: set[str]
    codes: frozenset[int]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"tags": ["a", "b"], "codes": [1]}, Ok(Tagged({"a", "b"}, frozenset({1})))),
        ({"tags": ["a", 2], "codes": [1]}, [{"path": "$.tags[1]", "message": "expected a string, got number"}]),
        ({"tags": [], "codes": ["1"]}, [{"path": "$.codes[0]", "message": "expected an integer, got string"}]),
    ],
    ids=["good", "bad-set-item", "bad-frozenset-item"],
)
def test_set_items_are_checked_against_their_type(
    make_app: Callable[..., App], user: User, data: object, expected: object
) -> None:
    f = Feature("gts")
    f.write_handler("tagged", f.pipeline(Tagged).return_(lambda c: ok(c.payload)))
    result = make_app([f]).dispatch_json("gts:tagged", data, user=user)
    if isinstance(expected, Ok):
        assert result == expected
    else:
        assert isinstance(result, Failure) and result.details == expected


def test_an_unknown_field_and_a_bad_one_are_both_reported(make_app: Callable[..., App], user: User) -> None:
    assert _details(make_app, user, {"name": 5, "n": 1, "extra": True, "more": 1}) == [
        {"path": "$.name", "message": "expected a string, got number"},
        {"path": "$.extra", "message": "unknown field"},
        {"path": "$.more", "message": "unknown field"},
    ]


@attrs.frozen
class Listed:
    names: Sequence[str]
    pair: tuple[int, str] = (0, "")


@pytest.mark.parametrize(
    ("data", "path"),
    [({"names": "ab"}, "$.names"), ({"names": [], "pair": "ab"}, "$.pair")],
    ids=["sequence", "fixed-length-tuple"],
)
def test_a_string_is_not_taken_for_an_array(make_app: Callable[..., App], user: User, data: object, path: str) -> None:
    """Left to cattrs, a string would be iterated into its characters."""
    f = Feature("gts")
    f.write_handler("listed", f.pipeline(Listed).return_(lambda c: ok(c.payload)))
    result = make_app([f]).dispatch_json("gts:listed", data, user=user)
    assert isinstance(result, Failure)
    assert result.details == [{"path": path, "message": "expected an array, got string"}]


@attrs.frozen
class Keyed:
    key: UUID


@pytest.mark.parametrize(
    ("length", "quoted"),
    [(58, "'" + "x" * 58 + "'"), (59, "'" + "x" * 56 + "...")],
    ids=["60-characters-whole", "61-characters-cut"],
)
def test_a_bad_value_is_quoted_whole_up_to_60_characters_and_cut_after(
    make_app: Callable[..., App], user: User, length: int, quoted: str
) -> None:
    """The message quotes the client's value as a repr of at most 60 characters, so a
    megabyte of junk does not come back in the answer."""
    f = Feature("gts")
    f.write_handler("keyed", f.pipeline(Keyed).return_(lambda c: ok(None)))
    result = make_app([f]).dispatch_json("gts:keyed", {"key": "x" * length}, user=user)
    assert isinstance(result, Failure)
    assert result.details == [{"path": "$.key", "message": f"expected a UUID string, got {quoted}"}]


@attrs.frozen
class Prices:
    by_sku: dict[str, int]


@attrs.frozen
class Stock:
    by_sku: dict[str, int]


def test_a_map_given_no_json_object_is_named_so_in_every_payload_of_its_type(
    make_app: Callable[..., App], user: User
) -> None:
    """cattrs registered its bare hook for ``dict[str, int]`` once one class's field was
    read: the next class with such a field lost the JSON-type check, and a string was
    "'str' object has no attribute 'items'"."""
    f = Feature("gts")
    f.write_handler("prices", f.pipeline(Prices).return_(lambda c: ok(None)))
    f.write_handler("stock", f.pipeline(Stock).return_(lambda c: ok(None)))
    app = make_app([f])
    assert app.dispatch_json("gts:prices", {"by_sku": {"a": 1}}, user=user) == Ok(None)

    for name in ("stock", "prices"):
        for given, got in (("ab", "string"), ([["a", 1]], "array")):
            result = app.dispatch_json(f"gts:{name}", {"by_sku": given}, user=user)
            assert isinstance(result, Failure), result
            assert result.details == [{"path": "$.by_sku", "message": f"expected a JSON object, got {got}"}]
