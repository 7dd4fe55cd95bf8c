"""The ``status=`` argument of the operator's listings (``app.runs``, ``app.outbox``):
one status or a collection of them, checked once for both."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["chosen_statuses"]


def chosen_statuses(
    status: object, known: Iterable[str], kind: str, hints: Mapping[str, str] | None = None
) -> tuple[str, ...] | None:
    """``status`` as a tuple without repeats (``None``: every status), each one of
    ``known``, the statuses of ``kind`` ("a run", "an outbox"); ``hints`` add a sentence
    to the refusal of a word users take for a status."""
    if status is None:
        return None
    chosen = (status,) if isinstance(status, str) else status
    wrong = f"status must be {kind} status or a collection of them"
    if not isinstance(chosen, Iterable):
        raise TypeError(f"{wrong}, not {type(status).__name__}")
    picked = tuple(dict.fromkeys(chosen))
    names = tuple(known)
    for one in picked:
        if not isinstance(one, str):
            raise TypeError(f"{wrong}, not {type(one).__name__} in it")
        if one not in names:
            hint = (hints or {}).get(one, "")
            raise ValueError(f"status {one!r} is not {kind} status; one of: {', '.join(names)}{hint}")
    if not picked:
        raise ValueError("status is empty: give one status or more, or None for every status")
    return picked
