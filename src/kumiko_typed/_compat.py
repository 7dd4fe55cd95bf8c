"""Whether a stored run can resume under the definition deployed now, and how.

A run stopped at path P resumes when P still leads to a step of the kind it stopped
at (steps are found by name, :func:`~kumiko_typed._steps.address`; one without a name,
by its order among as many unnamed siblings as the run stored), every key this
definition sets in ``c.steps`` before P and every loop item in ``c.scope`` around P was
stored (or the definition fills it), and every loop around P has its stored record.
What else changed — resolvers, steps after P, keyless steps before it — does not
matter.  The answer depends only on the definition's step tree and on the run's
(path, kind, stored keys), so :meth:`Compat.plan` caches it per such group: a worker
and ``kumiko-typed check`` decide a hundred thousand runs of a few groups at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from . import _rules
from ._lazy_parts import paging
from ._serialization import TAG
from ._steps import (
    ForEach,
    Located,
    NamedStep,
    Path,
    Step,
    WaitForEvent,
    locate,
    name_part,
    part_label,
    unnamed_fix,
    unnamed_siblings,
    walk,
)

__all__ = ["SIBLINGS", "SUSPENDING", "Compat", "Plan", "Stored", "Unreadable", "across_problems", "ambiguous_names"]

#: Decisions a definition keeps at most (a worker's lifetime sees many loop iterations).
_CACHED: Final = 10_000
#: The steps a run can be suspended at.
SUSPENDING: Final = frozenset({"workflow.wait", "workflow.wait_for_event", "workflow.retry"})


class Unreadable(ValueError):
    """A stored run whose state has not the shape a worker writes (damaged, or written by
    hand): the worker fails it, and the pre-deploy check reports it, with this reason."""

    def __init__(self, why: str) -> None:
        super().__init__(f"the stored state cannot be read: {why}")


@attrs.frozen
class Stored:
    """What a decision reads of a stored run.  ``kind`` is ``None`` and ``named`` false
    for a run stored before paths named their steps (its path counts by index);
    ``event`` is the type name of the event a ``wait_for_event`` waits for (``None``
    for other steps, and for a run stored before it was kept).  ``siblings``: per level
    of the path, how many unnamed steps of one method stood beside the path's step
    there (:func:`~kumiko_typed._steps.unnamed_siblings`), ``None`` for a run stored
    before it was kept or whose path names every step."""

    path: str
    kind: str | None
    values: frozenset[str]
    scope: frozenset[str]
    loops: frozenset[str]
    named: bool
    event: str | None = None
    siblings: tuple[int | None, ...] | None = None

    @classmethod
    def of(cls, path: object, state: object) -> Stored:
        """Reads only the keys of the stored values (never the values themselves), and
        checks the shape of everything a resumed segment reads before its steps run:
        :class:`Unreadable` says what is wrong (by JSON types, never a stored value).
        ``_run_check``'s SQL filter of well-formed states mirrors these checks."""
        if not isinstance(path, str):
            raise Unreadable("the run is suspended without a stored path")
        if not isinstance(state, Mapping):
            raise Unreadable(f"it is {_json_type(state)}, not an object")
        text = {key: _text(state, key) for key in ("kind", "addressing", "event")}
        loops = state.get("loops", {})
        if not isinstance(loops, Mapping):
            raise Unreadable(f'"loops" is {_json_type(loops)}, not an object')
        for where, record in loops.items():
            paged = isinstance(record, Mapping) and "pages" in record and "items" not in record
            if not isinstance(record, Mapping) or not record.keys() >= (_PAGED_RECORD if paged else _LOOP_RECORD):
                raise Unreadable(f"the loop record at {where} is not an object of {', '.join(sorted(_LOOP_RECORD))}")
            if paged:
                try:
                    paging(record)
                except ValueError as exc:
                    raise Unreadable(f"at {where}: {exc}") from None
            elif not isinstance(record["items"], list):
                raise Unreadable(f"the items of the loop at {where} are {_json_type(record['items'])}, not an array")
        if not isinstance(state.get("retries", {}), Mapping):
            raise Unreadable(f'"retries" is {_json_type(state["retries"])}, not an object')
        siblings = state.get(SIBLINGS)
        if siblings is not None and not (
            isinstance(siblings, list) and all(n is None or type(n) is int for n in siblings)
        ):
            raise Unreadable(f'"{SIBLINGS}" is {_json_type(siblings)}, not an array of counts')
        keys = (_keys(state, "values"), _keys(state, "scope"), loops)
        return cls.of_keys(path, text["kind"], text["addressing"], text["event"], *keys, siblings)

    @classmethod
    def of_keys(
        cls,
        path: str,
        kind: str | None,
        addressing: str | None,
        event: str | None,
        values: Iterable[str],
        scope: Iterable[str],
        loops: Iterable[str],
        siblings: Iterable[int | None] | None = None,
    ) -> Stored:
        """From the parts of a state of the right shape (the check on PostgreSQL reads
        them in the server, from the states its filter finds of that shape)."""
        named = addressing == "name"
        counts = None if siblings is None else tuple(siblings)
        return cls(path, kind, frozenset(values), frozenset(scope), frozenset(loops), named, event, counts)


