"""A mapping two of whose keys JSON writes as one text is refused, not half kept.

``{1: "a", "1": "b"}``, ``{None: 1, "null": 2}`` and ``{True: 1, "true": 2}`` are two
entries to Python and one to JSON.  Before, wherever such a dict was written as JSON — a
JSON column, an event's payload, a webhook's body — the later entry silently replaced the
earlier, on both databases.  Now each is a ``validation_error`` at the field it came from,
naming both keys and where in the document they are (never the values), with nothing
written.  A workflow's state keeps such keys as pairs, and gets the dict back whole.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, manual, ok
from kumiko_typed._tables import events, outbox
from kumiko_typed.testing import FakeClock


class CkDoc(Entity):
    __tablename__ = "ck_doc"
    doc: Mapped[Any] = mapped_column(sa.JSON, default=None, nullable=True)


@attrs.frozen
class Put:
    v: Any


@attrs.frozen
class Tagged:
    tags: dict[int | str, str]


f = Feature("ck", requires=["webhook.send"])
f.entity(CkDoc)
f.event(Tagged, name="ck-tagged")
put = f.write_handler(
    "put",
    f.pipeline(Put).create("x", CkDoc, data=lambda c: CkDoc(doc=c.payload.v)).return_(lambda c: ok(c.steps["x"].id)),
)
tag = f.write_handler(
    "tag",
    f.pipeline(Put)
    .create("x", CkDoc, data=lambda c: CkDoc())
    .append_event(CkDoc, id=lambda c: c.steps["x"].id, event=lambda c: Tagged(c.payload.v))
    .return_(lambda c: ok(None)),
)
hook = f.write_handler(
    "hook",
    f.pipeline(Put)
    .send_webhook(url="http://127.0.0.1:9/ck", body=lambda c: {"items": [{"k": c.payload.v}]})
    .return_(lambda c: ok(None)),
)
hold = f.workflow(
    "hold",
    trigger=manual(Put),
    pipeline=f.workflow_pipeline(Put).compute("x", lambda c: c.payload.v).wait("PT1M"),
)

#: (the dict, its two keys as the message shows them)
COLLIDING: list[tuple[dict[Any, Any], str]] = [
    ({1: "a", "1": "b"}, "1 and '1'"),
    ({None: 1, "null": 2}, "None and 'null'"),
    ({True: 1, "true": 2}, "True and 'true'"),
    ({"false": 1, False: 2}, "'false' and False"),
    ({2.5: 1, "2.5": 2}, "2.5 and '2.5'"),
]


def _counts(app: App) -> tuple[int, ...]:
    with app.engine.connect() as conn:
        tables = (events, outbox, CkDoc.__table__)
        return tuple(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one() for t in tables)


@pytest.mark.parametrize(("value", "keys"), COLLIDING, ids=[k for _, k in COLLIDING])
def test_a_json_column_refuses_keys_json_writes_alike(
    app_on: Callable[..., App], user: User, value: dict[Any, Any], keys: str
) -> None:
    app = app_on([f])
    refused = failure_of(app.dispatch(put, Put({"a": [value]}), user=user), "validation_error")
    ((detail,),) = [refused.details]
    assert (detail["path"], detail["column"]) == ("$.v.a[0]", "ck_doc.doc")
    assert detail["message"] == (
        f"has the keys {keys}, which JSON writes as one text: the later would silently replace the earlier;"
        " give each key its own text (convert the keys to str first) (at $.a[0])"
    )
    assert _counts(app) == (0, 0, 0)


def test_an_event_and_a_webhook_body_refuse_keys_json_writes_alike(app_on: Callable[..., App], user: User) -> None:
    app = app_on([f])
    refused = failure_of(app.dispatch(tag, Put({1: "a", "1": "b"}), user=user), "validation_error")
    ((detail,),) = [refused.details]
    assert (detail["path"], detail["column"]) == ("$.v", "kumiko_events.payload")
    assert detail["message"].startswith("has the keys 1 and '1', which JSON writes as one text")
    assert detail["message"].endswith("(at $.tags)")
    refused = failure_of(app.dispatch(hook, Put({None: 1, "null": 2}), user=user), "validation_error")
    ((detail,),) = [refused.details]
    assert (detail["path"], detail["column"]) == ("$.v", "kumiko_outbox.message")
    assert detail["message"].startswith("has the keys None and 'null', which JSON writes as one text")
    assert detail["message"].endswith("(at $.body.items[0].k)")
    assert "'a'" not in str(refused.details) and "2" not in detail["message"]  # the values stay out
    assert _counts(app) == (0, 0, 0)
    # Keys of distinct texts are written as before.
    ok_data(app.dispatch(tag, Put({"1": "a", "2": "b"}), user=user))
    ok_data(app.dispatch(hook, Put({None: 1, "none": 2}), user=user))
    ok_data(app.dispatch(put, Put({1: "a", "2": "b", None: 3}), user=user))
    assert _counts(app) == (3, 1, 2)


def test_a_workflow_state_keeps_keys_json_would_write_alike(db_url: str, user: User) -> None:
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    app = App([f], database_url=db_url, clock=clock)
    try:
        app.create_all()
        value = {1: "a", "1": "b", None: 1, "null": 2}
        run_id = app.start_workflow(hold, Put(value), user=user)
        clock.advance(minutes=2)
        app.run_worker(once=True)
        info = app.get_run(run_id)
        assert info is not None and info.status == "completed", info
        assert info.steps["x"] == value
    finally:
        app.dispose()
