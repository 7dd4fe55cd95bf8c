"""Workflow steps: ``wait``, ``wait_for_event`` and ``retry`` — the steps that suspend
a run.  Each raises :class:`~kumiko_typed._steps.Suspend`; the workflow engine stores
where the run stopped and, when it is due, re-enters it through ``resume``."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._durations import as_timedelta
from .._errors import PROGRAM_REFUSALS, StateError, StepRefused
from .._eventstore import Frontier, frontier
from .._outbox_types import RetryPolicy
from .._poison import storable_text
from .._results import Failure
from .._trigger_view import trigger_view
from ._base import Fn, NamedStep, Result, Resume, Step, StepCrash, Suspend, called
from ._block import Block

if TYPE_CHECKING:
    from .._interpreter import Run, WorkflowRun

__all__ = [
    "KEY_FORMS",
    "KEY_TEXT_MAX",
    "EventWait",
    "Retry",
    "Wait",
    "WaitForEvent",
    "bounded_key",
    "event_key",
    "key_forms",
    "key_text",
    "later",
]

logger = logging.getLogger("kumiko_typed")


@attrs.frozen
class EventWait:
    """What a ``wait_for_event`` waits for: an event of ``event_type`` and ``tenant_id``
    whose key is ``key``, appended after ``after`` (one the waiting transaction has not
    seen), until ``timeout_at``."""

    event_type: str
    tenant_id: uuid.UUID
    key: str
    after: Frontier
    timeout_at: datetime


#: The longest key stored as it is.  A longer one is stored as its SHA-256: the wait's
#: index on PostgreSQL takes at most about 2,700 bytes a row (SQLite has no such limit),
#: and a key of any length must wait the same on both.
KEY_TEXT_MAX = 1000


def event_key(codec: Any, value: object) -> str:
    """The stored form of a ``wait_for_event`` key, compared as text with an event's."""
    return bounded_key(key_text(codec, value))


#: ``json.dumps(..., sort_keys=True)`` made once: ``dumps`` with an argument builds an
#: encoder per call (the feed computes a key for each event of a waited type).
_KEY_JSON: Final = json.JSONEncoder(sort_keys=True)


def key_text(codec: Any, value: object) -> str:
    """A key's JSON text, before :func:`bounded_key`: its canonical encoding, in which
    keys equal under ``==`` are one text (``1``, ``1.0`` and ``Decimal("1.0")``; one
    instant in two time zones; a set and a frozenset; equal dicts whatever the order
    their keys were inserted in), so that the database's comparison of texts is
    Python's of values."""
    return _KEY_JSON.encode(codec.encode(value, ordered=False, canonical=True))


#: The most forms :func:`key_forms` gives: this release's, and three of earlier ones.
KEY_FORMS: Final = 4

#: Key types whose encoding is one in every release's form: one JSON text, made once.
_ONE_FORM: Final = frozenset({str, int, uuid.UUID})


def key_forms(codec: Any, value: object) -> tuple[str, ...]:
    """Every form a wait for the key ``value`` may have stored, this release's first: the
    forms of earlier releases still match (before canonical keys, values as written:
    ``1.0``, a time zone's offset, a frozenset's tag; before that, a dict's keys in their
    order; and before digests, a long one whole).  Four at most (``KEY_FORMS``): a
    probe asks a group per form (``_waits_probe``), 256 to a statement whatever their
    number."""
    if type(value) in _ONE_FORM:  # the most common keys: no more than one encoding
        text = _KEY_JSON.encode(codec.encode(value, ordered=False))
        bounded = bounded_key(text)
        return (text,) if bounded is text else (bounded, text)
    now_text = key_text(codec, value)
    unordered, ordered = codec.encode(value, ordered=False), codec.encode(value, ordered=True)
    # Texts, not encodings, are compared with the canonical one: 1 == 1.0 as encoded
    # leaves, yet their texts differ.  The two earlier encodings of one value differ only
    # where a form adds a tag (each leaf is the same object in both): equal, one text.
    unordered_text = _KEY_JSON.encode(unordered)
    same = ordered is unordered or ordered == unordered
    ordered_text = unordered_text if same else _KEY_JSON.encode(ordered)
    forms = (bounded_key(now_text), bounded_key(unordered_text), bounded_key(ordered_text), ordered_text)
    return tuple(dict.fromkeys(forms))


