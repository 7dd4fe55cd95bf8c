"""The canonical forms of the values ``Codec.encode(..., canonical=True)`` writes for a
``wait_for_event`` key: values equal under Python's ``==`` get one form, so that their
stored texts, compared by the database, are equal too (before, ``1`` and ``1.0``, or one
instant in two time zones, were equal keys whose runs waited until their timeout)."""

from __future__ import annotations

import datetime as dt
import sys
from decimal import Decimal
from typing import Any

from ._errors import StateError

__all__ = ["exact_number", "utc_instant", "utc_time_text"]


def exact_number(value: Decimal, tag: str) -> Any:
    """``value`` (a float is given here as its exact ``Decimal``) in one form per
    number: a whole number as a JSON int (``1``, ``1.0``, ``True``, ``Decimal("1.00")``
    alike, as a plain int key was always stored), any other as its shortest exact decimal
    text under ``tag`` (``0.5`` and ``Decimal("0.50")`` alike; ``0.1`` is not
    ``Decimal("0.1")``, as Python says).  A NaN equals nothing, itself neither: refused."""
    if value.is_nan():
        raise StateError("a NaN cannot be a key: it equals no value, itself neither")
    if value.is_infinite():
        return {tag: "decimal", "v": str(value)}
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    whole = "".join(map(str, digits))
    significant = whole.rstrip("0")
    if not significant:
        return 0  # -0.0 and Decimal("0E-9") equal 0
    exponent += len(whole) - len(significant)
    if exponent >= 0:
        room = sys.get_int_max_str_digits() or sys.maxsize
        if len(significant) + exponent <= room:  # else no int this long is stored either
            return int(("-" if sign else "") + significant + "0" * exponent)
    return {tag: "decimal", "v": str(Decimal((sign, tuple(map(int, significant)), exponent)))}


def utc_instant(value: dt.datetime) -> dt.datetime:
    """An aware ``value`` in UTC: aware datetimes compare as the instants they are.  One
    whose UTC reading is outside the calendar (``9999-12-31T23:00-05:00``) is refused: no
    datetime holds it."""
    if value.utcoffset() is None:
        return value  # naive: never equal to an aware one
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:
        raise StateError("an aware datetime whose UTC time is outside the years 1 to 9999 cannot be a key") from None


def utc_time_text(value: dt.time) -> str:
    """An aware ``value``'s text in UTC, as Python compares aware times: by the minutes
    past midnight less the offset's whole minutes, then seconds and microseconds (no wrap
    past midnight: ``01:00+05:00`` is no UTC time of the day, and equals ``02:00+06:00``
    only).  A naive one as written: it never equals an aware one."""
    offset = value.utcoffset()
    if offset is None:
        return value.isoformat()
    minutes = value.hour * 60 + value.minute - offset // dt.timedelta(minutes=1)
    if 0 <= minutes < 24 * 60:
        return value.replace(hour=minutes // 60, minute=minutes % 60, tzinfo=dt.UTC).isoformat()
    return f"{minutes}min{value.second:02}.{value.microsecond:06}+00:00"  # no clock time: its own text
