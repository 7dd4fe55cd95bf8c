"""ISO-8601 durations (``P1D``, ``PT30M``, ``P1DT2H``, ``P2W``) as ``timedelta``.

The grammar and its refusals are the rule table's (``_rules.DURATION``), which the mypy
plugin reads too: a literal text that is no duration is an error there as at boot.
"""

from __future__ import annotations

import functools
import math
from datetime import timedelta

from ._rules import DURATION, duration_problem

__all__ = ["as_timedelta", "parse_duration", "positive_seconds"]


@functools.lru_cache(maxsize=256)  # a wait step's duration is parsed at every run it suspends
def parse_duration(text: str) -> timedelta:
    problem = duration_problem(text)
    match = DURATION.match(text.strip().upper())
    if problem is not None or match is None:
        raise ValueError(problem)
    return timedelta(**{k: float(v) for k, v in match.groupdict().items() if v is not None})


def as_timedelta(value: timedelta | str) -> timedelta:
    return value if isinstance(value, timedelta) else parse_duration(value)


def positive_seconds(value: object) -> bool:
    """A number of seconds to sleep for: an int or float, finite and above 0 (no bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0