def bounded_key(text: str) -> str:
    """``text`` (a key's JSON, all ASCII), or its digest if it is too long to store.
    Idempotent, so a key stored before digests existed compares after this too."""
    if len(text) <= KEY_TEXT_MAX:
        return text
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()  # JSON text never starts so


def later(now: datetime, by: timedelta, what: str) -> datetime:
    """``now + by``, or a refusal that says what is too far away: a wake time past the
    calendar's end (year 9999) would otherwise be an ``OverflowError`` without a word."""
    try:
        return now + by
    except OverflowError:
        raise StepRefused(f"{what}: {by.days} days after {now:%Y-%m-%d} is past the year 9999") from None


def instant(when: datetime, what: str) -> datetime:
    """A resolver's ``when`` in UTC, as it is stored and compared (one without a zone is
    UTC).  One whose UTC reading is past the calendar's end (``9999-12-31T23:00-05:00``)
    is refused with a sentence, as :func:`later` refuses a duration reaching there: the
    conversion's ``OverflowError`` surfaced where the run was stored, as the database's
    refusal of its state; one before the calendar's start is long past: due at once."""
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:
        if when.year == 1:
            return datetime.min.replace(tzinfo=UTC)
        raise StepRefused(f"{what}: {when.isoformat()} is past the year 9999 in UTC") from None


def _segment(run: Run) -> WorkflowRun:
    segment = run.workflow_segment()
    if segment is None:  # boot keeps these steps out of handlers
        raise LookupError("a workflow step ran outside a workflow run")
    return segment


@attrs.frozen(slots=True)
class Wait(Step):
    kind = "workflow.wait"
    duration: timedelta | str | Callable[[Any], datetime]
    #: Optional: names the wait in a stored run's path (so edits around it keep it found).
    name: str | None = None

    @property
    def step_name(self) -> str | None:
        return self.name

    def execute(self, run: Run) -> Result:
        duration = self.duration
        if callable(duration):
            wake = called(duration, run, "duration=")
        else:
            wake = later(run.now, as_timedelta(duration), "wait")
        if not isinstance(wake, datetime):
            # A refusal, not a TypeError: the run's error then says why, not only "TypeError".
            raise StepRefused(f"wait's resolver must return a datetime, not {type(wake).__name__}")
        raise Suspend([], instant(wake, "wait"))

    def resume(self, run: Run, at: Resume) -> Result:
        return None  # the time has come: go on after the wait


@attrs.frozen(slots=True)
class WaitForEvent(NamedStep):
    kind = "workflow.wait_for_event"
    event: type[Any]
    key: Fn
    event_key: Fn
    #: A duration, or a resolver giving the deadline (a billing period's end, a date from
    #: the payload): a constant alone could not wait per run, as ``wait`` can.
    timeout: timedelta | str | Callable[[Any], datetime]

    def execute(self, run: Run) -> Result:
        segment = _segment(run)
        # Taken before the resolvers run: an event committing while they run, or before
        # the wait row commits, is one this transaction has not seen and still matches
        # (no lost wake-up).  In the first segment of a run an event started, the view
        # is its trigger's place instead: the feed may have started it late.
        after = frontier(run.db)
        info = run.workflow
        if info is not None and info.path is None:
            after = trigger_view(run.db, info.run_id, segment.event_name(self.event)) or after
        value = called(self.key, run, "key=")
        try:
            key = event_key(segment.codec, value)
        except (StateError, ValueError) as exc:  # ValueError: an int longer than JSON writes
            # Else the run's error said no more than "raised StateError": the reason (a
            # class to register, a NaN) names a type, never the value.
            raise StepRefused(f"wait_for_event {self.name!r}: its key cannot be stored: {exc}") from None
        timeout_at = self._timeout_at(run)
        wait = EventWait(segment.event_name(self.event), run.user.tenant_id, key, after, timeout_at)
        raise Suspend([], timeout_at, wait)

    def _timeout_at(self, run: Run) -> datetime:
        timeout = self.timeout
        what = f"wait_for_event {self.name!r}: timeout"
        if not callable(timeout):
            return later(run.now, as_timedelta(timeout), what)
        deadline = called(timeout, run, "timeout=")
        if not isinstance(deadline, datetime):
            raise StepRefused(f"{what}'s resolver must return a datetime, not {type(deadline).__name__}")
        return instant(deadline, what)  # compared with events' aware times

    def resume(self, run: Run, at: Resume) -> Result:
        run.values[self.name] = _segment(run).resume_value  # the event, or None: timed out
        return None


