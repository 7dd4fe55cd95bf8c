"""Entity columns are keyword-only for mypy too, as at run time (``TypeError: __init__()
takes 1 positional argument``): a positional column is an error."""

from __future__ import annotations

from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity


class Tagged(Entity):
    __tablename__ = "case_tagged"
    note: Mapped[str | None] = mapped_column(default=None)
    code: Mapped[str]


Tagged(None, "A1")  # E: call-arg
reveal_type(Tagged(code="A1").code)  # R: str
