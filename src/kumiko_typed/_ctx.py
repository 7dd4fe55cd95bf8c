"""What a resolver sees: the read-only context of one pipeline run."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Generic, TypeVar
from uuid import UUID

import attrs

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from ._runs import RunInfo

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


@attrs.frozen
class User:
    """The authenticated caller.  ``roles`` is matched against a handler's ``roles=``."""

    id: UUID
    tenant_id: UUID
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


@attrs.frozen(slots=True, weakref_slot=False)
class Ctx(Generic[P, S, Sc]):
    """The read-only context handed to every resolver.

    ``steps`` and ``scope`` are live read-only views: the interpreter fills them as
    steps run, so one ``Ctx`` serves a whole dispatch.  With the mypy plugin their
    types are exact ``TypedDict``s; without it they are ``Any``.
    """

    payload: P
    event: Command[P]
    user: User
    steps: S
    scope: Sc
    db: Session
    now: datetime
    workflow: RunInfo | None = None

    @property
    def tenant_id(self) -> UUID:
        return self.user.tenant_id


#: The untyped view the interpreter builds and resolvers receive at run time.
AnyCtx = Ctx[object, Mapping[str, object], Mapping[str, object]]
