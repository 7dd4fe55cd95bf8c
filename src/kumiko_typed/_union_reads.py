"""Values an event holds in a field typed as a union of text and another type JSON stores
as text (``str | datetime``, a mapping keyed by one): stored, both are text, and the read
takes the member the union picks for text, so a datetime (a key too) given to
``str | datetime`` came back as its text, and every replay and trigger read an event
other than the one appended.  An append refuses it (``read_back_problems``), naming the
field, as it refuses a value a typed field would not read back at all."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from ._field_types import field_types
from ._limits import path_step
from ._unions import is_union

__all__ = ["changed_in_union"]

#: Per event class: whether any of its fields (or of the classes they hold) names a union
#: with a member that reads JSON's text as text.
_HOLDS_TEXT_UNION: dict[type[Any], bool] = {}


def changed_in_union(event: object, read: object) -> tuple[str, str] | None:
    """``(path, what)`` of the first value or key of ``event`` that ``read`` (the event as
    its stored JSON reads back) holds as text where it was not, or not as text where it
    was (``"a key of type datetime, read back as text"``), or ``None``."""
    cls = type(event)
    holds = _HOLDS_TEXT_UNION.get(cls)
    if holds is None:
        holds = _HOLDS_TEXT_UNION[cls] = any(
            is_union(t) and any(_reads_text(m) for m in typing.get_args(t)) for _owner, _field, t in field_types([cls])
        )
    return _first_change(event, read) if holds else None


def _reads_text(member: Any) -> bool:
    if typing.get_origin(member) is Literal:
        return any(isinstance(v, str) for v in typing.get_args(member))
    return member is Any or (isinstance(member, type) and issubclass(member, str))


def _first_change(given: object, read: object) -> tuple[str, str] | None:
    """Down both values together, in order (iterative: nesting has no limit here)."""
    stack: list[tuple[str, object, object]] = [("$", given, read)]
    while stack:
        where, a, b = stack.pop()
        if isinstance(a, str) != isinstance(b, str):
            return where, f"a value of type {type(a).__name__}, read back as {_kind(b)}"
        pairs: list[tuple[str, object, object]] = []
        cls: Any = type(a)
        if attrs.has(cls) and cls is type(b):
            pairs = [(f"{where}.{f.name}", getattr(a, f.name), getattr(b, f.name)) for f in attrs.fields(cls)]
        elif isinstance(a, Mapping) and isinstance(b, Mapping) and len(a) == len(b):
            for key, back in zip(a, b, strict=True):  # JSON keeps an object's keys in order
                if isinstance(key, str) != isinstance(back, str):
                    return where, f"a key of type {type(key).__name__}, read back as {_kind(back)}"
                pairs.append((where + path_step(key), a[key], b[back]))
        elif isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
            pairs = [(f"{where}[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b, strict=True))]
        stack.extend(reversed(pairs))
    return None


def _kind(value: object) -> str:
    return "text" if isinstance(value, str) else f"a {type(value).__name__}"
