"""Values → JSON-safe values for event payloads (UUIDs, times, decimals, durations and bytes
as strings), and back for one column's type."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import enum
import re
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["JSON_KEYS", "KeyCollision", "Unjsonable", "bytes_from_text", "duration_from_text", "jsonable"]


class Unjsonable(TypeError):
    """A value :func:`jsonable` has no JSON form for (``value``: the first met)."""

    def __init__(self, value: object) -> None:
        super().__init__(f"cannot store a {type(value).__name__} in an event payload")
        self.value = value


class KeyCollision(Unjsonable):
    """A mapping two of whose keys JSON writes as one text (``{1: "a", "1": "b"}``,
    ``{None: 1, "null": 2}``): written, the later entry would silently replace the earlier
    (on both databases).  ``value``: the mapping; ``keys``: the two keys."""

    def __init__(self, mapping: Mapping[Any, Any]) -> None:
        super().__init__(mapping)
        self.keys = colliding_keys(mapping)


def colliding_keys(mapping: Mapping[Any, Any], text: Any = None) -> tuple[Any, Any]:
    """The first two keys of ``mapping`` whose text (``text(key)``; by default as
    :func:`jsonable` writes a key) is one.  Called only for a mapping known to hold two."""
    write = text or _text_of
    seen: dict[str, Any] = {}
    for key in mapping:
        written = write(key)
        if written in seen:
            return seen[written], key
        seen[written] = key
    raise AssertionError("no two keys of the mapping are written alike")


def _text_of(key: object) -> str:
    return key if type(key) is str else _key(key)


#: Stored as they are: JSON's own scalars (exactly these types; a subclass takes the checks below).
_AS_IS: frozenset[type[Any]] = frozenset({type(None), bool, int, float, str})


def jsonable(value: Any) -> Any:
    if type(value) in _AS_IS:  # the common case, without the isinstance chain
        return value
    if type(value) is dict:
        made = {k if type(k) is str else _key(k): jsonable(v) for k, v in value.items()}
        if len(made) != len(value):  # two keys of one text: the later would replace the earlier
            raise KeyCollision(value)
        return made
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (uuid.UUID, Decimal)):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return _duration(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, Mapping):
        made = {k if type(k) is str else _key(k): jsonable(v) for k, v in value.items()}
        if len(made) != len(value):
            raise KeyCollision(value)
        return made
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    raise Unjsonable(value)


def _key(key: object) -> str:
    """A mapping's key as text: an enum member by its value, as a value is stored (``str()``
    wrote a text enum's member as ``Size.S``, which no read gives back); ``None``, ``True``
    and ``False`` as JSON writes them (``null``, ``true``, ``false``), as a JSON column
    stores them (``str()`` wrote ``None``, so a row's document and its event's differed,
    and a webhook's body was not what ``json=`` posts); anything else as ``str()`` has
    always written it."""
    if isinstance(key, enum.Enum):
        return str(key.value)
    if key is None or isinstance(key, bool):
        return JSON_KEYS[key]
    return str(key)


#: How JSON writes the keys ``None``, ``True`` and ``False`` (``json.dumps`` as well).
JSON_KEYS: dict[object, str] = {None: "null", True: "true", False: "false"}


_MICROSECOND = dt.timedelta(microseconds=1)
_DURATION = re.compile(r"(-?)P(?:(\d+)D)?T(\d+)(?:\.(\d{1,6}))?S")


def _duration(value: dt.timedelta) -> str:
    """ISO 8601, exact to the microsecond (a float of seconds is not, past 285 years):
    ``P1DT3600.5S``, ``-PT0.000001S``."""
    micro = value // _MICROSECOND
    days, rest = divmod(abs(micro), 86_400_000_000)
    seconds, micro_part = divmod(rest, 1_000_000)
    fraction = f".{micro_part:06d}".rstrip("0") if micro_part else ""
    return f"{'-' if micro < 0 else ''}P{f'{days}D' if days else ''}T{seconds}{fraction}S"


def duration_from_text(text: str) -> dt.timedelta:
    """The inverse of the duration :func:`jsonable` writes."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a stored duration such as 'P1DT3600.5S'")
    sign, days, seconds, fraction = match.groups()
    value = dt.timedelta(days=int(days or 0), seconds=int(seconds), microseconds=int((fraction or "").ljust(6, "0")))
    return -value if sign else value


def bytes_from_text(text: str) -> bytes:
    """The inverse of the base64 text :func:`jsonable` writes for bytes."""
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError(f"{text[:20]!r} is not stored bytes (base64)") from None
