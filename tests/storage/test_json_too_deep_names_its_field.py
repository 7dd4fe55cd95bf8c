"""A document nested past the depth limit, written to a JSON column, is refused naming the
payload field that held it: the problem was looked for at the nested value, which lies
deeper than a payload is searched, and the detail named ``$`` (a NaN inside the same
document was named ``$.doc.a``).  The same on both databases; nothing written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import sqlalchemy as sa
from _support import failure_of, nested_lists

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]

JD_ROWS = sa.Table(
    "jd_rows", Entity.metadata, sa.Column("k", sa.String(10), primary_key=True), sa.Column("doc", sa.JSON)
)


@attrs.frozen
class Put:
    k: str
    doc: Any


jd = Feature("jd", projections=[JD_ROWS])
put = jd.write_handler(
    "put",
    jd.pipeline(Put)
    .unsafe_projection_upsert(JD_ROWS, on=["k"], row=lambda c: {"k": c.payload.k, "doc": c.payload.doc})
    .return_(lambda c: ok(None)),
)


def test_a_document_nested_too_deep_names_the_field_that_held_it(app_on: AppOn, user: User) -> None:
    app = app_on([jd])
    refused = failure_of(app.dispatch(put, Put("k", nested_lists(200)), user=user), "validation_error")
    assert isinstance(refused.details, list)
    assert [(d["path"], d["column"]) for d in refused.details] == [("$.doc", "jd_rows.doc")]
    assert "is nested deeper than 64 levels" in refused.message and "from $.doc" in refused.message
    # Inside the depth searched, the value itself is named, as before.
    refused = failure_of(app.dispatch(put, Put("k", {"a": float("nan")}), user=user), "validation_error")
    assert isinstance(refused.details, list)
    assert [d["path"] for d in refused.details] == ["$.doc.a"]
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(JD_ROWS)) == 0
