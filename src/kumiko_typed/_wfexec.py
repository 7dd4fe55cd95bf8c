"""Running a workflow pipeline segment: from a stored path to the next suspension.

The handler interpreter runs a block start to end; a workflow must also stop in the
middle (``wait``, ``wait_for_event``, ``retry`` between attempts) and later continue
at exactly that place — inside a branch arm or a loop body, with the loop's items and
the step values it had.  ``Suspend`` unwinds to the driver, collecting the path on
the way out (``3/on_true/1``, ``2/do/#4/0``); resuming walks the same path in.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs

from ._durations import as_timedelta
from ._eventstore import last_position
from ._outbox_types import RetryPolicy
from ._results import Failure
from ._steps import Branch, ForEach, Retry, Step, StepCrash, Wait, WaitForEvent, run_block

if TYPE_CHECKING:
    from ._interpreter import Run
    from ._state import Codec

Result = Any


@attrs.frozen
class EventWait:
    """What a ``wait_for_event`` waits for: an event of ``event_type`` and ``tenant_id``
    whose key is ``key``, appended after ``after_position``, until ``timeout_at``."""

    event_type: str
    tenant_id: uuid.UUID
    key: str
    after_position: int
    timeout_at: datetime


class Suspend(Exception):
    """The run stops here until ``wake_at`` (and, for an event wait, a matching event)."""

    def __init__(self, path: list[str], wake_at: datetime, wait: EventWait | None = None) -> None:
        super().__init__("suspended")
        self.path = path
        self.wake_at = wake_at
        self.wait = wait


class RetryExhausted(Exception):
    """The last attempt of a ``retry`` failed: the run fails with its original error."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@attrs.define
class Segment:
    """The run state a segment reads and updates besides ``values`` and ``scope``."""

    loops: dict[str, dict[str, Any]]
    retries: dict[str, dict[str, Any]]
    resume_value: Any
    codec: Codec
    event_name: Any  # Callable[[type], str]


def run_steps(steps: tuple[Step, ...], run: Run, seg: Segment, start: list[str] | None, prefix: str) -> Result:
    first = int(start[0]) if start else 0
    for i in range(first, len(steps)):
        step = steps[i]
        rest = start[1:] if start and i == first else None
        try:
            result = _step(step, run, seg, rest, f"{prefix}{i}")
        except Suspend as suspend:
            suspend.path.insert(0, str(i))
            raise
        except StepCrash as crash:
            crash.path.insert(0, str(i))
            raise
        except RetryExhausted:
            raise
        except Exception as exc:
            raise StepCrash([str(i)], step, exc) from exc
        if result is not None:
            return result
    return None


def _inner(parts: list[str], call: Any) -> Result:
    try:
        return call()
    except (Suspend, StepCrash) as exc:
        exc.path[0:0] = parts
        raise


def _step(step: Step, run: Run, seg: Segment, rest: list[str] | None, here: str) -> Result:
    ctx = run.ctx
    if isinstance(step, Branch):
        if rest:
            arm, inner = rest[0], rest[1:]
        else:
            arm, inner = ("on_true" if step.when(ctx) else "on_false"), None
        block = step.on_true if arm == "on_true" else step.on_false
        return _inner([arm], lambda: run_steps(block.steps, run, seg, inner, f"{here}/{arm}/"))
    if isinstance(step, ForEach):
        return _for_each(step, run, seg, rest, here)
    if isinstance(step, Retry):
        return _retry(step, run, seg, rest, here)
    if isinstance(step, Wait):
        if rest is not None:
            return None  # resumed after the wait
        duration = step.duration
        wake = duration(ctx) if callable(duration) else ctx.now + as_timedelta(duration)
        if not isinstance(wake, datetime):
            raise TypeError(f"wait's resolver must return a datetime, not {type(wake).__name__}")
        raise Suspend([], wake)
    if isinstance(step, WaitForEvent):
        if rest is not None:
            run.values[step.name] = seg.resume_value
            return None
        # Taken before the resolvers run: an event committing while they run, or before
        # the wait row commits, has a higher position and still matches (no lost wake-up).
        after = last_position(run.session)
        key = event_key(seg.codec, step.key(ctx))
        timeout_at = ctx.now + as_timedelta(step.timeout)
        wait = EventWait(seg.event_name(step.event), ctx.user.tenant_id, key, after, timeout_at)
        raise Suspend([], timeout_at, wait)
    return step.execute(run)


def event_key(codec: Codec, value: object) -> str:
    """The stored form of a ``wait_for_event`` key, compared as text with an event's."""
    return json.dumps(codec.encode(value), sort_keys=True)


def _for_each(step: ForEach, run: Run, seg: Segment, rest: list[str] | None, here: str) -> Result:
    scope = run.scope
    if rest:
        loop = seg.loops[here]
        items = loop["items"]
        first, inner = int(rest[1][1:]), rest[2:]
    else:
        items = list(step.over(run.ctx))
        loop = seg.loops[here] = {
            "items": items,
            "shadows": step.item in scope,
            "shadowed": scope.get(step.item),
        }
        first, inner = 0, None
    for k in range(first, len(items)):
        scope[step.item] = items[k]
        start = inner if k == first else None
        result = _inner(
            ["do", f"#{k}"], lambda k=k, start=start: run_steps(step.body.steps, run, seg, start, f"{here}/do/#{k}/")
        )
        if result is not None:
            return result
    if loop["shadows"]:
        scope[step.item] = loop["shadowed"]
    else:
        scope.pop(step.item, None)
    del seg.loops[here]
    return None


def _retry(step: Retry, run: Run, seg: Segment, rest: list[str] | None, here: str) -> Result:
    attempt = int(rest[0][1:]) if rest else 1
    before = dict(run.values)
    savepoint = run.session.begin_nested()
    failure: Failure | None = None
    crash: StepCrash | None = None
    try:
        result = run_block(step.body, run)
        if isinstance(result, Failure):
            failure = result
    except StepCrash as exc:
        crash = exc
    if failure is None and crash is None:
        savepoint.commit()
        seg.retries.pop(here, None)
        return None
    if failure is not None and failure is run.refused:
        # A guard refused: that ends the run (as from any depth), it is no failed attempt.
        savepoint.rollback()
        seg.retries.pop(here, None)
        return failure
    # A failed attempt leaves no trace but the retry record.
    savepoint.rollback()
    run.values.clear()
    run.values.update(before)
    error = failure.message if failure is not None else f"{type(crash.cause).__name__}: {crash.cause}"  # type: ignore[union-attr]
    seg.retries[here] = {"attempts": attempt, "last_error": error}
    if attempt >= step.times:
        if crash is not None:
            crash.path[0:0] = ["do"]
            raise crash
        assert failure is not None
        raise RetryExhausted(failure)
    delay: timedelta = RetryPolicy(step.times, step.backoff, step.base_delay).delay(attempt)  # type: ignore[arg-type]
    raise Suspend([f"#{attempt + 1}"], run.ctx.now + delay)


def _convert_loops(convert: Any, loops: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        path: {**loop, "items": convert(loop["items"]), "shadowed": convert(loop["shadowed"])}
        for path, loop in loops.items()
    }


def decode_loops(codec: Codec, data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return _convert_loops(codec.decode, data)


def encode_loops(codec: Codec, loops: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return _convert_loops(codec.encode, loops)
