"""A feature's, handler's, query's or workflow's name that rows, logs and the command line
cannot carry is a ``BootError`` naming it and why.  Before, every one of these booted: an
empty name (``"shop:"``), a line break (a log record or a ``runs`` table row broken in
two), blanks at its ends (a name no one types back), a full name longer than the
framework's ``String(400)`` columns (PostgreSQL refused the first run or outbox row), and a
feature ``a:b`` whose handler ``c`` was the same full name as feature ``a``'s ``b:c``."""

from __future__ import annotations

import attrs
import pytest

from kumiko_typed import App, BootError, Feature, manual, ok


@attrs.frozen
class P:
    x: int


def _problems(*features: Feature[str]) -> list[str]:
    with pytest.raises(BootError) as raised:
        App(list(features), database_url="sqlite://")
    return raised.value.problems


def _handler(feature: str, name: str) -> Feature[str]:
    f = Feature(feature)
    f.write_handler(name, f.pipeline(P).return_(lambda c: ok(1)))
    return f


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "a feature name must not be empty"),
        ("shop\nx", "a feature name must not contain line breaks or other control characters"),
        (" shop", "a feature name must not begin or end with blanks"),
        (
            "shop:eu",
            "a feature name must not contain ':': it separates the feature from a handler's name (feature:name)",
        ),
    ],
)
def test_a_feature_name_rows_and_logs_cannot_carry_is_refused(name: str, problem: str) -> None:
    assert _problems(_handler(name, "h")) == [f"feature {name!r}: {problem}"]


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "a handler name must not be empty"),
        ("place\r\norder", "a handler name must not contain line breaks or other control characters"),
        ("place\x00", "a handler name must not contain line breaks or other control characters"),
        ("place ", "a handler name must not begin or end with blanks"),
        ("p" * 200, "a handler's full name (feature:name) must be at most 200 characters, not 205"),
    ],
)
def test_a_handler_name_rows_and_logs_cannot_carry_is_refused(name: str, problem: str) -> None:
    assert _problems(_handler("shop", name)) == [f"handler {'shop:' + name!r}: {problem}"]


def test_a_name_that_is_not_a_string_is_refused_naming_its_type() -> None:
    # Names read from configuration or built by code mypy does not see: the message says
    # what was given, not a type the caller never passed.
    assert _problems(_handler(7, "h")) == ["feature 7: a feature name must be a string, not int"]  # type: ignore[arg-type]
    assert _problems(_handler("shop", None)) == [  # type: ignore[arg-type]
        "handler 'shop:None': a handler name must be a string, not NoneType"
    ]


def test_a_query_and_a_workflow_name_are_checked_alike() -> None:
    f = Feature("shop")
    f.query_handler("", f.query_pipeline(P).return_(lambda c: ok(1)))
    f.workflow("tick\n", trigger=manual(P), pipeline=f.workflow_pipeline(P).compute("x", lambda c: 1))
    assert _problems(f) == [
        "query 'shop:': a query name must not be empty",
        "workflow 'shop:tick\\n': a workflow name must not contain line breaks or other control characters",
    ]


@pytest.mark.parametrize("name", ["product:create", "place order", "bestellen-ä", "orders/place", "p" * 195])
def test_names_people_give_boot(name: str) -> None:
    app = App([_handler("shop", name)], database_url="sqlite://")
    assert f"shop:{name}" in app.handlers
    app.dispose()
