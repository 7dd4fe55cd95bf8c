"""A read of a JSON column's element answers alike on SQLite and PostgreSQL.

SQLAlchemy compiles ``doc["k"]`` to PostgreSQL's ``->``/``->>`` and to SQLite's
``JSON_EXTRACT``, which disagreed: ``doc["k"].is_(None)`` found the documents without the
key on PostgreSQL only; ``as_string()`` of ``true`` was ``'true'`` there and ``'1'`` on
SQLite; ``as_integer()`` made ``5.5`` a ``5``, ``true`` a ``1`` and text a ``0`` on SQLite
where PostgreSQL refused them; and ``doc["k"] == 5`` compared JSON text on SQLite and was
an ``internal_error`` naming no field on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data, read_queries, refused_by_the_database
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, ok

AppOn = Callable[..., App]


class JrDoc(Entity):
    __tablename__ = "jr_doc"
    name: Mapped[str] = mapped_column(sa.String(20))
    data: Mapped[Any] = mapped_column(sa.JSON)


@attrs.frozen
class Put:
    name: str
    data: Any


@attrs.frozen
class Given:
    value: Any = None


_READS: dict[str, Callable[[Any], object]] = {
    "missing": lambda c: sa.select(JrDoc).where(JrDoc.data["k"].is_(None)),
    "present": lambda c: sa.select(JrDoc).where(JrDoc.data["k"].is_not(None)),
    "text": lambda c: sa.select(JrDoc).where(JrDoc.data["k"].as_string() == c.payload.value),
    "integer": lambda c: sa.select(JrDoc).where(JrDoc.data["k"].as_integer() == c.payload.value),
    "float": lambda c: sa.select(JrDoc).where(JrDoc.data["k"].as_float() > c.payload.value),
    "boolean": lambda c: sa.select(JrDoc).where(JrDoc.data["k"].as_boolean() == c.payload.value),
    "nested": lambda c: sa.select(JrDoc).where(JrDoc.data[("a", "b")].as_integer() == c.payload.value),
    "by_integer": lambda c: sa.select(JrDoc).where(JrDoc.name.like("n%")).order_by(JrDoc.data["k"].as_integer()),
    "raw": lambda c: sa.select(JrDoc).where(JrDoc.data["k"] == c.payload.value),
    "whole": lambda c: sa.select(JrDoc).where(JrDoc.data == c.payload.value),
}


_DOCS: dict[str, object] = {
    "n_int": {"k": 5},
    "n_text": {"k": "7"},
    "n_neg": {"k": -2},
    "true": {"k": True},
    "yes": {"k": "yes"},
    "null": {"k": None},
    "none": {},
    "list": [1, 2],
    "nested": {"a": {"b": 3}},
    "real": {"k": 2.5},
    "exp": {"k": "1e3"},
    "big": {"k": 2**40},
}


@pytest.fixture
def setup(app_on: AppOn, make_user: Callable[..., User]) -> tuple[App, dict[str, Any], User]:
    f: Feature[Any] = Feature("jr")
    f.entity(JrDoc)
    h = read_queries(f, Given, _READS, lambda docs: [d.name for d in docs])
    h["put"] = f.write_handler(
        "put",
        f.pipeline(Put)
        .create("d", JrDoc, data=lambda c: JrDoc(name=c.payload.name, data=c.payload.data))
        .return_(lambda c: ok(None)),
    )
    app, alice = app_on([f]), make_user()
    return app, h, alice


def _put(setup: tuple[App, dict[str, Any], User], *names: str) -> None:
    app, h, alice = setup
    for name in names:
        ok_data(app.dispatch(h["put"], Put(name, _DOCS[name]), user=alice))


def test_a_missing_key_is_null_and_a_null_one_is_not(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    _put(setup, *_DOCS)
    assert sorted(ok_data(app.query(h["missing"], Given(), user=alice))) == ["list", "nested", "none"]
    assert sorted(ok_data(app.query(h["present"], Given(), user=alice))) == sorted(
        set(_DOCS) - {"list", "nested", "none"}
    )


@pytest.mark.parametrize(
    ("read", "value", "found"),
    [
        ("text", "5", ["n_int"]),
        ("text", "7", ["n_text"]),
        ("text", "true", ["true"]),  # SQLite read true as '1'
        ("text", "2.5", ["real"]),
        ("text", "1e3", ["exp"]),
        ("integer", 7, ["n_text"]),  # the text "7" is an integer to both
        ("integer", -2, ["n_neg"]),
        ("nested", 3, ["nested"]),
        ("float", 100, ["exp"]),
        ("float", 2, ["exp", "n_int", "n_text", "real"]),
        ("boolean", True, ["true", "yes"]),  # "yes" is true to PostgreSQL's boolean
    ],
)
def test_an_element_read_as_text_a_number_or_true_or_false(
    setup: tuple[App, dict[str, Any], User], read: str, value: object, found: list[str]
) -> None:
    app, h, alice = setup
    readable = {
        "text": _DOCS,
        "integer": ["n_int", "n_text", "n_neg", "null", "none", "list", "nested"],
        "nested": ["nested", "n_int", "none", "list"],
        "float": ["n_int", "n_text", "n_neg", "real", "exp", "null", "none"],
        "boolean": ["true", "yes", "null", "none", "list"],
    }[read]
    _put(setup, *readable)
    assert sorted(ok_data(app.query(h[read], Given(value), user=alice))) == found


def test_an_order_by_an_integer_element(setup: tuple[App, dict[str, Any], User]) -> None:
    app, h, alice = setup
    _put(setup, "n_int", "n_text", "n_neg")
    assert app.query(h["by_integer"], Given(), user=alice) == Ok(["n_neg", "n_int", "n_text"])  # -2, 5, "7"


@pytest.mark.parametrize(
    ("read", "doc", "value"),
    [
        ("integer", "real", 5),  # 2.5 is no integer: SQLite made it 2
        ("integer", "true", 1),  # SQLite made true a 1
        ("integer", "yes", 0),  # SQLite made text a 0
        ("integer", "exp", 1000),
        ("integer", "big", 1),  # past PostgreSQL's integer: SQLite read it whole
        ("float", "true", 0),
        ("float", "yes", 0),
        ("boolean", "n_int", True),  # 5 is no boolean to PostgreSQL (1 and 0 as text are)
        ("by_integer", "real", None),
    ],
)
def test_an_element_that_is_not_what_the_read_says_is_refused_on_both(
    setup: tuple[App, dict[str, Any], User], read: str, doc: str, value: object
) -> None:
    app, h, alice = setup
    ok_data(app.dispatch(h["put"], Put("n_" + doc, _DOCS[doc]), user=alice))
    refused_by_the_database(app.query(h[read], Given(value), user=alice))


@pytest.mark.parametrize(("read", "value"), [("raw", 5), ("raw", "5"), ("whole", {"k": 5})])
def test_a_json_value_compared_as_it_is_is_refused(
    setup: tuple[App, dict[str, Any], User], read: str, value: object
) -> None:
    app, h, alice = setup
    _put(setup, "n_int")
    refused = failure_of(app.query(h[read], Given(value), user=alice), "internal_error")
    assert "raised StepRefused: the query compares the JSON value jr_doc.data" in refused.message
    assert "with .as_string(), .as_integer(), .as_float() or .as_boolean()" in refused.message
