"""What a resolver sees: the read-only context of one pipeline run."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar
from uuid import UUID

import attrs

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from ._runs import RunInfo

__all__ = ["AnyCtx", "Command", "Ctx", "User", "WorkflowCtx", "correlation_of"]

P = TypeVar("P", covariant=True)
S = TypeVar("S", covariant=True)
Sc = TypeVar("Sc", covariant=True)


def _roles(value: object) -> frozenset[str]:
    if isinstance(value, str):
        # frozenset("Admin") would silently become {"A", "d", ...}
        return frozenset((value,))
    if not isinstance(value, (set, frozenset, list, tuple)):
        raise TypeError(f"roles must be a collection of role names, not {type(value).__name__}")
    return frozenset(str(r) for r in value)


def _uuid(_user: object, attribute: attrs.Attribute[UUID], value: object) -> None:
    # Every row a run writes carries these; a string or None would surface as a failed
    # insert deep inside a step (or, None as the tenant, as rows no tenant owns).
    if not isinstance(value, UUID):
        raise TypeError(f"User.{attribute.name} must be a uuid.UUID, not {type(value).__name__}")


@attrs.frozen
class User:
    """The authenticated caller.  ``roles`` is matched against a handler's ``roles=``."""

    id: UUID = attrs.field(validator=_uuid)
    tenant_id: UUID = attrs.field(validator=_uuid)
    roles: frozenset[str] = attrs.field(default=frozenset(), converter=_roles)

    def has_role(self, role: str) -> bool:
        return role in self.roles


@attrs.frozen
class Command(Generic[P]):
    """The invocation being handled (``c.event``): who asked for what, and when."""

    handler: str
    payload: P
    user: User
    tenant_id: UUID
    correlation_id: UUID
    time: datetime


class Ctx(Generic[P, S, Sc]):
    """The read-only context handed to every resolver.

    ``steps`` is a live read-only view: the interpreter fills it as steps run, so one
    ``Ctx`` serves a whole dispatch.  ``scope`` is a read-only view of the enclosing
    loops' items (an empty one until a loop first sets an item).  With the mypy plugin
    their types are exact ``TypedDict``s; without it they are ``Any``.

    Every attribute is ``Final`` for type checkers but ``workflow``, a read-only property
    that ``WorkflowCtx`` narrows (a ``Final`` cannot be).  This is a plain slotted class
    rather than a frozen ``attrs`` one because one is built per dispatch: a frozen
    ``__init__`` stores each field through ``object.__setattr__`` and cost a third of
    the interpreter's own overhead (bench/interpreter.py).  A dispatch builds no
    ``Ctx`` of its own: its run (``_interpreter.Run``, a subclass holding the run's
    state besides) is the ``Ctx`` its resolvers receive.  ``Ctx(...)`` is for calling a
    resolver by hand, in a test.
    """

    __slots__ = ("_call", "_workflow", "db", "now", "payload", "scope", "steps", "user")

    def __init__(
        self,
        payload: P,
        user: User,
        steps: S,
        scope: Sc,
        db: Session,
        now: datetime,
        workflow: RunInfo | None = None,
        handler: str = "",
        correlation_id: UUID | None = None,
    ) -> None:
        self.payload: Final = payload
        self.user: Final = user
        self.steps: Final = steps
        self.scope: Final = scope
        self.db: Final = db
        self.now: Final = now
        self._workflow: Final = workflow
        # (handler, payload, user, now, correlation id): the run stores the tuple it is
        # started with as it is, one store where the two fields it is read for took two.
        self._call: Final = (handler, payload, user, now, correlation_id)

    @property
    def workflow(self) -> RunInfo | None:
        """The workflow run this step runs in: ``None`` in a handler or a query."""
        return self._workflow

    @property
    def event(self) -> Command[P]:
        """The invocation being handled: handler name, payload, user, tenant, correlation id, time.

        Built when asked for: most resolvers never read it."""
        return Command(self._call[0], self.payload, self.user, self.user.tenant_id, correlation_of(self), self.now)

    @property
    def tenant_id(self) -> UUID:
        return self.user.tenant_id

    def __repr__(self) -> str:
        return f"<Ctx {self._call[0]} payload={self.payload!r}>"


class WorkflowCtx(Ctx[P, S, Sc]):
    """The ``Ctx`` of a workflow's resolvers (``WorkflowPipeline``, ``WorkflowSubPipeline``):
    a workflow segment always runs with its run's ``RunInfo``, so ``c.workflow`` is never
    ``None`` there.  A workflow segment's run is one (``_interpreter.SegmentRun``)."""

    __slots__ = ()

    if TYPE_CHECKING:
        # Only the type narrows: the value is Ctx's, set for every workflow segment.
        @property
        def workflow(self) -> RunInfo: ...


def correlation_of(ctx: Ctx[Any, Any, Any]) -> UUID:
    """``ctx.event.correlation_id`` without building the ``Command`` (a write step's
    event row needs only this)."""
    found = ctx._call[4]
    return found if found is not None else UUID(int=0)


#: The untyped view the interpreter builds and resolvers receive at run time.
AnyCtx = Ctx[object, Mapping[str, object], Mapping[str, object]]
