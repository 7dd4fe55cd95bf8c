"""Every exception class of the library, in one place.

Raised to the developer (never shown to the caller of a handler, who gets a
``Failure``)::

    Exception
    ├── BootError              the App's definition has problems (all listed at once)
    ├── ProgramError           a step asked for what the framework never does; its text is
    │   │                      the framework's own, so a Failure may quote it
    │   ├── StepRefused        a wrong argument at run time (an unbounded delete, ...)
    │   │   ├── UnscopedRead   a Core select of an entity's table, around the tenant filter
    │   │   └── UnscopedWrite  an ORM UPDATE of an entity by primary key, which no filter restricts
    │   ├── ProjectorFailed    a projector raised: names it, its entity and event (not the text)
    │   ├── CaughtDatabaseError  a resolver caught a database error of its c.db statement and went on
    │   ├── UnregisteredError  an entity or event class no feature registered (LookupError)
    │   └── UnreadableEvent    a stored event this App's classes cannot read (also a StateError)
    ├── StateError             a value cannot be stored in a run or key (TypeError), or read back
    │   └── ClassMismatch      a stored value's class is not this App's as stored: the run is stranded
    │       └── NewerFormat    a run's state was written by a newer release: stranded for it
    ├── Unfit                  values a step would store do not fit their columns, or a read's
    │                          row count is out of range (ValueError); becomes a validation_error
    │                          naming the payload fields
    ├── DeliveryError          an outbox delivery failed (``permanent``: do not retry); what a
    │                          custom mail transport raises
    └── _Unwinding             internal: leaves a run through its sub-pipelines, collecting
        ├── StepCrash          the path — an exception escaped a step (becomes a Failure)
        └── Suspend            a workflow run stops until a time or an event
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import CodeType

    from sqlalchemy.exc import DBAPIError

    from ._steps import EventWait, Step
    from ._steps.workflow import FailedAttempt

__all__ = [
    "PROGRAM_REFUSALS",
    "BootError",
    "CaughtDatabaseError",
    "DeliveryError",
    "Problem",
    "ProgramError",
    "ProjectorFailed",
    "StateError",
    "StepCrash",
    "StepRefused",
    "Suspend",
    "Unfit",
    "UnreadableEvent",
    "UnregisteredError",
    "UnscopedRead",
    "UnscopedWrite",
]

#: One value that does not fit its column: ``{"path", "message", "column"}``.
Problem = dict[str, str]


class BootError(Exception):
    """The App's boot validation found problems; ``problems`` lists every one of them."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        listing = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the app definition:\n{listing}")


class ProgramError(Exception):
    """A step was asked for something the framework never does (a wrong argument, an
    unregistered class).  Its message is the framework's own, built from the program's
    names (classes, columns, step kinds), never from data: a ``Failure`` may show it,
    where any other exception's text goes to the log only."""


class OutOfRange(ValueError):
    """A number the database computed is past the type the query reads it as (a ``sum``
    of a ``BigInteger`` column past 64 bits): the database's refusal of a value, as
    PostgreSQL's ``bigint out of range``."""


class StepRefused(ProgramError, ValueError):
    """A step was asked to do something it never does (an unbounded delete...)."""


class UnscopedRead(StepRefused):
    """A select reads an entity's table around the tenant filter."""


class UnscopedWrite(StepRefused):
    """An ORM UPDATE by primary key (a list of rows) of an entity: it takes no tenant
    filter, so it could set another tenant's rows."""


class ProjectorFailed(ProgramError):
    """A projector raised while it applied an event (a write's, or a rebuild's replay).
    The message names the projector, its entity and event class and the exception's class;
    the exception itself (whose text may quote the event's data) is the ``__cause__``, for
    the log only."""

    def __init__(self, projector: object, entity: type[Any], event: type[Any], cause: BaseException) -> None:
        self.projector = self.name_of(projector)
        super().__init__(
            f"the projector {self.projector} of {entity.__name__} for {event.__name__} raised "
            f"{type(cause).__name__}; nothing of this call was written: fix the projector (its traceback is logged "
            "under the error id)"
        )

    @staticmethod
    def name_of(projector: object) -> str:
        """How a message names a projector: its module and qualified name."""
        name = getattr(projector, "__qualname__", None) or type(projector).__name__
        module = getattr(projector, "__module__", None)
        return f"{module}.{name}" if module else name


class CaughtDatabaseError(ProgramError):
    """A step's resolver caught a database error from a statement it sent through ``c.db``
    and went on (``_swallowed``).  ``error`` is that error, also the ``__cause__``: its
    text, which may quote the statement and its values, is for the log only; the
    interpreter words the step's ``Failure``."""

    def __init__(self, error: DBAPIError, at: tuple[CodeType, int] | None = None) -> None:
        self.error = error
        #: The block's generated code and its line that called the resolver, if a block's did.
        self.at = at
        self.__cause__ = error
        what = type(error).__name__
        super().__init__(f"its resolver caught {what} from a statement it sent through c.db and went on")


