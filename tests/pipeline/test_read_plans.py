"""The read steps' plans (``_steps/_entity_reads``) and the memoised unscoped-select check:
a statement shape is worked out once, and every later statement of that shape — other
values, another tenant, another session — still reads exactly its own rows, as the
objects the transaction holds; a Core select is refused however often a scoped one of
the same SQL ran before it.  On SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, Session, aliased, defer, mapped_column, reconstructor, with_loader_criteria

from kumiko_typed import App, Entity, Feature, Ok, User, ok
from kumiko_typed._access import ShapeMemo, refuse_unscoped
from kumiko_typed._errors import UnscopedRead
from kumiko_typed._steps import _entity_reads

AppOn = Callable[..., App]


class RpNote(Entity):
    __tablename__ = "rp_note"
    title: Mapped[str] = mapped_column(sa.String(100))
    #: Stored under another column name than the attribute's.
    words: Mapped[int] = mapped_column("word_count", default=0)


class RpLoaded(Entity):
    """Counts its loads: a ``@reconstructor`` runs on every object the ORM loads."""

    __tablename__ = "rp_loaded"
    title: Mapped[str] = mapped_column(sa.String(100))

    @reconstructor
    def _on_load(self) -> None:
        self.loaded_by_orm = True


class RpSwap(Entity):
    """Each attribute stored in the column named like the other one."""

    __tablename__ = "rp_swap"
    left: Mapped[str] = mapped_column("right", sa.String(10))
    right: Mapped[str] = mapped_column("left", sa.String(10))


NOTES: sa.Table = RpNote.__table__  # type: ignore[assignment]


@attrs.frozen
class Ref:
    id: uuid.UUID
    shape: str = ""


@attrs.frozen
class Title:
    title: str
    words: int = 0


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("rp")
    f.entity(RpNote)
    f.entity(RpLoaded)
    f.entity(RpSwap)
    by_id = lambda c: sa.select(RpNote).where(RpNote.id == c.payload.id)  # noqa: E731
    handlers = {
        "create": f.write_handler(
            "create",
            f.pipeline(Title)
            .create("n", RpNote, data=lambda c: RpNote(title=c.payload.title, words=c.payload.words))
            .return_(lambda c: ok(c.steps["n"].id)),
        ),
        "create_loaded": f.write_handler(
            "create_loaded",
            f.pipeline(Title)
            .create("n", RpLoaded, data=lambda c: RpLoaded(title=c.payload.title))
            .return_(lambda c: ok(c.steps["n"].id)),
        ),
        "create_swap": f.write_handler(
            "create_swap",
            f.pipeline(Title)
            .create("n", RpSwap, data=lambda c: RpSwap(left=c.payload.title, right="r"))
            .return_(lambda c: ok(c.steps["n"].id)),
        ),
        "get_swap": f.write_handler(
            "get_swap",
            f.pipeline(Ref)
            .get_one("n", lambda c: sa.select(RpSwap).where(RpSwap.id == c.payload.id))
            .return_(lambda c: ok((c.steps["n"].left, c.steps["n"].right))),
        ),
        "get": f.write_handler(
            "get",
            f.pipeline(Ref).get_one("n", by_id).return_(lambda c: ok((c.steps["n"].title, c.steps["n"].words))),
        ),
        "same_object": f.write_handler(
            "same_object",
            f.pipeline(Ref)
            .get_one("a", by_id)
            .find_one("b", by_id)
            .find_many("all", lambda c: sa.select(RpNote).order_by(RpNote.title))
            .update("saved", RpNote, id=lambda c: c.payload.id, changes=lambda c: {"words": 7}, version=1)
            .find_one("after", by_id)
            .return_(
                lambda c: ok(
                    (
                        c.steps["a"] is c.steps["b"] is c.steps["saved"].entity is c.steps["after"],
                        any(n is c.steps["a"] for n in c.steps["all"]),
                        c.steps["after"].version,
                        c.steps["after"].words,
                    )
                )
            ),
        ),
        "unflushed": f.write_handler(
            "unflushed",
            f.pipeline(Ref)
            .get_one("a", by_id)
            .compute("renamed", lambda c: setattr(c.steps["a"], "title", "renamed-in-memory"))
            .find_one("b", lambda c: sa.select(RpNote).where(RpNote.title == "renamed-in-memory"))
            .return_(lambda c: ok(c.steps["b"] is c.steps["a"])),
        ),
        "loaded": f.write_handler(
            "loaded",
            f.pipeline(Ref)
            .get_one("n", lambda c: sa.select(RpLoaded).where(RpLoaded.id == c.payload.id))
            .return_(lambda c: ok(getattr(c.steps["n"], "loaded_by_orm", False))),
        ),
        "shapes": f.write_handler(
            "shapes",
            f.pipeline(Ref)
            .find_many("r", lambda c: SHAPES[c.payload.shape])
            .return_(lambda c: ok(sorted(_title(r) for r in c.steps["r"]))),
        ),
        "scoped_or_not": f.write_handler(
            "scoped_or_not",
            f.pipeline(Ref)
            .find_many("r", lambda c: SCOPED_OR_NOT[c.payload.shape])
            .return_(lambda c: ok(sorted(c.steps["r"]))),
        ),
    }
    return f, handlers


def _title(row: Any) -> str:
    return row if isinstance(row, str) else str(row.title)


_OTHER = aliased(RpNote)
#: Selects the plans leave to ``session.execute`` (or take): each tenant sees its own rows.
SHAPES: dict[str, Any] = {
    "entity": sa.select(RpNote),
    "column": sa.select(RpNote.title),
    "aliased": sa.select(_OTHER),
    "loader_option": sa.select(RpNote).options(defer(RpNote.words)),
    "execution_option": sa.select(RpNote).execution_options(populate_existing=True),
    "joined": sa.select(RpNote).join(_OTHER, _OTHER.id == RpNote.id),
    "limited": sa.select(RpNote).order_by(RpNote.title).limit(5),
}

#: The same SQL twice: through the mapped class (filtered) and as Core (refused).
SCOPED_OR_NOT: dict[str, Any] = {
    "scoped": sa.select(RpNote.title).where(RpNote.words >= 0),
    "core": sa.select(NOTES.c.title).where(NOTES.c.word_count >= 0),
}


@pytest.fixture
def orm_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The read steps' statements that went through ``session.execute``, not a plan (an
    ``do_orm_execute`` listener would itself send every read through the ORM)."""
    seen: list[str] = []
    through_orm = _entity_reads._through_orm

    def record(session: Session, stmt: Any, first: bool) -> list[Any]:
        seen.append(str(stmt))
        return through_orm(session, stmt, first)

    monkeypatch.setattr(_entity_reads, "_through_orm", record)
    return seen


