"""SQLite stores a UUID as its 32 hex digits, and reads back what ``uuid.UUID(text)``
makes of the stored text: the same UUID (equal, hashed alike, of unknown safety), or
the same refusal of text that is none, whatever wrote it."""

from __future__ import annotations

import uuid
from pathlib import Path

import sqlalchemy as sa
from hypothesis import example, given
from hypothesis import strategies as st

from kumiko_typed._engine import make_engine

_meta = sa.MetaData()
_refs = sa.Table("tut_ref", _meta, sa.Column("n", sa.Integer, primary_key=True), sa.Column("ref", sa.Uuid))
_texts = sa.Table(
    "tut_text", _meta, sa.Column("n", sa.Integer, primary_key=True), sa.Column("ref", sa.Uuid(as_uuid=False))
)

_ODD = "0123456789abcdefABCDEF" + "gG_+- {}:\u0661\uff11x\t"


def _read(engine: sa.Engine) -> object:
    processor = _refs.c.ref.type.dialect_impl(engine.dialect).result_processor(engine.dialect, None)
    assert processor is not None
    return processor


@given(text=st.text(_ODD, min_size=30, max_size=34) | st.uuids().map(lambda u: u.hex))
@example(text="0x" + "f" * 30)
@example(text="1_" + "0" * 30)
@example(text="-" + "1" * 31)
@example(text="\u0661" * 32)
@example(text="{" + "a" * 30 + "}")
def test_stored_text_reads_as_uuid_reads_it(text: str) -> None:
    engine = make_engine("sqlite://")
    try:
        read = _read(engine)
        try:
            expected: object = uuid.UUID(text)
        except ValueError as exc:
            expected = repr(exc)
        try:
            got: object = read(text)  # type: ignore[operator]
        except ValueError as exc:
            got = repr(exc)
        assert got == expected
        if isinstance(got, uuid.UUID):
            assert type(got) is uuid.UUID and hash(got) == hash(expected)
            assert got.is_safe is uuid.SafeUUID.unknown and str(got) == str(expected)
    finally:
        engine.dispose()


def test_uuids_round_trip_through_a_sqlite_file(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'u.sqlite3'}")
    try:
        _meta.create_all(engine)
        made = [uuid.uuid4() for _ in range(5)] + [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]
        with engine.begin() as conn:
            conn.execute(_refs.insert(), [{"n": n, "ref": u} for n, u in enumerate(made)] + [{"n": 99, "ref": None}])
            conn.execute(_refs.insert(), [{"n": 100, "ref": str(made[0])}])  # text is bound as the UUID it is
            assert conn.execute(sa.select(_refs.c.ref).order_by(_refs.c.n)).scalars().all() == [*made, None, made[0]]
            stored = conn.exec_driver_sql("SELECT ref FROM tut_ref WHERE n = 0").scalar()
        assert stored == made[0].hex
    finally:
        engine.dispose()


def test_a_uuid_column_read_as_text_reads_text_on_both(db_url: str) -> None:
    """``Uuid(as_uuid=False)`` reads back the dashed text on SQLite as on PostgreSQL, not a
    UUID (a mutation run found the fast read's ``as_uuid`` check untested)."""
    engine = make_engine(db_url)
    try:
        _meta.create_all(engine)
        made = uuid.uuid4()
        with engine.begin() as conn:
            conn.execute(_texts.insert(), [{"n": 1, "ref": str(made)}])
            assert conn.execute(sa.select(_texts.c.ref)).scalars().all() == [str(made)]
    finally:
        engine.dispose()
