"""A statement the framework keeps and runs on every write is found in SQLAlchemy's
compiled cache by a token of its own (``_cache_keys``); every other statement, a copy of a
kept one included, by its structure.  On SQLite and PostgreSQL: each runs its own SQL,
with its own values."""

from __future__ import annotations

import sqlalchemy as sa

from kumiko_typed._cache_keys import keyed_by_identity
from kumiko_typed._engine import make_engine

_meta = sa.MetaData()
_items = sa.Table("tck_item", _meta, sa.Column("id", sa.Integer, primary_key=True), sa.Column("label", sa.String(20)))


class _Uncached(sa.TypeDecorator[str]):
    """A type SQLAlchemy may not cache (as a user's own may declare): no statement using
    it has a cache key."""

    impl = sa.String(20)
    cache_ok = False


_opaque = sa.Table("tck_opaque", _meta, sa.Column("id", sa.Integer, primary_key=True), sa.Column("code", _Uncached()))


def test_kept_statements_and_their_copies_each_run_their_own_sql(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        _meta.create_all(engine)
        with engine.begin() as conn:
            conn.execute(_items.insert(), [{"id": i, "label": f"l{i}"} for i in range(1, 5)])
        by_id = keyed_by_identity(sa.select(_items.c.label).where(_items.c.id == sa.bindparam("wanted")))
        # The same structure, kept apart: a token each, never one compiled form for both.
        twin = keyed_by_identity(sa.select(_items.c.label).where(_items.c.id == sa.bindparam("wanted")))
        narrowed = by_id.where(_items.c.label != sa.bindparam("not_this"))  # a copy: keyed by structure
        ids = keyed_by_identity(sa.select(_items.c.id).where(_items.c.id > 2).order_by(_items.c.id))
        renamed = keyed_by_identity(_items.update().where(_items.c.id == sa.bindparam("row")))
        with engine.begin() as conn:
            for _ in range(2):  # the second time from the compiled cache
                assert conn.execute(by_id, {"wanted": 2}).scalar() == "l2"
                assert conn.execute(twin, {"wanted": 3}).scalar() == "l3"
                assert conn.execute(narrowed, {"wanted": 2, "not_this": "l2"}).scalar() is None
                assert conn.execute(narrowed, {"wanted": 4, "not_this": "l2"}).scalar() == "l4"
                assert conn.execute(ids).scalars().all() == [3, 4]
            for row, values in ((1, {"label": "one"}), (2, {"id": 12}), (1, {"label": "uno"})):
                assert conn.execute(renamed, {"row": row, **values}).rowcount == 1  # other columns set
        with engine.connect() as conn:
            rows = conn.execute(sa.select(_items.c.id, _items.c.label).order_by(_items.c.id)).all()
        assert [tuple(r) for r in rows] == [(1, "uno"), (3, "l3"), (4, "l4"), (12, "l2")]
        assert by_id._generate_cache_key() != twin._generate_cache_key()
        assert (
            narrowed._generate_cache_key()
            == by_id.where(_items.c.label != sa.bindparam("not_this"))._generate_cache_key()
        )
    finally:
        engine.dispose()


def test_a_statement_sqlalchemy_cannot_cache_is_kept_as_it_is_and_runs(db_url: str) -> None:
    """A mutation run found this untested: without the check, keying a statement with no
    cache key raised ``AttributeError`` (a user's type with ``cache_ok = False``)."""
    engine = make_engine(db_url)
    try:
        _meta.create_all(engine)
        stmt = sa.select(_opaque.c.id).where(_opaque.c.code == sa.bindparam("code"))
        assert stmt._generate_cache_key() is None
        assert keyed_by_identity(stmt) is stmt
        with engine.begin() as conn:
            conn.execute(_opaque.insert(), [{"id": 1, "code": "a"}, {"id": 2, "code": "b"}])
            for code, found in (("b", 2), ("a", 1), ("b", 2)):
                assert conn.execute(stmt, {"code": code}).scalar() == found
    finally:
        engine.dispose()
