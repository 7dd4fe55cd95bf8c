"""The aggregate base class: SQLAlchemy dataclass-mapped, with framework columns.

A subclass is type-checked by SQLAlchemy's own typing (``Product(sku="a", name="b")``);
its table is the aggregate's inline projection, written only through events.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from sqlalchemy.orm import (
    Composite,
    DeclarativeBase,
    Mapped,
    MappedAsDataclass,
    MappedColumn,
    RelationshipProperty,
    Synonym,
    composite,
    deferred,
    mapped_column,
    relationship,
    synonym,
)
from sqlalchemy.orm.decl_api import DCTransformDeclarative
from typing_extensions import dataclass_transform

from ._utc import UtcDateTime

__all__ = ["Entity", "default_aggregate_type"]


# At run time a subclass inherits kw_only=True; type checkers take a class keyword for that
# class alone, so without this a subclass's columns were positional for them (a column
# without a default after one with a default was an error; Product("a") passed).  The
# transform is declared on the metaclass, where SQLAlchemy declares its own (pyright looks
# there first), with SQLAlchemy's field specifiers.
@dataclass_transform(
    kw_only_default=True,
    field_specifiers=(
        MappedColumn,
        RelationshipProperty,
        Composite,
        Synonym,
        mapped_column,
        relationship,
        composite,
        synonym,
        deferred,
    ),
)
class _EntityMeta(DCTransformDeclarative):
    pass


class Entity(MappedAsDataclass, DeclarativeBase, kw_only=True, metaclass=_EntityMeta):
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
