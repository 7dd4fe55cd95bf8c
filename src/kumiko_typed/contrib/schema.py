"""JSON Schema (draft 2020-12) of attrs payload classes, for clients of ``dispatch_json``.

The schema follows the App's structuring rules (``kumiko_typed._structuring``): strings,
integers and booleans are not converted into one another, unknown fields are refused,
UUIDs, dates and datetimes are strings, a ``Decimal`` is a decimal string or a number, an
``Enum`` is one of its values, a ``Literal`` one of its values.  It describes what to
send; the App's own validation stays the authority for what JSON Schema cannot say (an
attrs validator, an integer written as ``1.0``, a datetime without a UTC offset).
"""

from __future__ import annotations

import datetime as dt
import enum
import inspect
import types
import typing
from collections import abc
from decimal import Decimal
from typing import Any, Final, Literal, Union
from uuid import UUID

import attrs

from .._structuring import DECIMAL_TEXT

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"

#: A decimal as a string ("12.50", "-1e3"), exactly the text the App reads; a JSON number
#: is accepted as well.  ``(?![\s\S])``, not ``$``: Python's ``$`` also matches before a final
#: newline, which the App refuses.
_DECIMAL_PATTERN: Final = f"^{DECIMAL_TEXT}(?![\\s\\S])"

#: Base64 as the App reads it (padded, no line breaks): contentEncoding alone is no check.
#: ``(?![\s\S])``, not ``$`` alone: Python's ``$`` also matches before a final newline.
_BASE64_PATTERN: Final = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?(?![\s\S])"

_SCALARS: Final[dict[Any, dict[str, Any]]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    UUID: {"type": "string", "format": "uuid"},
    dt.datetime: {"type": "string", "format": "date-time"},
    dt.date: {"type": "string", "format": "date"},
    Decimal: {"type": ["string", "number"], "pattern": _DECIMAL_PATTERN},
    bytes: {"type": "string", "contentEncoding": "base64", "pattern": _BASE64_PATTERN},
    type(None): {"type": "null"},
}
_ARRAYS: Final = frozenset({list, abc.Sequence, abc.MutableSequence, abc.Collection, abc.Iterable})
_SETS: Final = frozenset({set, frozenset, abc.Set, abc.MutableSet})
_OBJECTS: Final = frozenset({dict, abc.Mapping, abc.MutableMapping})


def payload_schema(cls: type[Any]) -> dict[str, Any]:
    """The JSON Schema document of the attrs class ``cls``.

    Its fields are the properties (those without a default are required, no others are
    allowed); nested attrs classes are ``$defs`` referenced by ``$ref``, so a recursive
    class is described too."""
    if not attrs.has(cls):
        raise TypeError(f"payload_schema needs an attrs class, not {cls!r}")
    builder = _Builder(cls)
    document: dict[str, Any] = {"$schema": DIALECT, **builder.object_schema(cls)}
    if builder.defs:
        document["$defs"] = builder.defs
    return document


class _Builder:
    def __init__(self, root: type[Any]) -> None:
        self.root = root
        self.names: dict[type[Any], str] = {}
        self.defs: dict[str, dict[str, Any]] = {}

    def object_schema(self, cls: type[Any]) -> dict[str, Any]:
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except (NameError, TypeError):  # an unresolvable annotation is described as "anything"
            hints = {}
        properties: dict[str, Any] = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            if not field.init:
                continue
            prop = self.schema(hints.get(field.name, field.type))
            if field.default is attrs.NOTHING:
                required.append(field.name)
            elif isinstance(field.default, (str, int, float, bool, type(None))):
                prop = {**prop, "default": field.default}
            properties[field.name] = prop
        out: dict[str, Any] = {"title": cls.__name__}
        doc = cls.__dict__.get("__doc__")
        if isinstance(doc, str) and doc.strip():
            out["description"] = inspect.cleandoc(doc).split("\n\n")[0]
        out |= {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
        return out

    def ref(self, cls: type[Any]) -> dict[str, Any]:
        if cls is self.root:
            return {"$ref": "#"}
        name = self.names.get(cls)
        if name is None:
            name = cls.__name__ if cls.__name__ not in self.defs else f"{cls.__module__}.{cls.__qualname__}"
            self.names[cls] = name
            self.defs[name] = {}  # reserved first: a class that refers to itself ends here
            self.defs[name] = self.object_schema(cls)
        return {"$ref": f"#/$defs/{name}"}

    def schema(self, t: Any) -> dict[str, Any]:
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin is typing.Annotated:
            return self.schema(args[0])
        if isinstance(t, typing.NewType):
            return self.schema(t.__supertype__)
        if origin in (Union, types.UnionType):
            return {"anyOf": [self.schema(arg) for arg in args]}
        if origin is Literal:
            return {"enum": [v.value if isinstance(v, enum.Enum) else v for v in args]}
        if isinstance(t, type) and issubclass(t, enum.Enum):
            return {"title": t.__name__, "enum": [member.value for member in t]}
        if isinstance(t, type) and attrs.has(t):
            return self.ref(t)
        if t in _SCALARS:
            return dict(_SCALARS[t])
        return self.container(origin or t, args)

    def container(self, origin: Any, args: tuple[Any, ...]) -> dict[str, Any]:
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            items = [self.schema(arg) for arg in args]
            return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items)}
        if origin in _ARRAYS or origin in _SETS or origin is tuple:  # a set's duplicates merge, not refused
            return {"type": "array", "items": self.schema(args[0]) if args else {}}
        if origin in _OBJECTS:
            return {"type": "object", "additionalProperties": self.schema(args[1]) if len(args) == 2 else {}}
        return {}  # Any, object, or a type the App's converter alone knows