def test_an_applications_own_orm_hook_still_sees_every_read(
    app_on: AppOn, make_user: Callable[..., User], orm_reads: list[str]
) -> None:
    """A soft-delete filter added by the application's ``do_orm_execute`` hook applies to
    the read steps: with such a hook they go through ``session.execute``."""
    f, h = _feature()
    app = app_on([f])
    alice = make_user()
    a1, a2 = _notes(app, h, alice, "a1", "a22")
    assert app.dispatch(h["get"], Ref(a2), user=alice) == Ok(("a22", 3))

    def hide_short(state: Any) -> None:
        if state.is_select:
            state.statement = state.statement.options(
                with_loader_criteria(RpNote, lambda cls: cls.words > 2, include_aliases=True)
            )

    sa.event.listen(Session, "do_orm_execute", hide_short)
    try:
        failure_of(app.dispatch(h["get"], Ref(a1), user=alice), "not_found")
        assert app.dispatch(h["get"], Ref(a2), user=alice) == Ok(("a22", 3))
    finally:
        sa.event.remove(Session, "do_orm_execute", hide_short)
    assert len(orm_reads) == 2


def _notes(app: App, handlers: dict[str, Any], who: User, *titles: str) -> list[uuid.UUID]:
    return [ok_data(app.dispatch(handlers["create"], Title(t, len(t)), user=who)) for t in titles]


