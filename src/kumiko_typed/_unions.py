"""Payload fields typed as a union (``int | str``, ``Money | Percent | None``).

JSON says which kind of value arrived (null, boolean, integer, number, string, array,
object), so a union is decided by that first: only the members that can take that kind
are tried, a member whose own kind is exactly the value's before the others (``1`` is
``int`` in ``float | int``), then in the order the field's annotation writes them. The
first member that structures the value wins. cattrs alone takes only unions of attrs
classes and refuses ``int | str`` at every call; its miss is worded for Python, not for
the client who sent the JSON.
"""

from __future__ import annotations

import datetime as dt
import types
from collections import abc
from collections.abc import Callable, Mapping
from decimal import Decimal
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin
from uuid import UUID

import attrs

from ._field_checks import json_type

__all__ = ["is_mixed_union", "is_union", "union_hook"]

Structure = Callable[[Any, Any], Any]

_NONE = type(None)
_ARRAY = frozenset({"array"})
_OBJECT = frozenset({"object"})
_EVERY = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})
# A member's kinds; the first one is its own (an exact match is tried first).
_SCALARS: dict[Any, tuple[str, ...]] = {
    _NONE: ("null",),
    bool: ("boolean",),
    int: ("integer",),
    float: ("number", "integer"),
    str: ("string",),
    UUID: ("string",),
    dt.datetime: ("string",),
    dt.date: ("string",),
    Decimal: ("string", "integer", "number"),
}
_LITERAL: Any = Literal
_ABSTRACT_ARRAYS = frozenset({abc.Sequence, abc.MutableSequence, abc.Collection, abc.Iterable, abc.Set, abc.MutableSet})
_SAID = {
    "null": "null",
    "boolean": "true or false",
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "array": "an array",
    "object": "a JSON object",
}


def _kind(value: object) -> str:
    """:func:`json_type`, telling an integer from another number (``1`` fits ``int``, ``1.5`` does not)."""
    kind = json_type(value)
    return "integer" if kind == "number" and isinstance(value, int) else kind


def is_union(t: Any) -> bool:
    return get_origin(t) in (Union, types.UnionType)


def is_mixed_union(t: Any) -> bool:
    """A union cattrs' ``Optional`` handling does not cover: two or more members besides ``None``."""
    return is_union(t) and len([m for m in get_args(t) if m is not _NONE]) >= 2


def _kinds(member: Any) -> tuple[str, ...]:
    origin = get_origin(member) or member
    if origin in _SCALARS:
        return _SCALARS[origin]
    if origin is _LITERAL:
        return tuple(dict.fromkeys(_kind(v.value if isinstance(v, Enum) else v) for v in get_args(member)))
    if isinstance(origin, type) and issubclass(origin, Enum):
        return tuple(dict.fromkeys(_kind(m.value) for m in origin))
    if isinstance(origin, type) and issubclass(origin, (str, int, float)):  # NewType bases, str subclasses
        return _kinds(next(b for b in (str, float, int) if issubclass(origin, b)))
    if (isinstance(origin, type) and issubclass(origin, Mapping)) or attrs.has(origin):
        return tuple(_OBJECT)
    if isinstance(origin, type) and issubclass(origin, (list, tuple, set, frozenset)):
        return tuple(_ARRAY)
    if origin in _ABSTRACT_ARRAYS:
        return tuple(_ARRAY)
    return tuple(_EVERY)  # Any or a type with its own hook: let it judge


def _literal_fields_match(member: Any, value: Mapping[str, Any]) -> bool:
    """Every ``Literal`` field of the attrs class ``member`` that ``value`` carries has one of its values."""
    cls = get_origin(member) or member
    if not attrs.has(cls):
        return False
    tags = [f for f in attrs.fields(cls) if get_origin(f.type) is _LITERAL and f.name in value]
    return bool(tags) and all(value[f.name] in get_args(f.type) for f in tags)


def union_hook(t: Any, structure_as: Callable[[Any, Any], Any], invalid: Callable[[str], Exception]) -> Structure:
    """The hook for the union ``t``: ``structure_as(value, member)`` structures with the
    converter's own hook for a member; ``invalid(message)`` is the error for a miss."""
    members = get_args(t)
    kinds = {m: _kinds(m) for m in members}
    wanted = " or ".join(dict.fromkeys(_SAID.get(kinds[m][0], "any value") for m in members))

    def candidates(kind: str) -> list[Any]:
        fitting = [m for m in members if kind in kinds[m]]
        return sorted(fitting, key=lambda m: kinds[m][0] != kind)  # stable: exact first, then as written

    def hook(value: object, _: object) -> object:
        kind = _kind(value)
        tried = candidates(kind)
        if not tried:
            raise invalid(f"expected {wanted}, got {json_type(value)}")
        failures: list[tuple[Any, Exception]] = []
        for member in tried:
            if member is _NONE:
                return None
            try:
                return structure_as(value, member)
            except Exception as exc:  # a member's validators may raise anything
                failures.append((member, exc))
        if len(failures) == 1:
            raise failures[0][1]
        if isinstance(value, Mapping):
            # Objects: the class whose Literal tag fields the value matches says what was wrong.
            tagged = [exc for member, exc in failures if _literal_fields_match(member, value)]
            if len(tagged) == 1:
                raise tagged[0]
        raise invalid(f"expected {wanted}; the {json_type(value)} given fits none of the types that take one")

    return hook
