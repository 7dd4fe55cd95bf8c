"""What ``create`` and ``update`` put under their key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar
from uuid import UUID

import attrs

__all__ = ["Saved"]

E = TypeVar("E", covariant=True)


@attrs.frozen
class Saved(Generic[E]):
    """The outcome of an aggregate write.

    ``changes`` maps each changed field to its new value and ``previous`` to its old
    one (empty for a create); ``event`` is the stored event's type name, ``""`` for an
    update that changed nothing (it stores no event, and ``version`` is the one read).
    """

    id: UUID
    entity: E
    version: int
    is_new: bool
    changes: Mapping[str, object] = attrs.field(factory=dict)
    previous: Mapping[str, object] = attrs.field(factory=dict)
    event: str = ""
