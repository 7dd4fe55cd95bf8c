"""A run that fails because a value does not fit names that value in ``RunInfo.error``:
a run keeps its error's code and message only, not the Failure's details, which alone
said which column (and payload field) it was.  Before, a mail subject with a line break
failed its run with "a value does not fit its column: must not contain line breaks or
control characters", and the subject, the recipient or the sender could have been meant."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import attrs
from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, MaildirTransport, User, manual

USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


class Note(Entity):
    __tablename__ = "rn_note"
    text: Mapped[str] = mapped_column(String(10))


@attrs.frozen
class Letter:
    name: str
    subject: str


notes = Feature("rn", requires=["mail.send"])
notes.entity(Note)

computed = notes.workflow(
    "computed",
    trigger=manual(Letter),
    pipeline=notes.workflow_pipeline(Letter).send_mail(
        to="ann@example.com", subject=lambda c: f"Hello {c.payload.name}", body="..."
    ),
)
given = notes.workflow(
    "given",
    trigger=manual(Letter),
    pipeline=notes.workflow_pipeline(Letter).send_mail(
        to="ann@example.com", subject=lambda c: c.payload.subject, body="..."
    ),
)
stored = notes.workflow(
    "stored",
    trigger=manual(Letter),
    pipeline=notes.workflow_pipeline(Letter).create("note", Note, data=lambda c: Note(text=c.payload.name)),
)


def error_of(app: App, run_id: uuid.UUID) -> dict[str, str] | None:
    run = app.get_run(run_id)
    assert run is not None and run.status == "failed", run
    return run.error


def test_a_failed_run_names_the_value_that_did_not_fit(app_on: Callable[..., App], tmp_path: Path) -> None:
    app = app_on([notes], mail=MaildirTransport(str(tmp_path / "mail")))
    refused = "a value does not fit its column: must not contain line breaks or control characters"
    run = app.start_workflow(computed, Letter("Ann\r\nBcc: eve@example.com", "Hi"), user=USER)
    assert error_of(app, run) == {
        "code": "validation_error",
        "message": f"step @send_mail mail.send: {refused} (kumiko_outbox.message.subject)",
    }
    run = app.start_workflow(given, Letter("Ann", "Hi\nX-Evil: 1"), user=USER)
    assert error_of(app, run) == {
        "code": "validation_error",
        "message": f"step @send_mail mail.send: {refused} (kumiko_outbox.message.subject, from $.subject)",
    }
    run = app.start_workflow(stored, Letter("a name longer than ten", "Hi"), user=USER)
    assert error_of(app, run) == {
        "code": "validation_error",
        "message": 'step note aggregate.create "note": a value does not fit its column: '
        "must be at most 10 characters long, not 22 (rn_note.text, from $.name)",
    }
    assert app.outbox() == []
