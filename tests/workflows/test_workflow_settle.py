"""A ``retry`` whose attempts are all used fails its run with the last attempt's error, a
lost race (``version_conflict``) or ``unavailable`` alike, as its ``times`` says: a
worker does not take that error for its own to try again.  Both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class WfsDoc(Entity):
    __tablename__ = "wfs_doc"
    title: Mapped[str] = mapped_column(sa.String(40), default="")


@attrs.frozen
class Doc:
    id: uuid.UUID
    title: str


def _doc(c: Any) -> WfsDoc:
    """The payload's doc, under the payload's id."""
    doc = WfsDoc(title=c.payload.title)
    doc.id = c.payload.id
    return doc


f = Feature("wfs")
f.entity(WfsDoc)

make_doc = f.write_handler(
    "make-doc",
    f.pipeline(Doc).create("doc", WfsDoc, data=_doc).return_(lambda c: ok(None)),
)

#: Called by the next ``_peek``, between a segment's read and its write (once, unless
#: ``always`` holds it: then at every read).
racer: list[Callable[[Any], None]] = []
always: list[Callable[[Any], None]] = []


def _peek(c: Any) -> bool:
    for hook in always:
        hook(c)
    while racer:
        racer.pop()(c)
    return c.steps["found"] is None


@pytest.fixture(autouse=True)
def no_racer() -> Any:
    yield
    racer.clear()
    always.clear()


# (a) The id comes from the payload and the segment does not look it up.
create_later = f.workflow(
    "create-later",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc).wait("PT1M").create("doc", WfsDoc, data=_doc),
)
# A lost race it resolves: the segment reads whether the doc exists, and creates it or
# renames the one there.
create_or_rename = f.workflow(
    "create-or-rename",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc)
    .wait("PT1M")
    .find_one("found", lambda c: sa.select(WfsDoc).where(WfsDoc.id == c.payload.id))
    .compute("absent", _peek)
    .branch(
        when=lambda c: c.steps["absent"],
        on_true=lambda b: b.create("doc", WfsDoc, data=_doc),
        on_false=lambda b: b.update(
            "renamed",
            WfsDoc,
            id=lambda c: c.payload.id,
            changes=lambda c: {"title": c.payload.title},
            version=lambda c: c.steps["found"].version,
        ),
    ),
)


def _rename_behind_its_back(c: Any) -> None:
    """Another writer's change to the doc the segment read: its version moves on."""
    table = WfsDoc.__table__
    c.db.execute(sa.update(table).where(table.c.id == c.payload.id).values(version=table.c.version + 1))


# (b) A retry whose every attempt loses a race, or is refused for now.
rename_in_retry = f.workflow(
    "rename-in-retry",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc).retry(
        times=2,
        base_delay=timedelta(seconds=10),
        do=lambda b: (
            b.find_one("found", lambda c: sa.select(WfsDoc).where(WfsDoc.id == c.payload.id))
            .compute("absent", _peek)
            .update(
                "renamed",
                WfsDoc,
                id=lambda c: c.payload.id,
                changes=lambda c: {"title": c.payload.title},
                version=lambda c: c.steps["found"].version,
            )
        ),
    ),
)


def _locked(c: object) -> None:
    """What a step meets when the database refuses it for now, every time (a statement
    past PostgreSQL's statement_timeout at every try, SQLite locked by another process)."""
    raise sa.exc.OperationalError("SELECT 1", {}, Exception("database is locked"))


refused_in_retry = f.workflow(
    "refused-in-retry",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc).retry(
        times=2, base_delay=timedelta(seconds=10), do=lambda b: b.compute("x", _locked)
    ),
)
refused_later = f.workflow(
    "refused-later",
    trigger=manual(Doc),
    pipeline=f.workflow_pipeline(Doc).wait("PT1M").compute("x", _locked),
)


def _titles(app: App) -> list[str]:
    with app.engine.connect() as conn:
        return list(conn.scalars(sa.select(WfsDoc.__table__.c.title)))


def _failed(app: App, run_id: uuid.UUID, code: str) -> str:
    run = app.get_run(run_id)
    assert run is not None and run.status == "failed" and run.error is not None, run.error
    assert run.error["code"] == code and run.wake_at is None, run.error
    message: str = run.error["message"]
    return message


@pytest.mark.parametrize("flow", [rename_in_retry, refused_in_retry], ids=["version_conflict", "unavailable"])
def test_a_retry_whose_attempts_are_used_fails_its_run(app_on: AppOn, user: User, flow: Any) -> None:
    """Its last attempt's error fails the run, as ``times=2`` says: before, a worker took
    a lost race (or ``unavailable``) there for its own to try again, and tried the last
    attempt every second, for good."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    doc = uuid.uuid4()
    assert app.dispatch(make_doc, Doc(doc, "first"), user=user) == Ok(None)
    always.append(_rename_behind_its_back)
    run_id = app.start_workflow(flow, Doc(doc, "second"), user=user)
    run = app.get_run(run_id)
    assert run is not None and (run.status, run.path, run.error) == ("suspended", "@retry/#2", None), run
    clock.advance(seconds=10)
    assert app.run_worker(once=True)["resumed"] == 1
    code = "version_conflict" if flow is rename_in_retry else "unavailable"
    message = _failed(app, run_id, code)
    assert "tried" not in message  # the retry's own error, as its attempt failed
    clock.advance(minutes=5)
    assert app.run_worker(once=True)["resumed"] == 0
    assert _titles(app) == ["first"]
