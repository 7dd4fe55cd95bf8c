"""Query resolvers run once as templates (``_steps/_templates``): a straight-line
``select(...)`` resolver is not run again after its first call, every later call still
reads exactly the rows its own values select; a resolver whose statement may change with
something else than the values it binds (a branch, a global, a helper, a ``None`` where a
value was) runs on every call.  On SQLite and PostgreSQL."""

from __future__ import annotations

import gc
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, ok
from kumiko_typed._steps import _entity_reads, _templates

AppOn = Callable[..., App]


class RtItem(Entity):
    __tablename__ = "rt_item"
    title: Mapped[str] = mapped_column(sa.String(100))
    parent: Mapped[uuid.UUID | None] = mapped_column(default=None)


@attrs.frozen
class Make:
    title: str
    parent: uuid.UUID | None = None


@attrs.frozen
class Find:
    id: uuid.UUID | None = None
    title: str = ""
    parent: uuid.UUID | None = None
    by_title: bool = False


#: Read by a resolver between calls: a statement must see its current value.
WANTED = ["a"]


def _wanted() -> str:
    return WANTED[0]


def _titled(title: Any) -> Any:
    """A helper whose statement depends on ``WANTED``, not on the value it binds."""
    return RtItem.title == title if WANTED[0] == "a" else RtItem.title != title


def _titles(rows: Any) -> list[str]:
    return sorted(r.title for r in rows)


def _resolvers() -> dict[str, Callable[[Any], Any]]:
    """New resolver objects (of the same code) for every App: each test sees first calls."""
    return {
        "by_id": lambda c: sa.select(RtItem).where(RtItem.id == c.payload.id),
        "by_parent": lambda c: sa.select(RtItem).where(RtItem.parent == c.payload.parent),
        "by_step": lambda c: sa.select(RtItem).where(RtItem.id == c.steps["first"].parent),
        "branching": lambda c: (
            sa.select(RtItem).where(RtItem.title == c.payload.title)
            if c.payload.by_title
            else sa.select(RtItem).where(RtItem.id == c.payload.id)
        ),
        "global": lambda c: sa.select(RtItem).where(RtItem.title == WANTED[0], RtItem.title != c.payload.title),
        "helper": lambda c: sa.select(RtItem).where(RtItem.title == _wanted(), RtItem.title != c.payload.title),
        "shaping_helper": lambda c: sa.select(RtItem).where(_titled(c.payload.title)),
        "by_title": lambda c: sa.select(RtItem).where(RtItem.title == c.payload.title),
        "title_like": lambda c: sa.select(RtItem).where(RtItem.title.like(c.payload.title)),
    }


def _feature() -> tuple[Feature[Any], dict[str, Any], dict[str, Callable[[Any], Any]]]:
    f: Feature[Any] = Feature("rt")
    f.entity(RtItem)
    fresh = _resolvers()
    handlers = {
        "make": f.write_handler(
            "make",
            f.pipeline(Make)
            .create("n", RtItem, data=lambda c: RtItem(title=c.payload.title, parent=c.payload.parent))
            .return_(lambda c: ok(c.steps["n"].id)),
        ),
        **{
            name: f.write_handler(
                name, f.pipeline(Find).find_many("r", fresh[name]).return_(lambda c: ok(_titles(c.steps["r"])))
            )
            for name in (
                "by_id",
                "by_parent",
                "branching",
                "global",
                "helper",
                "shaping_helper",
                "by_title",
                "title_like",
            )
        },
        "limited": f.write_handler(
            "limited",
            f.pipeline(Find).find_many("r", fresh["by_parent"], limit=1).return_(lambda c: ok(len(c.steps["r"]))),
        ),
        "by_step": f.write_handler(
            "by_step",
            f.pipeline(Find)
            .get_one("first", fresh["by_id"])
            .get_one("second", fresh["by_step"])
            .return_(lambda c: ok(c.steps["second"].title)),
        ),
    }
    return f, handlers, fresh


