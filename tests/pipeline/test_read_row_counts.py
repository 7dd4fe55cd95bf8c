"""Row counts of a read's query (``.limit(...)``, ``.offset(...)``, ``find_many(limit=)``):
a negative one is the input's fault, refused before the database sees it — SQLite would
read every row (LIMIT) or none skipped (OFFSET), PostgreSQL raises.  Both give the same
``validation_error`` naming the payload field, on every call (a count read from ``c`` keeps
a resolver from becoming a template: it runs each time); nothing the handler wrote stays."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, BootError, Entity, Feature, Ok, User, ok
from kumiko_typed._steps import _entity_reads, _templates

AppOn = Callable[..., App]


class RcItem(Entity):
    __tablename__ = "rc_item"
    title: Mapped[str] = mapped_column(sa.String(100))
    rank: Mapped[int] = mapped_column(default=0)


@attrs.frozen
class Page:
    limit: int = 10
    offset: int = 0
    note: str = ""


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("rc")
    f.entity(RcItem)
    ordered = sa.select(RcItem).order_by(RcItem.rank)
    handlers = {
        "make": f.write_handler(
            "make",
            f.pipeline(Page)
            .create("n", RcItem, data=lambda c: RcItem(title=c.payload.note, rank=c.payload.limit))
            .return_(lambda c: ok(c.steps["n"].id)),
        ),
        "page": f.write_handler(
            "page",
            f.pipeline(Page)
            .find_many("r", lambda c: ordered.limit(c.payload.limit).offset(c.payload.offset))
            .return_(lambda c: ok([r.title for r in c.steps["r"]])),
        ),
        "first": f.write_handler(
            "first",
            f.pipeline(Page)
            .find_one("r", lambda c: ordered.offset(c.payload.offset))
            .return_(lambda c: ok(None if c.steps["r"] is None else c.steps["r"].title)),
        ),
        # A write before the read: the refusal must roll it back.
        "write_then_page": f.write_handler(
            "write_then_page",
            f.pipeline(Page)
            .create("n", RcItem, data=lambda c: RcItem(title=c.payload.note))
            .find_many("r", lambda c: ordered.limit(c.payload.limit))
            .return_(lambda c: ok(len(c.steps["r"]))),
        ),
        # The count comes from an earlier step, not a payload field.
        "computed": f.write_handler(
            "computed",
            f.pipeline(Page)
            .compute("n", lambda c: c.payload.limit - 100)
            .find_many("r", lambda c: ordered.limit(c.steps["n"]))
            .return_(lambda c: ok(len(c.steps["r"]))),
        ),
    }
    handlers["query"] = f.query_handler(
        "query",
        f.query_pipeline(Page)
        .find_many("r", lambda c: ordered.offset(c.payload.offset), limit=2)
        .return_(lambda c: ok([r.title for r in c.steps["r"]])),
    )
    return f, handlers


@pytest.fixture(autouse=True)
def fresh_memos() -> None:
    """Each test's first call runs the resolver (no template from an earlier test)."""
    _templates._TEMPLATES.entries().clear()
    _entity_reads._PLANS.entries().clear()


def _setup(app_on: AppOn, make_user: Callable[..., User]) -> tuple[App, dict[str, Any], User]:
    f, h = _feature()
    app, alice = app_on([f]), make_user()
    for rank, title in enumerate(("a", "b", "c")):
        ok_data(app.dispatch(h["make"], Page(limit=rank, note=title), user=alice))
    return app, h, alice


def _refused(result: object, field: str, value: int, step: str = '0 read.find_many "r"') -> None:
    failure = failure_of(result, "validation_error")
    message = f"must not be negative (the query's {field.upper()}), not {value}"
    assert failure.details == [{"path": f"$.{field}", "message": message, "column": field.upper(), "step": step}]
    assert failure.message == f"step {step}: a row count is negative: {message} ({field.upper()}, from $.{field})"


@pytest.mark.parametrize("field", ["limit", "offset"])
def test_a_negative_row_count_is_a_validation_error_on_every_call(
    app_on: AppOn, make_user: Callable[..., User], field: str
) -> None:
    app, h, alice = _setup(app_on, make_user)
    _refused(app.dispatch(h["page"], Page(**{field: -1}), user=alice), field, -1)
    assert app.dispatch(h["page"], Page(limit=2, offset=1), user=alice) == Ok(["b", "c"])
    for value in (-1, -(2**40)):
        _refused(app.dispatch(h["page"], Page(**{field: value}), user=alice), field, value)
    assert app.dispatch(h["page"], Page(limit=1, offset=2), user=alice) == Ok(["c"])


def test_zero_rows_asked_for_or_skipped_is_fine(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app, h, alice = _setup(app_on, make_user)
    for _ in range(2):
        assert app.dispatch(h["page"], Page(limit=0), user=alice) == Ok([])
        assert app.dispatch(h["page"], Page(offset=0), user=alice) == Ok(["a", "b", "c"])
        assert app.dispatch(h["page"], Page(offset=3), user=alice) == Ok([])


def test_find_one_and_a_query_handler_refuse_a_negative_offset(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app, h, alice = _setup(app_on, make_user)
    for _ in range(2):
        assert app.dispatch(h["first"], Page(offset=1), user=alice) == Ok("b")
        _refused(app.dispatch(h["first"], Page(offset=-2), user=alice), "offset", -2, '0 read.find_one "r"')
        assert app.query(h["query"], Page(offset=1), user=alice) == Ok(["b", "c"])
        _refused(app.query(h["query"], Page(offset=-1), user=alice), "offset", -1)


def test_nothing_the_handler_wrote_stays(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app, h, alice = _setup(app_on, make_user)
    assert app.dispatch(h["write_then_page"], Page(limit=100, note="kept"), user=alice) == Ok(4)
    gone = app.dispatch(h["write_then_page"], Page(limit=-5, note="gone"), user=alice)
    _refused(gone, "limit", -5, '1 read.find_many "r"')
    with app.engine.connect() as conn:
        titles = sorted(conn.execute(sa.select(RcItem.title)).scalars())
    assert titles == ["a", "b", "c", "kept"]


def test_a_count_from_an_earlier_step_names_no_payload_field(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app, h, alice = _setup(app_on, make_user)
    for _ in range(2):
        assert app.dispatch(h["computed"], Page(limit=101), user=alice) == Ok(1)
        failure = failure_of(app.dispatch(h["computed"], Page(limit=99), user=alice), "validation_error")
        assert [(d["path"], d["column"]) for d in failure.details] == [("$", "LIMIT")]  # type: ignore[index,union-attr]


def test_another_tenants_rows_are_not_counted(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app, h, _ = _setup(app_on, make_user)
    bob = make_user()
    assert app.dispatch(h["page"], Page(offset=0), user=bob) == Ok([])
    _refused(app.dispatch(h["page"], Page(offset=-1), user=bob), "offset", -1)


def test_a_negative_literal_limit_fails_the_boot(tmp_path: Path) -> None:
    f: Feature[Any] = Feature("rc_boot")
    f.entity(RcItem)
    f.write_handler(
        "h", f.pipeline(Page).find_many("r", lambda c: sa.select(RcItem), limit=-1).return_(lambda c: ok(None))
    )
    with pytest.raises(BootError) as err:
        App([f], database_url=f"sqlite:///{tmp_path / 'boot.sqlite3'}")
    assert "find_many limit=-1 must be 0 or more" in str(err.value)
