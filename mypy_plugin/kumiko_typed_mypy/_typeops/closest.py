"""The keys closest to a misspelt one, said the same way in every message that suggests them."""

from __future__ import annotations

from collections.abc import Sequence
from difflib import get_close_matches


def did_you_mean(key: str, known: Sequence[str]) -> str | None:
    """``did you mean "a" or "b"?`` with the (at most three) closest of ``known`` by
    difflib's closeness (cutoff 0.6: see ``key_typos``); ``None`` when none is close."""
    closest = get_close_matches(key, known, n=3)
    return "did you mean " + " or ".join(f'"{k}"' for k in closest) + "?" if closest else None