#: The member of a suspended run's state counting the unnamed siblings on its path.
SIBLINGS: Final = "siblings"
#: What a stored loop record holds (``ForEach.resume`` reads each).
_LOOP_RECORD: Final = frozenset({"items", "shadows", "shadowed"})
#: One whose items are stored as pages (``_lazy_parts``), which ``pages`` names and counts.
_PAGED_RECORD: Final = frozenset({"pages", "shadows", "shadowed"})


def _json_type(value: object) -> str:
    """A stored value's JSON type (never the value: it may be anything, and long)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _text(state: Mapping[str, Any], key: str) -> str | None:
    value = state.get(key)
    if value is not None and not isinstance(value, str):
        raise Unreadable(f'"{key}" is {_json_type(value)}, not a string')
    return value


def _keys(state: Mapping[str, Any], key: str) -> frozenset[str]:
    """The keys of a codec-encoded dict (``{TAG: "dict", "v": {...}}``) stored at ``key``."""
    if key not in state:
        return frozenset()
    encoded = state[key]
    inner = encoded.get("v") if isinstance(encoded, Mapping) and encoded.get(TAG) == "dict" else None
    if not isinstance(inner, Mapping):
        raise Unreadable(f'"{key}" is not an encoded dict of values')
    return frozenset(inner)


@attrs.frozen
class Plan:
    """How a compatible run resumes: its path by index in this definition, its loop
    records' keys by index, and the stored keys renamed (old → new) and to fill."""

    path: Path
    loops: Mapping[str, str]
    renamed: Mapping[str, str]
    fills: tuple[str, ...]


class Compat:
    """One definition's resume rule (with its explicit way across: ``renamed`` step
    names and ``fill`` functions for keys a run did not store)."""

    def __init__(
        self,
        steps: Sequence[Step],
        builder: str,
        renamed: Mapping[str, str],
        fill: Mapping[str, Callable[[Mapping[str, object]], object]],
        event_name: Callable[[type[Any]], str],
    ) -> None:
        self.steps = steps
        #: The stored type name of an event class (what a suspended run notes it waits for).
        self.event_name = event_name
        self.builder = builder
        self.renamed = dict(renamed)
        self.fill = dict(fill)
        self._cache: dict[Stored, Plan | str] = {}

    def plan(self, stored: Stored) -> Plan | str:
        """The plan, or the exact reason the run cannot resume under this definition."""
        answer = self._cache.get(stored)
        if answer is None:
            if len(self._cache) >= _CACHED:  # loop iterations make paths many: stay bounded
                self._cache.clear()
            answer = self._cache[stored] = self._decide(stored)
        return answer

    def rename(self, path: str) -> Path:
        """A stored path by name with the renamed steps given their new names."""
        parts = Path.parse(path).parts
        return Path(
            tuple(name_part(self.renamed[part_label(p)]) if part_label(p) in self.renamed else p for p in parts)
        )

    def _decide(self, stored: Stored) -> Plan | str:
        try:
            at = locate(
                self.steps, self.rename(stored.path) if stored.named else Path.parse(stored.path), named=stored.named
            )
        except (LookupError, ValueError) as exc:
            return str(exc)
        moved = self._moved(stored, at)
        if moved is not None:
            return moved
        step = at.step
        if step.kind not in SUSPENDING:
            return f"{step.describe()} at {stored.path} is not a step a run waits in"
        if step.kind == "workflow.retry" and not at.by_index.parts[-1].startswith("#"):
            # A retry suspends between attempts only: its stored path ends in the next one.
            return f"{step.describe()} at {stored.path} has no attempt to resume (# and a number after it)"
        if stored.kind is not None and step.kind != stored.kind:
            return f"the step at {stored.path} is now {step.describe()}, the run waits in a {stored.kind} step"
        if isinstance(step, WaitForEvent) and stored.event is not None:
            awaited = self.event_name(step.event)
            if awaited != stored.event:
                return f"{step.describe()} at {stored.path} now waits for {awaited}, the run waits for {stored.event}"
        values = {self.renamed.get(k, k) for k in stored.values}
        scope = {self.renamed.get(k, k) for k in stored.scope}
        fills: list[str] = []
        for block, i in at.levels:
            for _path, earlier, _inside in walk(block[:i], self.builder):
                if isinstance(earlier, NamedStep) and earlier.name not in values:
                    if earlier.name not in self.fill:
                        return f'key "{earlier.name}" needed at {stored.path} was not stored'
                    fills.append(earlier.name)
        loops: dict[str, str] = {}
        for n, (block, i) in enumerate(at.levels[:-1]):
            outer = block[i]
            if not isinstance(outer, ForEach):
                continue
            if outer.item not in scope:
                return f'loop item "{outer.item}" needed at {stored.path} was not stored'
            end = at.ends[n]
            loops["/".join(Path.parse(stored.path).parts[:end])] = "/".join(at.by_index.parts[:end])
        missing = [stored_key for stored_key in loops if stored_key not in stored.loops]
        if missing:
            return f"the loop at {missing[0]} has no stored record"
        return Plan(at.by_index, loops, {k: v for k, v in self.renamed.items() if k in stored.values}, tuple(fills))

    def _moved(self, stored: Stored, at: Located) -> str | None:
        """Why an unnamed step on the path may not be the one the run stopped at: its
        siblings of that method, found by their order, are more or fewer now than when
        the run stored the path (one added or removed before it moves the run to another,
        and which of them was cannot be told).  A run stored before the count was kept
        resumes as before; a step renamed since (``renamed=``) is found by its name."""
        if stored.siblings is None or len(stored.siblings) != len(at.levels):
            return None
        now = unnamed_siblings(at)
        for level, (then, count) in enumerate(zip(stored.siblings, now, strict=True)):
            if then is None or count is None or then == count:
                continue
            part = part_label(at.by_name.parts[at.ends[level] - 1])
            method = part.partition("~")[0][1:]
            return (
                f"{part} at {stored.path} was one of {then} unnamed {method} steps there, and {count} are there"
                f" now: it may name another step than the one the run stopped at; {unnamed_fix(part)}"
            )
        return None


