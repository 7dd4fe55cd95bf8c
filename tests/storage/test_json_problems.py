"""``json_problems``: every value a JSON column cannot take, with its path, in document
order — problems before, inside and after a nested container, at the depth limit, under
keys that are no strings; and a document without problems says nothing."""

from __future__ import annotations

from decimal import Decimal

from kumiko_typed._limits import json_problems

NUL = "must not contain NUL characters (U+0000)"
NAN = "must be a finite number (not NaN or infinity)"


def test_problems_come_in_document_order_with_their_paths() -> None:
    doc = {
        "a": "fine",
        "b": "bad\x00",
        "c": [1, {"d\x00": "not visited", "e": float("inf")}, ("x\x00",)],
        "f": Decimal("NaN"),
        7: "seven\x00",
        "g": {"h": [[True, 2**70, "\ud800"]]},
    }
    assert list(json_problems(doc)) == [
        ("$.b", NUL, "bad\x00"),
        ("$.c[1]", f"has a key that {NUL}", doc["c"][1]),  # the object holding it: a key is no field
        ("$.c[1].e", NAN, float("inf")),
        ("$.c[2][0]", NUL, "x\x00"),
        ("$.f", NAN, doc["f"]),
        ("$[7]", NUL, "seven\x00"),
        ("$.g.h[0][2]", "is not valid Unicode (it holds a lone surrogate)", "\ud800"),
    ]


def test_a_container_at_the_depth_limit_is_one_problem_and_its_siblings_are_still_read() -> None:
    deep = [["too deep\x00"]]
    doc = {"a": {"b": deep, "c": "after\x00"}, "d": "last\x00"}
    assert list(json_problems(doc, max_depth=2)) == [
        ("$.a.b", "is nested deeper than 2 levels", deep),
        ("$.a.c", NUL, "after\x00"),
        ("$.d", NUL, "last\x00"),
    ]
    assert list(json_problems(doc, max_depth=0)) == [("$", "is nested deeper than 0 levels", doc)]
    assert [p for p, _m, _v in json_problems(doc, max_depth=None)] == ["$.a.b[0][0]", "$.a.c", "$.d"]


def test_a_value_that_nests_nothing_and_a_clean_document() -> None:
    assert list(json_problems("x\x00", "$.root")) == [("$.root", NUL, "x\x00")]
    assert [m for _p, m, _v in json_problems(float("nan"))] == [NAN]
    assert list(json_problems({"$t": "dict", "v": {"n": 1, "l": [1.5, None, True, "é"], "e": {}}})) == []
    assert list(json_problems([])) == [] and list(json_problems(None)) == []


def test_a_document_nested_thousands_deep_is_no_recursion() -> None:
    doc: object = "bottom\x00"
    for _ in range(5000):
        doc = [doc]
    ((path, message, _value),) = json_problems(doc, max_depth=None)
    assert (path, message) == ("$" + "[0]" * 5000, NUL)


def test_as_written_a_value_json_dumps_cannot_write_is_a_problem_too() -> None:
    """A JSON column's document goes to ``json.dumps`` as it is; elsewhere such values are
    converted first, so only ``as_written`` names them."""
    from collections import OrderedDict
    from datetime import date
    from enum import Enum, StrEnum
    from types import MappingProxyType

    class Colour(Enum):
        RED = "red"

    class Tone(StrEnum):
        DARK = "dark"

    doc = {
        "d": Decimal("1.10"),
        "l": [date(2020, 1, 2), {1, 2}, b"ab"],
        "m": MappingProxyType({"x": 1}),
        "e": Colour.RED,
        "ok": [Tone.DARK, OrderedDict(a=1), (1, 2), {1: "int key", None: "null key"}],
        "k": {(1, 2): "tuple key"},
    }
    assert [(p, m.split(",")[0]) for p, m, _v in json_problems(doc, as_written=True)] == [
        ("$.d", "is of type Decimal"),
        ("$.l[0]", "is of type date"),
        ("$.l[1]", "is of type set"),
        ("$.l[2]", "is of type bytes"),
        ("$.m", "is of type mappingproxy"),
        ("$.e", "is of type Colour"),
        ("$.k", "has a key of type tuple"),
    ]
    ((_, said, _),) = json_problems(Decimal("2.5"), as_written=True)
    assert said.startswith("is of type Decimal, which is no JSON")
    assert list(json_problems(doc["d"])) == []  # converted elsewhere: no problem
