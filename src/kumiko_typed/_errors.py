"""Errors raised to the developer (not to the caller of a handler)."""

from __future__ import annotations

from collections.abc import Sequence


class BootError(Exception):
    """The App's boot validation found problems; ``problems`` lists every one of them."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        listing = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the app definition:\n{listing}")