def across_problems(steps: Sequence[Step], builder: str, renamed: object, fill: object) -> list[str]:
    """What is wrong with a definition's ``renamed=`` and ``fill=`` (boot reports it)."""
    names = {step.step_name for _path, step, _inside in walk(steps, builder)}
    keys = {step.name for _path, step, _inside in walk(steps, builder) if isinstance(step, NamedStep)}
    out: list[str] = []
    if not isinstance(renamed, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in renamed.items()
    ):
        out.append("renamed= must map old step names to new ones (strings)")
    else:
        for old, new in renamed.items():
            if new not in names:
                out.append(_rules.msg_renamed_target(old, new))
            if old in names:
                out.append(_rules.msg_renamed_kept(old))
    if not isinstance(fill, Mapping):
        out.append("fill= must map keys to functions of the stored values")
    else:
        for key, fn in fill.items():
            if key not in keys:
                out.append(_rules.msg_fill_key(key))
            if not callable(fn):
                out.append(f'fill= for "{key}" must be a function of the stored values, not {type(fn).__name__}')
    return out


def ambiguous_names(steps: Sequence[Step], where: str = "") -> list[str]:
    """Sibling steps whose ``name=`` (a wait's, a branch's, a retry's) is the name of
    another step in the same block: a stored path names its step, and ``~2`` for the
    second of two would name the other one once the first is removed (boot reports it).
    Unnamed siblings of one method (``@wait``, ``@wait~2``) are allowed: naming them is
    what keeps them found across edits."""
    out: list[str] = []
    seen: dict[str, tuple[int, Step]] = {}
    for i, step in enumerate(steps):
        name = step.step_name
        if name:  # an empty name= is reported as such (boot's name checks)
            first = seen.setdefault(name, (i, step))
            if first[0] != i and (_by_argument(step) or _by_argument(first[1])):
                renamed = step if _by_argument(step) else first[1]  # a key has no name= to change
                a, b = f"{where}{first[0]} ({first[1].describe()})", f"{where}{i} ({step.describe()})"
                out.append(_rules.msg_ambiguous_name(a, b, name, renamed.kind))
        for label, child in step.children():
            out.extend(ambiguous_names(child.steps, f"{where}{i}/{label}/"))
    return out


def _by_argument(step: Step) -> bool:
    """Whether the step's name is its optional ``name=`` (not the key or loop item it sets)."""
    return step.step_name is not None and not isinstance(step, (NamedStep, ForEach))
