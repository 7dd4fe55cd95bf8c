"""Errors raised to the developer (not to the caller of a handler)."""

from __future__ import annotations

from collections.abc import Sequence


class ProgramError(Exception):
    """A step was asked for something the framework never does (a wrong argument, an
    unregistered class).  Its message is the framework's own, built from the program's
    names (classes, columns, step kinds), never from data: a ``Failure`` may show it,
    where any other exception's text goes to the log only."""


class BootError(Exception):
    """The App's boot validation found problems; ``problems`` lists every one of them."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        listing = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the app definition:\n{listing}")


class StepRefused(ProgramError, ValueError):
    """A step was asked to do something it never does (an unbounded delete...)."""


class UnregisteredError(ProgramError, LookupError):
    """An entity or event class used by a step that no feature of the App registered."""


class UnscopedRead(StepRefused):
    """A select reads an entity's table around the tenant filter."""


class StateError(TypeError):
    """A value cannot be stored (or a stored one cannot be read back)."""
