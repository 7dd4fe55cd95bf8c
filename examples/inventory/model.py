"""Aggregates, projections, events and payloads of the inventory example."""

from __future__ import annotations

import uuid

import attrs
from sqlalchemy import String, Uuid
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from kumiko_typed import Entity

LOW_STOCK = 5


class Product(Entity):
    """An aggregate: its table is the inline projection of its events."""

    __tablename__ = "inventory_product"
    sku: Mapped[str] = mapped_column(String(40), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    stock: Mapped[int] = mapped_column(default=0)
    archived: Mapped[bool] = mapped_column(default=False)


class Projections(MappedAsDataclass, DeclarativeBase):
    """Non-aggregate tables of this example (read models the handlers maintain)."""


class LowStockAlert(Projections):
    __tablename__ = "inventory_low_stock_alert"
    product_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(Uuid, index=True)
    sku: Mapped[str] = mapped_column(String(40))
    stock: Mapped[int]


@attrs.frozen
class StockAdjusted:
    """Domain event appended to a product's stream."""

    delta: int
    reason: str


@attrs.frozen
class CreateProduct:
    sku: str
    name: str
    stock: int = 0


@attrs.frozen
class RenameProduct:
    id: uuid.UUID
    name: str
    version: int


@attrs.frozen
class AdjustStock:
    id: uuid.UUID
    delta: int
    reason: str


@attrs.frozen
class Adjustment:
    id: uuid.UUID
    delta: int


@attrs.frozen
class BulkAdjust:
    items: list[Adjustment]
    reason: str


@attrs.frozen
class ArchiveProduct:
    id: uuid.UUID
    version: int


@attrs.frozen
class ArchiveLowStock:
    threshold: int = LOW_STOCK


@attrs.frozen
class LowStockReport:
    limit: int = 100


@attrs.frozen
class LowStockFollowUp:
    """Starts the restock-reminder workflow for one product."""

    product_id: uuid.UUID
    sku: str


@attrs.frozen
class ProductRef:
    id: uuid.UUID
    version: int


@attrs.frozen
class Renamed:
    changed: bool
    version: int


@attrs.frozen
class AlertView:
    sku: str
    stock: int
