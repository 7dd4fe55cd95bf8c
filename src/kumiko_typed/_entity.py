"""The aggregate base class: SQLAlchemy dataclass-mapped, with framework columns.

A subclass is type-checked by SQLAlchemy's own typing (``Product(sku="a", name="b")``);
its table is the aggregate's inline projection, written only through events.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from ._utc import UtcDateTime

__all__ = ["Entity", "default_aggregate_type"]


class Entity(MappedAsDataclass, DeclarativeBase, kw_only=True):
    """Base of every aggregate.  ``id``, ``tenant_id``, ``version``, ``created_at`` and
    ``updated_at`` are set by the framework (``init=False``)."""

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, init=False, default_factory=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(index=True, init=False)
    version: Mapped[int] = mapped_column(init=False, default=0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, init=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, init=False)


def default_aggregate_type(cls: type[object]) -> str:
    """``StockItem`` → ``"stock-item"``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", cls.__name__).lower()
