"""A workflow definition's fingerprint: the record of which definition a run started
under (``kumiko-typed runs`` shows it), and, with a stranded run, of the definition that
could not resume it.  Whether a run resumes is decided by :mod:`kumiko_typed._compat`.

It hashes only what that decision reads — the step tree's shape, each step's kind and
name, the event each ``wait_for_event`` waits for (its stored type name), and the
definition's explicit way across (``renamed``, ``fill``) — never code: a
changed resolver, a comment or another Python version gives the same fingerprint, and
so the same answer, in every worker process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ._steps import Step, WaitForEvent, walk

__all__ = ["fingerprint"]


def fingerprint(
    steps: Sequence[Step],
    builder: str,
    renamed: Mapping[str, str],
    fills: Iterable[str],
    event_name: Callable[[type[Any]], str],
) -> str:
    """The hash of every step's path, kind and name (and awaited event), and of the ways across."""
    out = [
        f"{path} {step.kind} {step.step_name!r}"
        + (f" {event_name(step.event)!r}" if isinstance(step, WaitForEvent) else "")
        for path, step, _inside in walk(steps, builder)
    ]
    out.extend(f"renamed {old!r} {new!r}" for old, new in sorted(renamed.items()))
    out.extend(f"fill {key!r}" for key in sorted(fills))
    return hashlib.sha256("\n".join(out).encode()).hexdigest()
