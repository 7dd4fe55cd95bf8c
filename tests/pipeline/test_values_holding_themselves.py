"""A value that holds itself (or nests past Python's recursion limit) built by a step for an
event or an outbox message is refused like one nested past the depth limit: the same
``validation_error`` naming the column and the step, on both databases, with nothing written.
Before, the conversion recursed until ``RecursionError`` and the dispatch was an
``internal_error`` (the payload and the result were already refused this way)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import holding_itself, nested_lists
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok
from kumiko_typed._limits import MAX_DEPTH
from kumiko_typed._tables import events, outbox

AppOn = Callable[..., App]
ENDLESS = f"is nested deeper than {MAX_DEPTH} levels (does it hold itself?)"


class T31Box(Entity):
    __tablename__ = "t31_box"
    label: Mapped[str] = mapped_column(sa.Text, default="")


@attrs.frozen
class Packed:
    contents: list[Any]


@attrs.frozen
class Order:
    shape: str


def _dict_holding_itself() -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    mapping["self"] = mapping
    return mapping


SHAPES: dict[str, Callable[[], Any]] = {
    "holding-itself": holding_itself,
    "nested-5000": lambda: nested_lists(5000),
    "fine": lambda: [[1], "a"],
}


def _feature() -> Feature[str]:
    f = Feature("t31", requires=["webhook.send"])
    f.entity(T31Box)
    f.event(Packed, name="t31-packed")

    @f.projector(T31Box, Packed)
    def pack(row: T31Box, event: Packed) -> None:
        row.label = "packed"

    f.write_handler(
        "create",
        f.pipeline(Order)
        .create("box", T31Box, data=lambda c: T31Box(), event=lambda c: Packed(SHAPES[c.payload.shape]()))
        .return_(lambda c: ok(c.steps["box"].entity.label)),
    )
    f.write_handler(
        "append",
        f.pipeline(Order)
        .create("box", T31Box, data=lambda c: T31Box())
        .append_event(T31Box, id=lambda c: c.steps["box"].id, event=lambda c: Packed(SHAPES[c.payload.shape]()))
        .return_(lambda c: ok(c.steps["box"].entity.label)),
    )
    f.write_handler(
        "body",
        f.pipeline(Order)
        .send_webhook(url="http://127.0.0.1:9/t31", body=lambda c: {"v": SHAPES[c.payload.shape]()})
        .return_(lambda c: ok("sent")),
    )
    f.write_handler(
        "list-body",
        f.pipeline(Order)
        .send_webhook(
            url="http://127.0.0.1:9/t31",
            body=lambda c: _dict_holding_itself() if c.payload.shape == "holding-itself" else {"v": 1},
        )
        .return_(lambda c: ok("sent")),
    )
    return f


def _counts(app: App) -> tuple[int, int, int]:
    with app.engine.connect() as conn:
        return (
            int(conn.scalar(sa.select(sa.func.count()).select_from(events)) or 0),
            int(conn.scalar(sa.select(sa.func.count()).select_from(outbox)) or 0),
            int(conn.scalar(sa.select(sa.func.count()).select_from(T31Box.__table__)) or 0),
        )


_REFUSED = [
    (handler, shape, step, column)
    for handler, step, column in [
        ("create", '0 aggregate.create "box"', "kumiko_events.payload"),
        ("append", "1 aggregate.append_event", "kumiko_events.payload"),
        ("body", "0 webhook.send", "kumiko_outbox.message"),
    ]
    for shape in ("holding-itself", "nested-5000")
] + [("list-body", "holding-itself", "0 webhook.send", "kumiko_outbox.message")]


@pytest.mark.parametrize(("handler", "shape", "step", "column"), _REFUSED)
def test_a_stored_value_nested_without_end_is_a_validation_error_and_nothing_is_written(
    app_on: AppOn, admin: User, handler: str, shape: str, step: str, column: str
) -> None:
    app = app_on([_feature()])
    result = app.dispatch_json(f"t31:{handler}", {"shape": shape}, user=admin)
    assert result == Failure(
        "validation_error",
        f"step {step}: a value does not fit its column: {ENDLESS} ({column})",
        [{"path": "$", "message": ENDLESS, "column": column, "step": step}],
    )
    assert _counts(app) == (0, 0, 0)


@pytest.mark.parametrize("handler", ["create", "append", "body"])
def test_the_same_steps_store_a_value_that_ends(app_on: AppOn, admin: User, handler: str) -> None:
    app = app_on([_feature()])
    result = app.dispatch_json(f"t31:{handler}", {"shape": "fine"}, user=admin)
    assert isinstance(result, Ok), result
    written_events, written_messages, boxes = _counts(app)
    assert (written_messages, boxes) == ((1, 0) if handler == "body" else (0, 1))
    assert written_events == {"create": 1, "append": 2, "body": 0}[handler]
