"""A clock a test moves by hand: ``App(clock=FakeClock())``; timers, retries and cron ticks
come due when the test says, not after a sleep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["DEFAULT_START", "FakeClock"]

#: Where a FakeClock starts unless told otherwise: a fixed, aware moment (a Monday).
DEFAULT_START = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)


def _aware(moment: datetime) -> datetime:
    # The App stores and compares aware times; a naive one would be read as local time.
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"FakeClock needs a time-zone-aware datetime, got {moment!r}")
    return moment


class FakeClock:
    """Callable as the App's ``clock=``: returns :attr:`now`, which only the test changes."""

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        self._now = _aware(start)

    def __call__(self) -> datetime:
        return self._now

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()})"

    @property
    def now(self) -> datetime:
        return self._now

    @now.setter
    def now(self, moment: datetime) -> None:
        self._now = _aware(moment)

    def advance(self, delta: timedelta = timedelta(0), /, **parts: float) -> datetime:
        """Move forward by ``delta`` plus ``timedelta(**parts)`` (``advance(hours=1)``); returns
        the new time.  Backwards is refused: set :attr:`now` to go back on purpose."""
        given: object = delta  # what a caller without mypy passed
        if not isinstance(given, timedelta):
            # A bare number has no unit: timedelta's own error ("unsupported operand
            # type(s) for +: 'float' and 'datetime.timedelta'") did not say what to pass.
            seconds = repr(given) if isinstance(given, (int, float)) and not isinstance(given, bool) else "..."
            raise TypeError(
                f"FakeClock.advance takes a timedelta or units by keyword, not {type(given).__name__} "
                f"{given!r}: advance(timedelta(seconds={seconds})) or advance(seconds={seconds})"
            )
        step = delta + timedelta(**parts)
        if step < timedelta(0):
            raise ValueError(f"FakeClock.advance moves forward only, not by {step}")
        self._now += step
        return self._now
