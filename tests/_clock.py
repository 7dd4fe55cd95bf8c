"""A clock the tests move by hand: ``App(clock=Clock(...))`` (DESIGN: the App takes one)."""

from __future__ import annotations

from datetime import datetime, timedelta


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)