class UnregisteredError(ProgramError, LookupError):
    """An entity or event class used by a step that no feature of the App registered."""


#: The framework's refusals of a program that no second try changes (a resolver that gave
#: a coroutine, an unbounded delete, a class no feature registers): a ``retry`` fails the
#: run with one at once.  Not :class:`ProjectorFailed`, which carries the projector's own
#: exception, a step's like any other; nor :class:`UnreadableEvent`, a deploy's doing.
PROGRAM_REFUSALS: tuple[type[ProgramError], ...] = (StepRefused, UnregisteredError)


class StateError(TypeError):
    """A value cannot be stored (or a stored one cannot be read back)."""


class UnreadableEvent(ProgramError, StateError):
    """A stored event that ``read_stream``, a rebuild or a workflow's feed or worker cannot
    read into its class (or a stream that leaves a NOT NULL column of its row empty): its
    type, place and schema version and the fields or columns that do not fit, never their
    values (so a ``Failure`` or a stranded run's reason may show it).  A class changed
    without a new schema version and upcaster made it so (events are never rewritten)."""


class ClassMismatch(StateError):
    """A stored value names a class this App does not register, or one changed since the
    value was stored (a field without a default added, an enum member removed).  A
    deploy made it so and a deploy can undo it: a run holding one is stranded, not failed."""


class NewerFormat(ClassMismatch):
    """A run's state was written in a newer stored form (``_serialization.FORMAT``) than
    this release reads, by a newer release beside it (a rolling deploy): its unknown type
    tags are not damage, and the run is left for a worker of that release."""


class Unfit(ValueError):
    """Values a data step was about to store do not fit their columns; each problem is
    ``{"path", "message", "column"}``, ``path`` the payload field it came from (``$`` if
    it came from none).  ``lead`` says what is wrong in the Failure's message (a read's
    row count names its clause, ``LIMIT`` or ``OFFSET``, as its column)."""

    def __init__(self, problems: list[Problem], lead: str = "a value does not fit its column") -> None:
        super().__init__("; ".join(f"{p['column']}: {p['message']}" for p in problems))
        self.problems = problems
        self.lead = lead


class DeliveryError(Exception):
    """An outbox delivery failed.  The row is tried again after its backoff, unless the
    error is ``permanent`` (it is then ``dead`` at once).  The message is stored with the
    row, secret values redacted.  ``retry_after``: the peer asked for no attempt before
    that long (HTTP ``Retry-After``); the next one waits at least that, at most an hour."""

    def __init__(self, message: str, *, permanent: bool = False, retry_after: timedelta | None = None) -> None:
        # Refused here, in the transport that raises it (a failed attempt, retried, naming
        # the fix): retry_after=30 failed the scheduling of the next attempt and set the
        # row dead at once, and permanent="no" (true) did the same.
        if type(permanent) is not bool:
            raise TypeError(f"DeliveryError(permanent=...) must be True or False, not {permanent!r}")
        if retry_after is not None and not isinstance(retry_after, timedelta):
            raise TypeError(
                "DeliveryError(retry_after=...) must be a datetime.timedelta (timedelta(seconds=30)) or None,"
                f" not {retry_after!r}"
            )
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after


class _Unwinding(Exception):
    """An exception that leaves a run through its sub-pipelines: each level it passes
    prepends its part of the path (``path`` is relative to where it is caught)."""

    path: list[str]


class StepCrash(_Unwinding):
    """An exception escaped a step; ``path`` grows as it unwinds through sub-pipelines."""

    def __init__(self, path: list[str], step: Step, cause: BaseException) -> None:
        # The cause itself, not its text: a ``__str__`` that raises must not replace the
        # step's exception with its own (the failure names the class; the log, the text).
        super().__init__(cause)
        self.path = path
        self.step = step
        self.cause = cause
        #: Raised by a ``retry`` whose attempts are all used: the run fails with it, and
        #: a worker does not try the segment again (``Run.settled``).
        self.exhausted = False

    def where(self) -> str:
        return f"{'/'.join(self.path)} {self.step.describe()}"


class Suspend(_Unwinding):
    """A workflow run stops here until ``wake_at`` (for an event wait, or a matching
    event: ``wait``).  Loops and retries it unwinds through attach what resuming them
    needs, keyed by how much of the path was theirs (see :meth:`records`)."""

    def __init__(self, path: list[str], wake_at: datetime, wait: EventWait | None = None) -> None:
        super().__init__("suspended")
        self.path = path
        self.wake_at = wake_at
        self.wait = wait
        self.loops: list[tuple[int, dict[str, Any]]] = []
        self.retries: list[tuple[int, dict[str, Any]]] = []
        #: The failed ``retry`` attempt this suspension waits to try again, whose record
        #: is completed once the path is whole (a retry knows only its body's part).
        self.failed_attempt: FailedAttempt | None = None

    def records(self, attached: list[tuple[int, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
        """``attached`` keyed by the stored path of the step that attached each one
        (the record was attached when ``suffix`` parts of the path were below it)."""
        return {"/".join(self.path[: len(self.path) - suffix]): record for suffix, record in attached}