def test_one_shape_with_other_values_and_tenants_reads_each_ones_own_row(
    app_on: AppOn, make_user: Callable[..., User], orm_reads: list[str]
) -> None:
    f, h = _feature()
    app = app_on([f])
    alice, bob = make_user(), make_user()
    a1, a2 = _notes(app, h, alice, "a1", "a22")
    (b1,) = _notes(app, h, bob, "b1")
    for _ in range(2):
        assert app.dispatch(h["get"], Ref(a1), user=alice) == Ok(("a1", 2))
        assert app.dispatch(h["get"], Ref(a2), user=alice) == Ok(("a22", 3))
        assert app.dispatch(h["get"], Ref(b1), user=bob) == Ok(("b1", 2))
        failure_of(app.dispatch(h["get"], Ref(b1), user=alice), "not_found")
        failure_of(app.dispatch(h["get"], Ref(a1), user=bob), "not_found")
        failure_of(app.dispatch(h["get"], Ref(uuid.uuid4()), user=bob), "not_found")
    assert orm_reads == []  # every read above ran from the plan, not through session.execute


def test_a_planned_read_gives_the_object_the_transaction_holds(
    app_on: AppOn, make_user: Callable[..., User], orm_reads: list[str]
) -> None:
    f, h = _feature()
    app = app_on([f])
    alice = make_user()
    (a1,) = _notes(app, h, alice, "a1")
    _notes(app, h, alice, "a2")
    # get_one, find_one, find_many, Saved.entity and a read after the write: one object.
    assert app.dispatch(h["same_object"], Ref(a1), user=alice) == Ok((True, True, 2, 7))
    assert app.dispatch(h["get"], Ref(a1), user=alice) == Ok(("a1", 7))
    assert orm_reads == []


def test_a_read_after_an_unflushed_change_goes_through_the_orm(
    app_on: AppOn, make_user: Callable[..., User], orm_reads: list[str]
) -> None:
    """An object changed in memory: the ORM flushes it before the select, so the select
    finds it; a plan (which does not flush) would not."""
    f, h = _feature()
    app = app_on([f])
    alice = make_user()
    (a1,) = _notes(app, h, alice, "a1")
    assert app.dispatch(h["unflushed"], Ref(a1), user=alice) == Ok(True)
    assert len(orm_reads) == 1


def test_a_mapping_with_load_events_is_loaded_by_the_orm(app_on: AppOn, make_user: Callable[..., User]) -> None:
    f, h = _feature()
    app = app_on([f])
    alice = make_user()
    loaded = ok_data(app.dispatch(h["create_loaded"], Title("x"), user=alice))
    assert app.dispatch(h["loaded"], Ref(loaded), user=alice) == Ok(True)


