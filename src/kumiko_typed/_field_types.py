"""The types the fields of attrs classes name, recursively: one walk for the codec (which
classes a stored run may name) and for boot's checks of event classes (which field types
their stored JSON cannot give back)."""

from __future__ import annotations

import typing
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

__all__ = ["field_types"]


def field_types(roots: Iterable[type[Any]]) -> Iterator[tuple[type[Any], str, Any]]:
    """``(class, field, type)`` for each type named by a field of an attrs class of
    ``roots`` or of one they name: the field's annotation, then its arguments, depth first
    (``dict[bool, int]``, then ``bool`` and ``int``).  Each class is entered once; one whose
    annotations do not resolve is entered without its fields."""
    seen: set[type[Any]] = set()
    todo = [r for r in roots if attrs.has(r)]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # unresolvable annotations: the class, without its fields
            continue
        for field in attrs.fields(cls):
            stack = [hints.get(field.name, field.type)]
            while stack:
                t = stack.pop()
                yield cls, field.name, t
                stack.extend(reversed(typing.get_args(t)))
                origin = typing.get_origin(t) or t
                if attrs.has(origin) and origin not in seen:
                    todo.append(origin)
