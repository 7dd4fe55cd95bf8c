"""A ``for_each`` whose ``over=`` returns no iterable (``None`` from an optional field, a
count instead of a range) is refused saying what it returned and what it takes, in a
handler's Failure and in a run's error alike, on SQLite and PostgreSQL; nothing is
written.  Before, both said only "raised TypeError"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import run_info
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Failure, Feature, User, manual, ok


@attrs.frozen
class Lines:
    items: list[int] | None
    count: int


class FoNote(Entity):
    __tablename__ = "fo_note"
    n: Mapped[int]


def _feature(over: Callable[[Any], Any]) -> tuple[Feature[Any], Any, Any]:
    f: Feature[Any] = Feature("fo")
    f.entity(FoNote)
    handler = f.write_handler(
        "note",
        f.pipeline(Lines)
        .create("first", FoNote, data=lambda c: FoNote(n=0))
        .for_each("line", over=over, do=lambda b: b.create("each", FoNote, data=lambda c: FoNote(n=1)))
        .return_(lambda c: ok(None)),
    )
    flow = f.workflow(
        "flow",
        trigger=manual(Lines),
        pipeline=f.workflow_pipeline(Lines).for_each("line", over=over, do=lambda b: b.wait("PT1M")),
    )
    return f, handler, flow


@pytest.mark.parametrize(
    ("over", "returned"),
    [(lambda c: c.payload.items, "NoneType"), (lambda c: c.payload.count, "int")],
    ids=["none", "a-count"],
)
def test_an_over_that_returns_no_iterable_says_what_it_returned(
    app_on: Callable[..., App], user: User, over: Callable[[Any], Any], returned: str
) -> None:
    f, handler, flow = _feature(over)
    app = app_on([f])
    said = f"for_each 'line': over= returned {returned}, not an iterable such as a list, a tuple or a set"
    answer = app.dispatch(handler, Lines(None, 3), user=user)
    assert isinstance(answer, Failure) and answer.code == "internal_error", answer
    assert said in answer.message, answer.message
    with app.engine.connect() as conn:  # the create before the loop is rolled back
        assert conn.execute(sa.select(sa.func.count()).select_from(FoNote.__table__)).scalar() == 0
    info = run_info(app, app.start_workflow(flow, Lines(None, 3), user=user))
    assert info.status == "failed" and info.error is not None
    assert said in info.error["message"], info.error