def test_columns_named_like_other_attributes_are_read_into_their_own(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    f, h = _feature()
    app = app_on([f])
    alice = make_user()
    swap = ok_data(app.dispatch(h["create_swap"], Title("l"), user=alice))
    for _ in range(2):
        assert app.dispatch(h["get_swap"], Ref(swap), user=alice) == Ok(("l", "r"))


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_reads_only_the_tenants_rows(app_on: AppOn, make_user: Callable[..., User], shape: str) -> None:
    f, h = _feature()
    app = app_on([f])
    alice, bob = make_user(), make_user()
    _notes(app, h, alice, "a1", "a2")
    _notes(app, h, bob, "b1")
    for _ in range(2):
        assert app.dispatch(h["shapes"], Ref(uuid.uuid4(), shape), user=alice) == Ok(["a1", "a2"])
        assert app.dispatch(h["shapes"], Ref(uuid.uuid4(), shape), user=bob) == Ok(["b1"])


def test_a_core_select_is_refused_after_the_same_sql_ran_scoped(app_on: AppOn, make_user: Callable[..., User]) -> None:
    f, h = _feature()
    app = app_on([f])
    alice, bob = make_user(), make_user()
    _notes(app, h, alice, "a-secret")
    _notes(app, h, bob, "b1")
    for _ in range(2):
        assert app.dispatch(h["scoped_or_not"], Ref(uuid.uuid4(), "scoped"), user=bob) == Ok(["b1"])
        refused = failure_of(app.dispatch(h["scoped_or_not"], Ref(uuid.uuid4(), "core"), user=bob), "internal_error")
        assert "UnscopedRead" in refused.message and "a-secret" not in repr(refused)


def test_the_unscoped_check_keeps_only_scoped_verdicts() -> None:
    scoped, core = SCOPED_OR_NOT["scoped"], SCOPED_OR_NOT["core"]
    assert str(scoped) == str(core)  # the same SQL: only the cache key tells them apart
    for _ in range(3):
        refuse_unscoped(scoped)
        with pytest.raises(UnscopedRead):
            refuse_unscoped(core)
        with pytest.raises(UnscopedRead):  # a new statement object of a refused shape
            refuse_unscoped(sa.select(NOTES.c.title).where(NOTES.c.word_count >= 0))


def test_a_shape_memo_is_bounded() -> None:
    memo = ShapeMemo(limit=2)
    memo.entries()["a"] = 1
    memo.entries()["b"] = 2
    assert memo.entries() == {}


#: A read model of Core with two columns.
RP_BOARD = sa.Table(
    "rp_board", sa.MetaData(), sa.Column("name", sa.String(40), primary_key=True), sa.Column("score", sa.Integer)
)


def test_a_read_of_several_columns_is_refused_not_cut_to_its_first(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """``select(RpNote.title, func.count())`` read as ``find_many`` gave the titles alone,
    the counts dropped without a word, and ``select(RP_BOARD)`` the names alone: a read
    step keeps one value per row.  It is refused
    naming what to write instead, in all three read steps, and no value is quoted."""
    f, h = _feature()
    grouped = lambda c: sa.select(RpNote.title, sa.func.count()).group_by(RpNote.title)  # noqa: E731
    many = f.write_handler("many", f.pipeline(Ref).find_many("rows", grouped).return_(lambda c: ok(c.steps["rows"])))
    one = f.write_handler("one", f.pipeline(Ref).find_one("row", grouped).return_(lambda c: ok(c.steps["row"])))
    two = lambda c: sa.select(RpNote, RpLoaded).join(RpLoaded, RpLoaded.title == RpNote.title)  # noqa: E731
    pair = f.write_handler("pair", f.pipeline(Ref).get_one("row", two).return_(lambda c: ok(None)))
    # A Core table named whole is each of its columns: select(board) gave the names alone.
    board = f.write_handler(
        "board", f.pipeline(Ref).find_many("rows", lambda c: sa.select(RP_BOARD)).return_(lambda c: ok(c.steps["rows"]))
    )
    app = app_on([f])
    alice = make_user()
    _notes(app, h, alice, "a-secret", "a-secret")
    RP_BOARD.create(app.engine)
    with app.engine.begin() as conn:
        conn.execute(sa.insert(RP_BOARD), [{"name": "a-secret", "score": 3}])
    for handler, selected in ((many, 2), (one, 2), (pair, 2), (board, 2)):
        refused = failure_of(app.dispatch(handler, Ref(uuid.uuid4()), user=alice), "internal_error")
        assert f"the query selects {selected} entities or columns, and a read step keeps one per row" in refused.message
        assert "c.db.execute(...).all()" in refused.message and "a-secret" not in refused.message
