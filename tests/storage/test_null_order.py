"""Where NULLs sort when a query does not say: PostgreSQL puts them last in ascending
order and first in descending, SQLite the reverse.  A query ordered by a nullable column
(``order_by(Ticket.due)``) listed, and paged, its rows in another order on each database;
the App's SQLite SQL now writes PostgreSQL's order out.  A query that says its own
(``nulls_first()``) keeps it; SQL text is the database's.  On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import sqlalchemy as sa
from _support import ok_data, read_queries
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok
from kumiko_typed._engine import make_engine

AppOn = Callable[..., App]


class NoTicket(Entity):
    __tablename__ = "no_ticket"
    title: Mapped[str] = mapped_column(sa.String(20))
    rank: Mapped[int | None] = mapped_column(default=None)
    tag: Mapped[str | None] = mapped_column(sa.String(20), default=None)


@attrs.frozen
class Put:
    title: str
    rank: int | None
    tag: str | None


@attrs.frozen
class Page:
    limit: int = 10
    offset: int = 0


tickets = Feature("no")
tickets.entity(NoTicket)
put = tickets.write_handler(
    "put",
    tickets.pipeline(Put)
    .create("t", NoTicket, data=lambda c: NoTicket(title=c.payload.title, rank=c.payload.rank, tag=c.payload.tag))
    .return_(lambda c: ok(None)),
)
_READS: dict[str, Callable[[Any], object]] = {
    "rank": lambda c: sa.select(NoTicket.title).order_by(NoTicket.rank, NoTicket.title),
    "rank_asc": lambda c: sa.select(NoTicket.title).order_by(NoTicket.rank.asc(), NoTicket.title),
    "rank_desc": lambda c: sa.select(NoTicket.title).order_by(NoTicket.rank.desc(), NoTicket.title),
    "tag_page": lambda c: (
        sa.select(NoTicket.title).order_by(NoTicket.tag, NoTicket.title).limit(c.payload.limit).offset(c.payload.offset)
    ),
    "said_first": lambda c: sa.select(NoTicket.title).order_by(NoTicket.rank.nulls_first(), NoTicket.title),
    "said_last_desc": lambda c: sa.select(NoTicket.title).order_by(NoTicket.rank.desc().nulls_last(), NoTicket.title),
    # One column per row (a read step keeps one): the row number written before the title.
    "window": lambda c: sa.select(
        sa.func.row_number().over(order_by=(NoTicket.rank, NoTicket.title)).concat(NoTicket.title)
    ),
    "text": lambda c: sa.select(NoTicket.title).order_by(sa.text("title DESC")),
}
reads = read_queries(tickets, Page, _READS)


def _seeded(app_on: AppOn, user: User) -> App:
    app = app_on([tickets])
    for title, rank, tag in [("a", 2, "x"), ("b", None, None), ("c", 1, "y"), ("d", None, "x")]:
        ok_data(app.dispatch(put, Put(title, rank, tag), user=user))
    return app


def test_nulls_sort_last_ascending_and_first_descending_on_both(app_on: AppOn, admin: User) -> None:
    """Was ``["b", "d", "c", "a"]`` on SQLite, ``["c", "a", "b", "d"]`` on PostgreSQL."""
    app = _seeded(app_on, admin)
    answer = {name: ok_data(app.query(q, Page(), user=admin)) for name, q in reads.items()}
    assert answer["rank"] == answer["rank_asc"] == ["c", "a", "b", "d"]
    assert answer["rank_desc"] == ["b", "d", "a", "c"]
    assert answer["said_first"] == ["b", "d", "c", "a"]
    assert answer["said_last_desc"] == ["a", "c", "b", "d"]
    assert answer["text"] == ["d", "c", "b", "a"]


def test_pages_of_a_nullable_order_are_the_same_on_both(app_on: AppOn, admin: User) -> None:
    """Offset pagination over a nullable column: the first page held the NULL row on
    SQLite only."""
    app = _seeded(app_on, admin)
    pages = [ok_data(app.query(reads["tag_page"], Page(limit=2, offset=o), user=admin)) for o in (0, 2, 4)]
    assert pages == [["a", "d"], ["c", "b"], []]


def test_a_window_orders_nulls_as_the_select_does(app_on: AppOn, admin: User) -> None:
    """``row_number() over (order by rank)`` numbered the NULL ranks first on SQLite."""
    app = _seeded(app_on, admin)
    assert sorted(ok_data(app.query(reads["window"], Page(), user=admin))) == ["1c", "2a", "3b", "4d"]


def test_a_not_null_column_is_ordered_as_written(app_on: AppOn) -> None:
    """Its NULL order cannot matter: an ``ORDER BY`` of a NOT NULL column stays as written."""
    app = app_on([tickets])
    stmt = sa.select(NoTicket.id).order_by(NoTicket.title.desc(), NoTicket.id).limit(1)
    assert "NULLS" not in str(stmt.compile(app.engine))


def test_an_order_by_a_named_column_of_no_table_sorts_nulls_as_postgresql(db_url: str) -> None:
    """A ``literal_column`` (a label's name) says nothing of its NULLs: it is sorted as
    any nullable column is (a mutation run found such a column untested)."""
    meta = sa.MetaData()
    table = sa.Table("nob_plain", meta, sa.Column("id", sa.Integer, primary_key=True), sa.Column("v", sa.Integer))
    engine = make_engine(db_url)
    try:
        meta.create_all(engine)
        with engine.begin() as conn:
            conn.execute(table.insert(), [{"id": 1, "v": 2}, {"id": 2, "v": None}, {"id": 3, "v": 1}])
            named = sa.select(table.c.v.label("w"))
            assert conn.execute(named.order_by(sa.literal_column("w"))).scalars().all() == [1, 2, None]
            assert conn.execute(named.order_by(sa.literal_column("w").desc())).scalars().all() == [None, 2, 1]
    finally:
        engine.dispose()
