"""A JSON column holding a bare number reads back as written, on both databases.

SQLAlchemy declares a JSON column ``JSON`` on SQLite, a name of NUMERIC affinity: SQLite
stored a JSON text that is a bare number as a number, so ``1.0`` read back as the int ``1``,
``-0.0`` as ``0`` and ``2**64`` as a float, where PostgreSQL gave the value written. The
engine declares it ``JSONTEXT`` (TEXT affinity), which keeps the text."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok


class JsDoc(Entity):
    __tablename__ = "js_doc"
    body: Mapped[object] = mapped_column(sa.JSON, nullable=True, default=None)


@attrs.frozen
class Put:
    body: bool | int | float | str | list[float] | dict[str, float] | None


@attrs.frozen
class Get:
    id: uuid.UUID


docs = Feature("js")
docs.entity(JsDoc)
put = docs.write_handler(
    "put",
    docs.pipeline(Put)
    .create("doc", JsDoc, data=lambda c: JsDoc(body=c.payload.body))
    .return_(lambda c: ok(c.steps["doc"].id)),
)
get = docs.query_handler(
    "get",
    docs.query_pipeline(Get)
    .get_one("doc", lambda c: sa.select(JsDoc).where(JsDoc.id == c.payload.id))
    .return_(lambda c: ok(c.steps["doc"].body)),
)
# SQLite's JSON functions read the text column as before: a filter on the document.
by_number = docs.query_handler(
    "by_number",
    docs.query_pipeline(Get)
    .find_many("docs", lambda c: sa.select(JsDoc).where(sa.func.json_extract(JsDoc.body, "$") > 1).order_by(JsDoc.id))
    .return_(lambda c: ok(len(c.steps["docs"]))),
)

WRITTEN: list[bool | int | float | str | list[float] | dict[str, float] | None] = [
    1.0,
    -0.0,
    0.5,
    2**64,
    -(2**63) - 1,
    12345678901234567890123,
    1e300,
    7,
    "12",
    True,
    None,
    [1.0],
    {"a": 2.0},
]


@pytest.mark.parametrize("body", WRITTEN, ids=repr)
def test_a_json_value_reads_back_with_its_type(app_on: Callable[..., App], user: User, body: object) -> None:
    app = app_on([docs])
    doc_id = ok_data(app.dispatch(put, Put(body), user=user))
    read = ok_data(app.query(get, Get(doc_id), user=user))
    assert read == body and type(read) is type(body)
    if isinstance(body, float):
        assert math.copysign(1.0, read) == math.copysign(1.0, body)  # -0.0 stays negative


def test_sqlite_declares_json_as_text_and_reflects_it_as_json(app_on: Callable[..., App], db_url: str) -> None:
    app = app_on([docs])
    columns = {c["name"]: c["type"] for c in sa.inspect(app.engine).get_columns("js_doc")}
    assert isinstance(columns["body"], sa.JSON)
    if db_url.startswith("sqlite"):
        with app.engine.connect() as conn:
            declared = conn.exec_driver_sql("SELECT type FROM pragma_table_info('js_doc') WHERE name = 'body'")
            assert declared.scalar() == "JSONTEXT"


def test_sqlites_json_functions_read_the_text_column(tmp_path: Path, user: User) -> None:
    app = App([docs], database_url=f"sqlite:///{tmp_path / 'docs.sqlite3'}")
    app.create_all()
    for body in (1.0, 2.5, 3):
        ok_data(app.dispatch(put, Put(body), user=user))
    assert ok_data(app.query(by_number, Get(uuid.uuid4()), user=user)) == 2
    app.engine.dispose()
