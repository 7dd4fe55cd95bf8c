"""Payload and event fields typed as a union (``int | str``, ``A | B | None``): JSON's kind
of value decides, an exact kind first and then the order the annotation writes; a miss is
a ``validation_error`` worded for the client; a payload class no JSON can fill is a
``BootError`` naming the handler, not a failure at every call."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Literal

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, BootError, Entity, Feature, User, manual, ok


@attrs.frozen
class Cash:
    kind: Literal["cash"]
    amount: int


@attrs.frozen
class Card:
    kind: Literal["card"]
    number: str


@attrs.frozen
class Pay:
    ref: int | str
    ratio: float | int = 0
    token: uuid.UUID | str = ""
    label: str | uuid.UUID = ""
    how: Cash | Card | None = None
    tags: list[int | str] = attrs.field(factory=list)


def _echo_app(tmp_path: Any) -> App:
    f = Feature("pay")
    f.write_handler("echo", f.pipeline(Pay).return_(lambda c: ok(c.payload)))
    app = App([f], database_url=f"sqlite:///{tmp_path / 'pay.sqlite3'}")
    app.create_all()
    return app


@pytest.fixture
def echo(tmp_path: Any, user: User) -> Any:
    app = _echo_app(tmp_path)
    yield lambda data: app.dispatch_json("pay:echo", data, user=user)
    app.dispose()


def test_each_member_takes_its_own_json_kind(echo: Callable[[object], Any]) -> None:
    assert ok_data(echo({"ref": 7})).ref == 7
    assert ok_data(echo({"ref": "A-7"})).ref == "A-7"
    assert ok_data(echo({"ref": 1, "tags": [1, "x", 2]})).tags == [1, "x", 2]
    assert ok_data(echo({"ref": 1, "how": None})).how is None


def test_an_exact_kind_wins_then_the_written_order(echo: Callable[[object], Any]) -> None:
    whole = ok_data(echo({"ref": 1, "ratio": 2})).ratio
    assert whole == 2 and type(whole) is int  # float | int: an integer is the int
    half = ok_data(echo({"ref": 1, "ratio": 0.5})).ratio
    assert half == 0.5 and type(half) is float
    text = "3fa85f64-5717-4562-b3fc-2c963f66afa6"
    assert ok_data(echo({"ref": 1, "token": text})).token == uuid.UUID(text)  # UUID | str: UUID first
    assert ok_data(echo({"ref": 1, "token": "not-a-uuid"})).token == "not-a-uuid"
    assert ok_data(echo({"ref": 1, "label": text})).label == text  # str | UUID: str first


def test_a_tagged_object_becomes_the_class_its_tag_names(echo: Callable[[object], Any]) -> None:
    assert ok_data(echo({"ref": 1, "how": {"kind": "cash", "amount": 5}})).how == Cash("cash", 5)
    assert ok_data(echo({"ref": 1, "how": {"kind": "card", "number": "42"}})).how == Card("card", "42")


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        ({"ref": True}, "$.ref", "expected an integer or a string, got boolean"),
        ({"ref": 1.5}, "$.ref", "expected an integer or a string, got number"),
        ({"ref": None}, "$.ref", "expected an integer or a string, got null"),
        ({"ref": [1]}, "$.ref", "expected an integer or a string, got array"),
        ({"ref": 1, "tags": [1, None]}, "$.tags[1]", "expected an integer or a string, got null"),
        ({"ref": 1, "how": "cash"}, "$.how", "expected a JSON object or null, got string"),
        ({"ref": 1, "how": {"kind": "card", "number": 42}}, "$.how.number", "expected a string, got number"),
        (
            {"ref": 1, "how": {"kind": "cheque"}},
            "$.how",
            "expected a JSON object or null; the object given fits none of the types that take one",
        ),
    ],
)
def test_a_miss_names_the_field_and_the_kinds_it_takes(
    echo: Callable[[object], Any], data: dict[str, Any], path: str, message: str
) -> None:
    failure = failure_of(echo(data), "validation_error")
    assert failure.details == [{"path": path, "message": message}]


class Plain:
    """Not a JSON shape: no hook reads it."""


@attrs.frozen
class Odd:
    when: Plain


@attrs.frozen
class Inner:
    odd: Odd


@attrs.frozen
class Nested:
    inner: list[Inner]


def test_a_payload_no_json_can_fill_is_a_boot_error(tmp_path: Any) -> None:
    f = Feature("odd")
    f.write_handler("take", f.pipeline(Nested).return_(lambda c: ok(None)))
    f.query_handler("look", f.query_pipeline(Odd).return_(lambda c: ok(None)))
    f.workflow("flow", trigger=manual(Odd), pipeline=f.workflow_pipeline(Odd).compute("x", lambda c: 1))
    with pytest.raises(BootError) as raised:
        App([f], database_url=f"sqlite:///{tmp_path / 'odd.sqlite3'}")
    problems = raised.value.problems
    assert len(problems) == 3, problems
    assert problems[0].startswith("handler 'odd:take': payload Nested: no JSON value can be read into Plain")
    assert problems[1].startswith("query 'odd:look': payload Odd: no JSON value can be read into Plain")
    assert problems[2].startswith("workflow 'odd:flow': payload Odd: no JSON value can be read into Plain")


def test_a_payload_of_a_plain_class_is_a_boot_error_naming_attrs(tmp_path: Any) -> None:
    """A new user's payload without @attrs.frozen: the problem said that no JSON value can be
    read into it and to use JSON-shaped field types, which its fields (none declared) were."""
    f = Feature("plain")
    f.write_handler("take", f.pipeline(Plain).return_(lambda c: ok(None)))
    with pytest.raises(BootError) as raised:
        App([f], database_url=f"sqlite:///{tmp_path / 'plain.sqlite3'}")
    assert raised.value.problems == [
        "handler 'plain:take': payload Plain: Plain is neither an attrs class nor a dataclass;"
        " declare its fields with @attrs.frozen"
    ]


class Ledger(Entity):
    __tablename__ = "union_ledger"
    ref: Mapped[str] = mapped_column(sa.String(40))


@attrs.frozen
class Opened:
    ref: int | str
    how: Cash | Card | None


def test_an_event_with_union_fields_reads_back_typed(app_on: Callable[..., App], user: User) -> None:
    f: Feature[Any] = Feature("ledger")
    f.entity(Ledger)
    f.event(Opened, name="opened")

    @f.projector(Ledger, Opened)
    def opened(row: Ledger, event: Opened) -> None:
        row.ref = str(event.ref)

    open_ = f.write_handler(
        "open",
        f.pipeline(Opened)
        .create("l", Ledger, data=lambda c: Ledger(ref=""), event=lambda c: c.payload)
        .return_(lambda c: ok(c.steps["l"].id)),
    )
    app = app_on([f])
    first = ok_data(app.dispatch(open_, Opened(12, Card("card", "4")), user=user))
    second = ok_data(app.dispatch(open_, Opened("B-2", None), user=user))
    assert [e.event for e in ok_data(app.read_stream(Ledger, first, user=user))] == [Opened(12, Card("card", "4"))]
    assert [e.event for e in ok_data(app.read_stream(Ledger, second, user=user))] == [Opened("B-2", None)]
