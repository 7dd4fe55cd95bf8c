"""A handler's ``validation_error`` for a value that does not fit its column names that
column and the payload field in its message, as a failed run's error does: the message is
what a client shows, and it said only "a value does not fit its column: must be at most 10
characters long" (the details alone said which).  One sentence for both, on both databases."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import sqlalchemy as sa
from _support import failure_of
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, manual, ok

AppOn = Callable[..., App]


class HnItem(Entity):
    __tablename__ = "hn_item"
    sku: Mapped[str] = mapped_column(sa.String(10))


@attrs.frozen
class NewItem:
    sku: str


hn = Feature("hn")
hn.entity(HnItem)
create = hn.write_handler(
    "create",
    hn.pipeline(NewItem)
    .create("item", HnItem, data=lambda c: HnItem(sku=c.payload.sku))
    .return_(lambda c: ok(c.steps["item"].id)),
)
started = hn.workflow(
    "started",
    trigger=manual(NewItem),
    pipeline=hn.workflow_pipeline(NewItem).create("item", HnItem, data=lambda c: HnItem(sku=c.payload.sku)),
)

NAMED = "a value does not fit its column: must be at most 10 characters long, not 22 (hn_item.sku, from $.sku)"


def test_a_handlers_message_names_the_column_and_field_as_a_runs_error_does(app_on: AppOn, admin: User) -> None:
    app = app_on([hn])
    failure = failure_of(app.dispatch(create, NewItem("a name longer than ten"), user=admin), "validation_error")
    assert failure.message == f'step 0 aggregate.create "item": {NAMED}'
    run = app.get_run(app.start_workflow(started, NewItem("a name longer than ten"), user=admin))
    assert run is not None and run.error == {
        "code": "validation_error",
        "message": f'step item aggregate.create "item": {NAMED}',
    }
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(HnItem.__table__)) == 0
