"""A handler's, a query's or an event's *payload* written as a union (``Paid | Refunded``,
``Optional[Paid]``, ``Union[...]``) is a ``BootError`` naming it and the way to do it.

``feature.pipeline(Paid | Refunded)`` is refused by mypy (``type[P]`` takes one class) and
types ``c.payload`` as one member at best; at runtime a plain dispatch ran, a keyed one
failed with "a Paid cannot be stored" (the codec knows payload classes, not union members)
and ``dispatch_json`` took ``{"amount": 3}`` as whichever member came first although both
fit.  The way that works everywhere: one payload class with a field typed as the union,
its members told apart by a ``Literal`` tag (tested here on both databases).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Optional, Union

import attrs
import pytest
from _support import failure_of, ok_data

from kumiko_typed import App, BootError, Feature, User, ok


@attrs.frozen
class Paid:
    amount: int


@attrs.frozen
class Refunded:
    amount: int
    reason: str = ""


#: What a caller without mypy may pass where a class belongs.
UNIONS: dict[str, Any] = {
    "pep604": Paid | Refunded,
    "typing.Union": Union[Paid, Refunded],  # noqa: UP007
    "Optional": Optional[Paid],  # noqa: UP045
}


def _fix() -> str:
    return (
        "a payload is one class (for either of two shapes, give one class a field typed as the union, "
        "each member with a Literal tag field such as kind: Literal['paid'], or give one class a kind field)"
    )


@pytest.mark.parametrize("payload", UNIONS.values(), ids=UNIONS.keys())
def test_a_write_handler_with_a_union_payload_is_a_boot_error_naming_it(payload: Any) -> None:
    f: Feature[Any] = Feature("upay")
    f.write_handler("take", f.pipeline(payload).return_(lambda c: ok(None)))
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    assert raised.value.problems == [
        f"handler upay:take: its pipeline pipeline(...) takes {payload!r}, which is no class: {_fix()}"
    ]


@pytest.mark.parametrize("payload", UNIONS.values(), ids=UNIONS.keys())
def test_a_query_with_a_union_payload_is_a_boot_error_naming_it(payload: Any) -> None:
    f: Feature[Any] = Feature("upay")
    f.query_handler("look", f.query_pipeline(payload).return_(lambda c: ok(None)))
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    assert raised.value.problems == [
        f"query upay:look: its pipeline query_pipeline(...) takes {payload!r}, which is no class: {_fix()}"
    ]


def test_every_union_payload_is_named_in_one_boot_error() -> None:
    f: Feature[Any] = Feature("upay")
    f.write_handler("a", f.pipeline(UNIONS["pep604"]).return_(lambda c: ok(None)))
    f.write_handler("b", f.pipeline(Paid).return_(lambda c: ok(None)))
    f.query_handler("c", f.query_pipeline(UNIONS["Optional"]).return_(lambda c: ok(None)))
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    assert [p.split(":", 2)[:2] for p in raised.value.problems] == [["handler upay", "a"], ["query upay", "c"]]


def test_an_event_given_as_a_union_is_a_boot_error_saying_an_event_is_one_class() -> None:
    f: Feature[Any] = Feature("upay")
    either: Any = Paid | Refunded
    assert f.event(either) is either
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    assert raised.value.problems == [
        f"feature 'upay': event(...) takes {either!r}, which is no class: an event is one attrs class; "
        "register each member, feature.event(Paid) and feature.event(Refunded)"
    ]


def test_the_repr_of_a_pipeline_given_a_union_names_it_instead_of_raising() -> None:
    f: Feature[Any] = Feature("upay")
    either: Any = Paid | Refunded
    assert repr(f.pipeline(either)) == f"<Pipeline of {either!r}: >"


# The way the BootError advises: one class, its field a union of tagged members.


@attrs.frozen
class Payment:
    kind: Literal["paid"]
    amount: int


@attrs.frozen
class Refund:
    kind: Literal["refunded"]
    amount: int
    reason: str = ""


@attrs.frozen
class Settle:
    order: str
    how: Payment | Refund


def _settle_app(app_on: Callable[..., App]) -> tuple[App, Any]:
    f: Feature[Any] = Feature("settle")

    def said(c: Any) -> str:
        how = c.payload.how
        return f"refund {how.reason}" if isinstance(how, Refund) else f"paid {how.amount}"

    handler = f.write_handler("go", f.pipeline(Settle).return_(lambda c: ok(said(c))))
    return app_on([f]), handler


def test_a_union_field_dispatches_keyed_each_member_and_tells_them_apart(
    app_on: Callable[..., App], user: User
) -> None:
    app, handler = _settle_app(app_on)
    paid = Settle("o1", Payment("paid", 3))
    refund = Settle("o1", Refund("refunded", 3))
    assert ok_data(app.dispatch(handler, paid, user=user, idempotency_key="k1")) == "paid 3"
    assert ok_data(app.dispatch(handler, paid, user=user, idempotency_key="k1")) == "paid 3"
    # The same amount as the other member is another payload: its fingerprint differs.
    conflict = failure_of(app.dispatch(handler, refund, user=user, idempotency_key="k1"), "idempotency_conflict")
    assert "SELECT" not in conflict.message and "INSERT" not in conflict.message
    assert ok_data(app.dispatch(handler, refund, user=user, idempotency_key="k2")) == "refund "


def test_a_union_field_from_json_is_decided_by_its_tag_and_a_wrong_tag_names_the_field(
    app_on: Callable[..., App], user: User
) -> None:
    app, _ = _settle_app(app_on)
    go = "settle:go"
    refund = {"order": "o1", "how": {"kind": "refunded", "amount": 3}}
    assert ok_data(app.dispatch_json(go, refund, user=user, idempotency_key="j1")) == "refund "
    assert ok_data(app.dispatch_json(go, refund, user=user, idempotency_key="j1")) == "refund "
    paid = {"order": "o1", "how": {"kind": "paid", "amount": 3}}
    assert ok_data(app.dispatch_json(go, paid, user=user)) == "paid 3"
    wrong = failure_of(app.dispatch_json(go, {"order": "o1", "how": {"kind": "gift", "amount": 3}}, user=user))
    assert wrong.code == "validation_error"
    assert any(d["path"].startswith("$.how") for d in wrong.details)
