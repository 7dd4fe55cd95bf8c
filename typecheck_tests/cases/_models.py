"""Shared payloads, events and a mapped class for the type-check cases."""

from __future__ import annotations

import uuid
from typing import Literal

import attrs
from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Product(Base):
    __tablename__ = "product"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    stock: Mapped[int]


@attrs.frozen
class Line:
    sku: str
    qty: int


@attrs.frozen
class Order:
    id: uuid.UUID
    lines: list[Line]
    note: str = ""


@attrs.frozen
class SignedUp:
    user_id: uuid.UUID
    email: str


@attrs.frozen
class EmailVerified:
    user_id: uuid.UUID


@attrs.frozen
class Pair:
    first: Line
    second: Line
    count: int


@attrs.frozen
class Payment:
    kind: Literal["paid"]
    amount: int


@attrs.frozen
class Refund:
    kind: Literal["refunded"]
    amount: int
    reason: str


@attrs.frozen
class Settle:
    """Either of two shapes: one payload class, a field typed as the union of tagged members."""

    order: str
    how: Payment | Refund


class Shelf(Base):
    __tablename__ = "shelf"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    label: Mapped[str]
