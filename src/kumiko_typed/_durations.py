"""ISO-8601 durations (``P1D``, ``PT30M``, ``P1DT2H``, ``P2W``) as ``timedelta``.

Years and months are refused: their length depends on the date, and a wait's
length must not.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import timedelta

__all__ = ["as_timedelta", "parse_duration", "positive_seconds"]

_DURATION = re.compile(
    r"^P(?:(?P<weeks>\d+(?:\.\d+)?)W)?(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


@functools.lru_cache(maxsize=256)  # a wait step's duration is parsed at every run it suspends
def parse_duration(text: str) -> timedelta:
    match = _DURATION.match(text.strip().upper())
    if match is None or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ValueError(
            f"{text!r} is not an ISO-8601 duration such as 'PT30M', 'P1D' or 'P1DT12H' (years and months are refused)"
        )
    parts = {k: float(v) for k, v in match.groupdict().items() if v is not None}
    try:
        return timedelta(**parts)
    except OverflowError:  # else a bare "Python int too large to convert to C int" out of App(...)
        raise ValueError(f"{text!r} is longer than the longest duration, {timedelta.max.days} days") from None


def as_timedelta(value: timedelta | str) -> timedelta:
    return value if isinstance(value, timedelta) else parse_duration(value)


def positive_seconds(value: object) -> bool:
    """A number of seconds to sleep for: an int or float, finite and above 0 (no bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0