@attrs.frozen(slots=True)
class Retry(Step):
    """The body in a savepoint, tried up to ``times`` times.  A failed attempt leaves
    nothing but a retry record (attempts, last error) and suspends the run until the
    backoff has passed; the attempt number is the path part after the step (``#2``)."""

    kind = "workflow.retry"
    times: int
    backoff: str
    base_delay: timedelta
    body: Block
    name: str | None = None

    @property
    def step_name(self) -> str | None:
        return self.name

    def children(self) -> Iterable[tuple[str, Block]]:
        return (("do", self.body),)

    def execute(self, run: Run) -> Result:
        return self._attempt(run, 1)

    def resume(self, run: Run, at: Resume) -> Result:
        return self._attempt(run, int(at.head[1:]))

    def _attempt(self, run: Run, attempt: int) -> Result:
        before = dict(run.values)
        savepoint = run.db.begin_nested()
        failure: Failure | None = None
        crash: StepCrash | None = None
        try:
            result = self.body.run(run, None, f"do/#{attempt}")
            if isinstance(result, Failure):
                failure = result
        except StepCrash as exc:
            crash = exc
        if failure is None and crash is None:
            savepoint.commit()
            return None
        savepoint.rollback()
        if failure is not None and failure is run.guard_refusal():
            return failure  # a guard refused: that ends the run, it is no failed attempt
        run.values.clear()
        run.values.update(before)
        # The last attempt's failure fails the run, as the retry's own: a worker does not
        # try the segment again (a lost race would else be tried past ``times``, for good).
        if crash is not None:
            crash.path[0:0] = ["do", f"#{attempt}"]
            # The framework's refusal of the program (a resolver that gave a coroutine, an
            # unregistered class) is the same at every attempt: the run fails with it now,
            # rather than after spending the attempts and their backoff on it.
            if attempt >= self.times or isinstance(crash.cause, PROGRAM_REFUSALS):
                crash.exhausted = True
                raise crash
        elif attempt >= self.times and failure is not None:
            run.settled = failure
            return failure
        policy = RetryPolicy(self.times, self.backoff, self.base_delay)  # type: ignore[arg-type]
        try:
            delay = policy.delay(attempt)
        except OverflowError:  # beyond what a timedelta holds: past the calendar in any case
            delay = timedelta.max
        suspend = Suspend([f"#{attempt + 1}"], later(run.now, delay, f"retry attempt {attempt + 1}"))
        record: dict[str, Any] = {"attempts": attempt}
        suspend.retries.append((1, record))
        failed = crash if crash is not None else failure
        assert failed is not None
        suspend.failed_attempt = FailedAttempt(record, attempt, self.times, failed)
        raise suspend


@attrs.frozen
class FailedAttempt:
    """A failed ``retry`` attempt, recorded by :meth:`note` where its suspension leaves
    the run (``_interpreter``): there a crash's path is whole, so its message names the
    step as the run's own messages and path do, not by the retry body's part alone."""

    record: dict[str, Any]
    attempt: int
    times: int
    failed: Failure | StepCrash
    #: The run's error while it waits for the next attempt (``RunInfo.error``), made by
    #: :meth:`note`: the attempt's code and message, how many attempts failed and of how many.
    error: dict[str, str] = attrs.Factory(dict)

    def note(self, run: Run, path: list[str], named: Callable[[StepCrash], None]) -> None:
        """Keep the attempt's message in its record and the run's error, and log it.
        ``path``: the suspension's, at the retry's next attempt; ``named`` names a crash's
        step."""
        failure = self.failed
        if isinstance(failure, StepCrash):
            failure.path[0:0] = path[:-1]
            named(failure)
            # What the run would fail with: the step, the exception's class and an error
            # id.  The exception's text (a database error's SQL and bound values) is
            # logged under that id, never stored with the run.
            failure = run.crash_failure(failure)
        error = storable_text(failure.message)  # kept in the run's state: a NUL must not make it unstorable
        self.record["last_error"] = error
        # Text, as every value of a run's error; a crash's message names the step, the
        # exception's class and an error id, never its text.
        waits = f"attempt {self.attempt} of {self.times} failed; the next at wake_at"
        self.error.update(
            code=failure.code, message=f"{error} ({waits})", attempts=str(self.attempt), times=str(self.times)
        )
        logger.info(
            "%s: retry attempt %d of %d failed: %s",
            run.event.handler,
            self.attempt,
            self.times,
            error,
            extra={"kumiko_handler": run.event.handler, "kumiko_attempt": self.attempt, "kumiko_times": self.times},
        )
