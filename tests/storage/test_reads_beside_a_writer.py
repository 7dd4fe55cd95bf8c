"""The App's read-only views answer while another connection holds a write transaction.

On SQLite every transaction the App began took the database's write lock (``BEGIN
IMMEDIATE``), reads included: ``app.get_run``, ``app.runs``, ``app.outbox``,
``app.result``, ``app.read_stream`` and ``app.check_runs`` from a monitoring thread waited for a worker's
segment for up to the five-second busy timeout, then failed.  They now begin read-only
(a deferred ``BEGIN``: the write-ahead log gives them the last committed state), as
queries already did.  On PostgreSQL a read never waited; the same test holds there.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed._tables import workflow_runs

#: Well under the SQLite busy timeout (5 s) a read used to wait out.
PROMPT = 2.5


class RbNote(Entity):
    __tablename__ = "rb_note"
    text: Mapped[str] = mapped_column(default="")


@attrs.frozen
class Write:
    text: str


feature = Feature("rb", requires=["mail.send"])
feature.entity(RbNote)
write = feature.write_handler(
    "write",
    feature.pipeline(Write)
    .create("note", RbNote, data=lambda c: RbNote(text=c.payload.text))
    .send_mail(to="a@example.com", subject="s", body=lambda c: c.payload.text)
    .return_(lambda c: ok(c.steps["note"].id)),
)
echo = feature.workflow(
    "echo",
    trigger=manual(Write),
    pipeline=feature.workflow_pipeline(Write).return_(lambda c: ok(c.payload.text)),
)


@contextmanager
def _writer_holding(app: App, db_url: str) -> Iterator[None]:
    """Another connection in a write transaction, as a worker's segment is."""
    if db_url.startswith("sqlite"):
        other = sqlite3.connect(app.engine.url.database or "", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        other.execute("UPDATE rb_note SET text = text")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()
        return
    with app.engine.connect() as other:
        other.execute(sa.update(workflow_runs).values(updated_at=workflow_runs.c.updated_at))  # row locks
        yield
        other.rollback()


def test_the_apps_reads_answer_while_another_connection_writes(
    app_on: Callable[..., App], db_url: str, user: User
) -> None:
    app = app_on([feature])
    note = ok_data(app.dispatch(write, Write("hello"), user=user))
    run_id = app.start_workflow(echo, Write("hi"), user=user)
    answers: list[tuple[str, float]] = []

    def timed(name: str, read: Callable[[], object]) -> object:
        began = time.monotonic()
        got = read()
        answers.append((name, time.monotonic() - began))
        return got

    with _writer_holding(app, db_url):
        run = timed("get_run", lambda: app.get_run(run_id))
        listed = timed("runs", lambda: app.runs(echo))
        items = timed("outbox", app.outbox)
        result = timed("result", lambda: app.result(echo, run_id, user=user))
        stream = timed("read_stream", lambda: app.read_stream(RbNote, note, user=user))
        incompatible = timed("check_runs", app.check_runs)

    assert run is not None and run.status == "completed"  # type: ignore[attr-defined]
    assert [r.run_id for r in listed] == [run_id]  # type: ignore[attr-defined]
    assert [i.status for i in items] == ["pending"]  # type: ignore[attr-defined]
    assert result == Ok("hi")
    assert isinstance(stream, Ok) and [e.version for e in stream.data] == [1]
    assert incompatible == []
    slow = [(name, round(took, 2)) for name, took in answers if took > PROMPT]
    assert slow == [], f"waited for the writer: {slow}"


def test_a_read_only_view_does_not_leave_its_connection_refusing_writes(app_on: Callable[..., App], user: User) -> None:
    """The next writer on the same pooled connection writes as before."""
    app = app_on([feature])
    for n in range(3):
        app.outbox()
        app.runs()
        assert isinstance(app.dispatch(write, Write(f"n{n}"), user=user), Ok)
    assert len(app.outbox()) == 3
