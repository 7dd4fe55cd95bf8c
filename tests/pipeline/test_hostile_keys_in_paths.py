"""A detail's ``path`` is sent back to the caller, so a key of the payload in it is bounded
and escaped: a 100 KB key came back whole (a 100 KB Failure, a hundred of them in one
answer) and a key holding a terminal's escape sequence or a line break came back raw.  The
same on both databases, for the payload's own check and for a JSON column's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import sqlalchemy as sa
from _support import failure_of
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]

LONG = "k" * 100_000
#: How a key longer than 40 characters is written: its repr, cut after 40 characters.
CUT = "['" + "k" * 39 + "...]"
ESCAPE = "k\x1b[31m\n"


class HkDoc(Entity):
    __tablename__ = "hk_doc"
    tags: Mapped[dict[str, Any]] = mapped_column(sa.JSON)


@attrs.frozen
class NewDoc:
    tags: dict[str, Any]
    counts: dict[str, int] = attrs.Factory(dict)


hk = Feature("hk")
hk.entity(HkDoc)
create = hk.write_handler(
    "create",
    hk.pipeline(NewDoc).create("doc", HkDoc, data=lambda c: HkDoc(tags=c.payload.tags)).return_(lambda c: ok(None)),
)


def _paths(app: App, payload: dict[str, Any], user: User) -> list[str]:
    failure = failure_of(app.dispatch_json(create.name, payload, user=user), "validation_error")
    assert len(repr(failure)) < 1_000, repr(failure)[:300]
    assert "\x1b" not in repr(failure) and "\n" not in failure.message
    assert isinstance(failure.details, list)
    return [d["path"] for d in failure.details]


def test_a_long_or_unprintable_key_of_a_payload_is_cut_and_escaped(app_on: AppOn, admin: User) -> None:
    app = app_on([hk])
    assert _paths(app, {"tags": {LONG: "\ud800"}}, admin) == [f"$.tags{CUT}"]
    assert _paths(app, {"tags": {ESCAPE: "\ud800"}}, admin) == ["$.tags['k\\x1b[31m\\n']"]
    assert _paths(app, {"tags": {}, LONG: 1}, admin) == [f"${CUT}"]  # an unknown field
    assert _paths(app, {"tags": {}, "counts": {LONG: "one"}}, admin) == [f"$.counts{CUT}"]
    # A short printable key is written as it was.
    assert _paths(app, {"tags": {"a.b": {"$x": "\ud800"}}}, admin) == ["$.tags.a.b.$x"]


def test_a_long_key_in_a_value_for_a_json_column_is_cut_in_its_message(app_on: AppOn, admin: User) -> None:
    """The payload's class takes any text key; the JSON column refuses the NaN below it."""
    app = app_on([hk])
    failure = failure_of(app.dispatch(create, NewDoc({LONG: float("nan")}), user=admin), "validation_error")
    assert len(repr(failure)) < 1_000, repr(failure)[:300]
    assert failure.details == [
        {
            "path": f"$.tags{CUT}",
            "message": f"must be a finite number (not NaN or infinity) (at ${CUT})",
            "column": "hk_doc.tags",
            "step": '0 aggregate.create "doc"',
        }
    ]
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(HkDoc.__table__)) == 0


def test_unknown_keys_of_types_that_do_not_compare_are_listed(app_on: AppOn, admin: User) -> None:
    """A dict given in Python may hold keys of any type: sorting the unknown ones raised
    TypeError out of ``dispatch_json`` (an int key beside a text one)."""
    app = app_on([hk])
    assert _paths(app, {"tags": {}, 1: 2, "zz": 3}, admin) == ["$.zz", "$[1]"]
    assert _paths(app, {"tags": {}, None: 1, (1, 2): 3}, admin) == ["$[(1, 2)]", "$[None]"]
