"""Values → JSON-safe values for event payloads (UUIDs, times and decimals as strings)."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["jsonable"]


#: Stored as they are: JSON's own scalars (exactly these types; a subclass takes the checks below).
_AS_IS: frozenset[type[Any]] = frozenset({type(None), bool, int, float, str})


def jsonable(value: Any) -> Any:
    if type(value) in _AS_IS:  # the common case, without the isinstance chain
        return value
    if type(value) is dict:
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (uuid.UUID, Decimal)):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    raise TypeError(f"cannot store a {type(value).__name__} in an event payload")
