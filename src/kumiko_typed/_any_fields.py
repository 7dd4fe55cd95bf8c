"""Values an event holds in a field typed ``Any``: stored as JSON, they are read back as
the JSON they became — a ``Decimal``, a UUID, bytes or a datetime as text, a tuple as a
list, an integer key as text — so the event a replay or a trigger reads is not the one
appended (a naive datetime, refused in a ``datetime`` field, was stored as text).  An
append refuses them (``read_back_problems``), as it refuses a value a typed field would
not read back; JSON's own values (``None``, booleans, numbers, text, lists and dicts of
them keyed by text) come back as they were, so those fields keep working."""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from ._field_types import field_types
from ._limits import path_step
from ._unions import is_union

__all__ = ["changed_under_any"]

#: Per event class: whether any of its fields (or of the classes they hold) names ``Any``.
_HOLDS_ANY: dict[type[Any], bool] = {}
#: A class's resolved annotations, resolved once: an append walks its event's classes each time.
_hints: Final = functools.cache(typing.get_type_hints)
#: JSON's scalars, exactly these types (an enum member or a subclass comes back as its base).
_SCALARS: Final = frozenset({type(None), bool, int, float, str})
#: Containers named without their items' type: those items are ``Any``.
_BARE: Final = frozenset({list, dict, tuple, set, frozenset})


def changed_under_any(event: object) -> tuple[str, str] | None:
    """``(path, what)`` of the first value (or key) under ``Any`` in ``event`` that JSON
    would not give back as it is (``"a value of type Decimal"``), or ``None``."""
    cls = type(event)
    holds = _HOLDS_ANY.get(cls)
    if holds is None:
        holds = _HOLDS_ANY[cls] = any(t is Any or t in _BARE for _owner, _field, t in field_types([cls]))
    if not holds:
        return None
    return next(_changed(event, cls, "$"), None)


def _changed(value: object, t: Any, path: str) -> Iterator[tuple[str, str]]:
    """Down ``value`` along its type ``t``, to the values under ``Any``."""
    if t is Any:
        yield from _not_json(value, path)
        return
    if is_union(t):
        for member in typing.get_args(t):
            origin = typing.get_origin(member) or member
            if member is Any or (isinstance(origin, type) and isinstance(value, origin)):
                yield from _changed(value, member, path)
                return
        return
    origin, args = typing.get_origin(t) or t, typing.get_args(t)
    cls: Any = type(value)
    if attrs.has(cls):
        hints = _hints(cls)
        for field in attrs.fields(cls):
            yield from _changed(getattr(value, field.name), hints.get(field.name), f"{path}.{field.name}")
    elif isinstance(value, Mapping):
        keys, items = args if len(args) == 2 else (Any, Any)
        for key, item in value.items():
            if keys is Any and type(key) is not str:
                yield path, f"a key of type {type(key).__name__}"
            yield from _changed(item, items, path + path_step(key))
    elif isinstance(value, (list, tuple, set, frozenset)):
        args = args or (Any,)
        fixed = origin is tuple and args[-1] is not Ellipsis
        for i, item in enumerate(value):
            yield from _changed(item, args[i] if fixed and i < len(args) else args[0], f"{path}[{i}]")


def _not_json(value: object, path: str) -> Iterator[tuple[str, str]]:
    """The first value in ``value`` that is not JSON's own (iterative: nesting has no limit here)."""
    stack = [(path, value)]
    while stack:
        where, each = stack.pop()
        if type(each) in _SCALARS:
            continue
        if type(each) is list:
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(each))))
        elif type(each) is dict:
            for key in each:
                if type(key) is not str:
                    yield where, f"a key of type {type(key).__name__}"
                    return
            stack.extend((where + path_step(key), item) for key, item in reversed(list(each.items())))
        else:
            yield where, f"a value of type {type(each).__name__}"
            return