@contextmanager
def runs_of(resolver: Callable[[Any], Any]) -> Iterator[list[int]]:
    """How often ``resolver``'s code runs inside the block (``[n]``)."""
    code = resolver.__code__
    count = [0]
    before = sys.getprofile()

    def watch(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code:
            count[0] += 1

    sys.setprofile(watch)
    try:
        yield count
    finally:
        sys.setprofile(before)


@pytest.fixture(autouse=True)
def fresh_memos() -> None:
    """Templates and plans start empty: a memo that fills up (2000 shapes, from the tests
    before) is dropped whole, and one dropped inside a test would run a resolver again."""
    _templates._TEMPLATES.entries().clear()
    _entity_reads._PLANS.entries().clear()


def _setup(app_on: AppOn, make_user: Callable[..., User]) -> tuple[App, dict[str, Any], dict[str, Any], User]:
    f, h, fresh = _feature()
    return app_on([f]), h, fresh, make_user()


def test_a_straight_resolver_runs_once_and_each_call_reads_its_own_rows(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    app, h, fresh, alice = _setup(app_on, make_user)
    bob = make_user()
    ids = [ok_data(app.dispatch(h["make"], Make(t), user=alice)) for t in ("a", "b", "c")]
    (bobs,) = [ok_data(app.dispatch(h["make"], Make("bob"), user=bob))]
    assert app.dispatch(h["by_id"], Find(ids[0]), user=alice) == Ok(["a"])  # the first call makes the template
    with runs_of(fresh["by_id"]) as runs:
        for _ in range(2):
            for got, title in zip(ids, ("a", "b", "c"), strict=True):
                assert app.dispatch(h["by_id"], Find(got), user=alice) == Ok([title])
            assert app.dispatch(h["by_id"], Find(bobs), user=alice) == Ok([])  # another tenant's row
            assert app.dispatch(h["by_id"], Find(bobs), user=bob) == Ok(["bob"])
            assert app.dispatch(h["by_id"], Find(uuid.uuid4()), user=bob) == Ok([])
    assert runs == [0]


def test_values_read_from_earlier_steps_and_a_limit_are_bound_per_call(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    app, h, _, alice = _setup(app_on, make_user)
    top = [ok_data(app.dispatch(h["make"], Make(t), user=alice)) for t in ("top1", "top2")]
    kids = [ok_data(app.dispatch(h["make"], Make(f"kid of {t}", parent=t), user=alice)) for t in top]
    for _ in range(3):
        for kid, title in zip(kids, ("top1", "top2"), strict=True):
            assert app.dispatch(h["by_step"], Find(kid), user=alice) == Ok(title)
        failure_of(app.dispatch(h["by_step"], Find(top[0]), user=alice), "not_found")  # a parent of None
        assert app.dispatch(h["limited"], Find(parent=top[0]), user=alice) == Ok(1)
        assert app.dispatch(h["limited"], Find(parent=uuid.uuid4()), user=alice) == Ok(0)


def test_a_value_of_another_type_than_the_first_calls_builds_its_own_statement(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """``parent == None`` is ``IS NULL`` in SQLAlchemy: bound as a value in the statement
    made for a UUID it would match no row."""
    app, h, _, alice = _setup(app_on, make_user)
    top = ok_data(app.dispatch(h["make"], Make("top"), user=alice))
    app.dispatch(h["make"], Make("kid", parent=top), user=alice)
    for _ in range(2):
        assert app.dispatch(h["by_parent"], Find(parent=top), user=alice) == Ok(["kid"])
        assert app.dispatch(h["by_parent"], Find(parent=None), user=alice) == Ok(["top"])


def test_a_branching_resolver_runs_on_every_call(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app, h, fresh, alice = _setup(app_on, make_user)
    a, b = (ok_data(app.dispatch(h["make"], Make(t), user=alice)) for t in ("a", "b"))
    assert app.dispatch(h["branching"], Find(a), user=alice) == Ok(["a"])
    with runs_of(fresh["branching"]) as runs:
        assert app.dispatch(h["branching"], Find(a, title="b", by_title=True), user=alice) == Ok(["b"])
        assert app.dispatch(h["branching"], Find(b), user=alice) == Ok(["b"])
    assert runs == [2]


def test_a_resolver_reading_a_global_or_calling_a_helper_sees_its_value_of_each_call(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    app, h, _, alice = _setup(app_on, make_user)
    for t in ("a", "b"):
        app.dispatch(h["make"], Make(t), user=alice)
    try:
        for name in ("global", "helper"):
            for wanted in ("a", "b", "a"):
                WANTED[0] = wanted
                assert app.dispatch(h[name], Find(), user=alice) == Ok([wanted])
        for wanted, found in (("a", ["a"]), ("b", ["b"]), ("a", ["a"])):
            WANTED[0] = wanted
            assert app.dispatch(h["shaping_helper"], Find(title="a"), user=alice) == Ok(found)
    finally:
        WANTED[0] = "a"


def test_a_resolver_first_called_under_a_profiler_gets_its_template_later(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    app, h, fresh, alice = _setup(app_on, make_user)
    a = ok_data(app.dispatch(h["make"], Make("a"), user=alice))
    with runs_of(fresh["by_id"]) as runs:  # a profiler is on: the probe waits
        for _ in range(2):
            assert app.dispatch(h["by_id"], Find(a), user=alice) == Ok(["a"])
    assert runs == [2]
    assert app.dispatch(h["by_id"], Find(a), user=alice) == Ok(["a"])
    with runs_of(fresh["by_id"]) as runs:
        assert app.dispatch(h["by_id"], Find(a), user=alice) == Ok(["a"])
    assert runs == [0]


class _Litter:
    """Cyclic garbage whose finalizer leaves the next such cycle behind while ``LITTER``
    is on: with a collection at almost every allocation, a finalizer runs inside any
    stretch of Python code, as the collector may run one inside a probe."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        if LITTER:
            _Litter()


LITTER: list[bool] = []


def test_a_collection_during_the_probe_does_not_cost_the_resolver_its_template(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """The probe watches every call the resolver makes; a finalizer the garbage collector
    happened to run meanwhile is none of the resolver's (it read as a foreign call, and
    the resolver ran at every call from then on)."""
    app, h, fresh, alice = _setup(app_on, make_user)
    a = ok_data(app.dispatch(h["make"], Make("a"), user=alice))
    threshold = gc.get_threshold()
    LITTER.append(True)
    _Litter()
    gc.set_threshold(1)
    try:
        assert app.dispatch(h["by_id"], Find(a), user=alice) == Ok(["a"])  # the first call makes the template
    finally:
        gc.set_threshold(*threshold)
        LITTER.clear()
        gc.collect()
    with runs_of(fresh["by_id"]) as runs:
        assert app.dispatch(h["by_id"], Find(a), user=alice) == Ok(["a"])
    assert runs == [0]


def test_a_templated_read_checks_every_calls_values_as_the_first_calls(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """A value its column cannot hold is the same ``validation_error`` on a later call,
    which runs no resolver, as on the first; a text ending in a backslash is refused as a
    LIKE pattern only (a lone escape), and an even run of them is a pattern like any."""
    app, h, fresh, alice = _setup(app_on, make_user)
    for title in ("a", "a\\", "a\\\\"):
        ok_data(app.dispatch(h["make"], Make(title), user=alice))
    for name in ("by_title", "title_like"):
        assert app.dispatch(h[name], Find(title="a"), user=alice) == Ok(["a"])  # the template
        with runs_of(fresh[name]) as runs:
            for _ in range(2):
                refused = failure_of(app.dispatch(h[name], Find(title="a\x00b"), user=alice), "validation_error")
                assert refused.details == [
                    {
                        "path": "$.title",
                        "message": "must not contain NUL characters (U+0000)",
                        "column": "rt_item.title",
                        "step": '0 read.find_many "r"',
                    }
                ]
                assert app.dispatch(h[name], Find(title="a"), user=alice) == Ok(["a"])
        assert runs == [0]
    assert app.dispatch(h["by_title"], Find(title="a\\"), user=alice) == Ok(["a\\"])
    assert app.dispatch(h["title_like"], Find(title="a\\\\"), user=alice) == Ok(["a\\"])
    lone = failure_of(app.dispatch(h["title_like"], Find(title="a\\"), user=alice), "validation_error")
    assert "must not end with a lone backslash" in lone.message
