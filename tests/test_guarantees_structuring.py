"""Payload structuring details (DESIGN §3.1) that no other test noticed losing, found by
``./dev mutants _structuring`` (docs/testing.md): how a non-JSON value is named, and the
message of a payload's own validator, with or without words of its own."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from kumiko_typed import App, Failure, Feature, User, ok


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
        ({"name": "x", "n": -1}, [{"path": "$", "message": "must be positive"}]),
        ({"name": "x", "n": 13}, [{"path": "$", "message": "ValueError"}]),
    ],
    ids=["not-an-object", "python-value", "validator-message", "validator-without-message"],
)
def test_problems_are_named_for_the_client(
    make_app: Callable[..., App], user: User, data: object, details: list[Any]
) -> None:
    assert _details(make_app, user, data) == details
