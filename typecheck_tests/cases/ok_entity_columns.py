"""Entity columns are keyword-only for the type checkers too, as at run time, where a
subclass of ``Entity`` inherits its ``kw_only=True``: a column without a default may follow
one with a default, in the class or in an abstract base of columns (mypy and pyright took
the keyword for ``Entity``'s own columns only, and refused both)."""

from __future__ import annotations

from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity


class Audited(Entity):
    __abstract__ = True
    note: Mapped[str | None] = mapped_column(default=None)


class Shelf(Audited):
    __tablename__ = "case_shelf"
    code: Mapped[str]


class Bin(Entity):
    __tablename__ = "case_bin"
    capacity: Mapped[int] = mapped_column(default=10)
    label: Mapped[str]


reveal_type(Shelf(code="A1").note)  # R: str | None # PR: str | None
reveal_type(Bin(label="B2").capacity)  # R: int # PR: int
