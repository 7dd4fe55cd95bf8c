"""Pages of a query handler, at their edges: the step's ``limit=`` caps the query's own
LIMIT rather than replacing it, and a row count past 64 bits is a validation error at its
payload field.  On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]


class QpLine(Entity):
    __tablename__ = "qp_line"
    n: Mapped[int]


@attrs.frozen
class Add:
    n: int


@attrs.frozen
class Page:
    size: int
    skip: int = 0


lines = Feature("qp")
lines.entity(QpLine)
add = lines.write_handler(
    "add",
    lines.pipeline(Add).create("l", QpLine, data=lambda c: QpLine(n=c.payload.n)).return_(lambda c: ok(None)),
)
#: A page the payload sizes, under the step's cap of 4 rows.
page = lines.query_handler(
    "page",
    lines.query_pipeline(Page)
    .find_many(
        "r", lambda c: sa.select(QpLine.n).order_by(QpLine.n).limit(c.payload.size).offset(c.payload.skip), limit=4
    )
    .return_(lambda c: ok(c.steps["r"])),
)
#: The same page with no cap of the step's.
uncapped = lines.query_handler(
    "uncapped",
    lines.query_pipeline(Page)
    .find_many("r", lambda c: sa.select(QpLine.n).order_by(QpLine.n).limit(c.payload.size).offset(c.payload.skip))
    .return_(lambda c: ok(c.steps["r"])),
)
#: The query's own constant LIMIT, under a larger cap.
first_two = lines.query_handler(
    "first-two",
    lines.query_pipeline(Page)
    .find_many("r", lambda c: sa.select(QpLine.n).order_by(QpLine.n).limit(2), limit=4)
    .return_(lambda c: ok(c.steps["r"])),
)


def _app(app_on: AppOn, user: User) -> App:
    app = app_on([lines])
    for n in range(6):
        ok_data(app.dispatch(add, Add(n), user=user))
    return app


def test_the_step_limit_caps_the_querys_own_limit(app_on: AppOn, user: User) -> None:
    """Was the step's 4 rows whatever the query's LIMIT said: a page of 2 read 4, and the
    next page (offset 2) overlapped it."""
    app = _app(app_on, user)
    assert ok_data(app.query(page, Page(size=2), user=user)) == [0, 1]
    assert ok_data(app.query(page, Page(size=2, skip=2), user=user)) == [2, 3]
    assert ok_data(app.query(page, Page(size=0), user=user)) == []
    assert ok_data(app.query(page, Page(size=9), user=user)) == [0, 1, 2, 3]
    assert ok_data(app.query(page, Page(size=2, skip=5), user=user)) == [5]
    assert ok_data(app.query(page, Page(size=2, skip=99), user=user)) == []
    for _ in range(3):  # the first call and those after it (a resolver kept as a template)
        assert ok_data(app.query(first_two, Page(size=0), user=user)) == [0, 1]


def test_a_negative_page_size_is_refused_under_a_step_limit_too(app_on: AppOn, user: User) -> None:
    """The step's limit replaced the query's ``LIMIT -1``, which then went unrefused."""
    app = _app(app_on, user)
    refused = failure_of(app.query(page, Page(size=-1), user=user), "validation_error")
    assert refused.details[0]["path"] == "$.size" and refused.details[0]["column"] == "LIMIT"


def test_a_row_count_past_64_bits_names_its_field(app_on: AppOn, user: User) -> None:
    """Was "the database refused a value of the input" at ``$`` on both databases."""
    app = _app(app_on, user)
    for data, path, clause in (({"size": 2, "skip": 2**63}, "$.skip", "OFFSET"), ({"size": 2**64}, "$.size", "LIMIT")):
        refused = failure_of(app.query_json("qp:uncapped", data, user=user), "validation_error")
        assert refused.details == [
            {
                "path": path,
                "message": f"must be at most {2**63 - 1} (the query's {clause})",
                "column": clause,
                "step": '0 read.find_many "r"',
            }
        ], refused
        assert "a row count is too large" in refused.message
    assert ok_data(app.query_json("qp:uncapped", {"size": 2, "skip": 2**63 - 1}, user=user)) == []
    # Under the step's cap a LIMIT past 64 bits is no problem: the cap is the LIMIT sent.
    assert ok_data(app.query_json("qp:page", {"size": 2**64}, user=user)) == [0, 1, 2, 3]
