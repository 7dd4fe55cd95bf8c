"""``append_event(headers=...)``: a value that is not a mapping of text to text is the
input's fault, a ``validation_error`` naming the step and the header (never its value:
a header may carry a token), nothing written — as a bad ``version=`` is, by the same
code.  Before, a wrong type was an ``internal_error``.  Both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, ok
from kumiko_typed._tables import events

AppOn = Callable[..., App]


class AehTicket(Entity):
    __tablename__ = "aeh_ticket"
    owner: Mapped[str] = mapped_column(sa.String(40), default="")


@attrs.frozen
class Noted:
    by: str


@attrs.frozen
class Note:
    id: uuid.UUID
    headers: str  # which of HEADERS the step is given


#: What a resolver may hand the step (a client's data, passed on unchecked).
HEADERS: dict[str, object] = {
    "fine": {"source": "import"},
    "none": None,
    "list": ["source", "import"],
    "text": "source=import",
    "int-name": {1: "import"},
    "int-value": {"batch": 7},
    "bytes-value": {"token": b"s3cret-token"},
    "nested-value": {"source": {"name": "import"}},
    "hostile-name": {"a\x1b[31m\n" + "k" * 100: 1},
    "nul": {"source": "a\x00b"},
    "lone-surrogate": {"source": "a\ud800b"},
}

#: The hostile name as a detail's path writes it.
CUT = repr("a\x1b[31m\n" + "k" * 100)[:40] + "..."

f = Feature("aeh")
f.entity(AehTicket)
f.event(Noted, name="aeh-noted")

open_ticket = f.write_handler(
    "open",
    f.pipeline(Note).create("t", AehTicket, data=lambda c: AehTicket()).return_(lambda c: ok(c.steps["t"].id)),
)
note = f.write_handler(
    "note",
    f.pipeline(Note)
    .append_event(
        AehTicket,
        id=lambda c: c.payload.id,
        event=lambda c: Noted("ann"),
        headers=lambda c: HEADERS[c.payload.headers],  # type: ignore[return-value]  # hostile on purpose
    )
    .return_(lambda c: ok(None)),
)


def _headers(app: App) -> list[Any]:
    with app.engine.connect() as conn:
        return list(conn.execute(sa.select(events.c.headers).order_by(events.c.position)).scalars())


@pytest.fixture
def app(app_on: AppOn) -> App:
    return app_on([f])


def _open(app: App, user: User) -> uuid.UUID:
    ticket: uuid.UUID = ok_data(app.dispatch(open_ticket, Note(uuid.uuid4(), "none"), user=user))
    return ticket


def test_text_headers_are_stored_and_none_stores_none(app: App, user: User) -> None:
    t = _open(app, user)
    assert app.dispatch(note, Note(t, "fine"), user=user) == Ok(None)
    assert app.dispatch(note, Note(t, "none"), user=user) == Ok(None)
    assert _headers(app) == [{}, {"source": "import"}, {}]


@pytest.mark.parametrize(
    ("given", "gave", "path", "problem"),
    [
        ("list", "a list", "headers", "must be a mapping of str to str, not list"),
        ("text", "a str", "headers", "must be a mapping of str to str, not str"),
        ("int-name", "a header name of type int", "headers", "header names must be str, not int"),
        ("int-value", "a value of type int for the header 'batch'", "headers.batch", "must be a str, not int"),
        ("bytes-value", "a value of type bytes for the header 'token'", "headers.token", "must be a str, not bytes"),
        # A hostile name comes back as a path shows it: escaped and cut.
        ("hostile-name", f"a value of type int for the header {CUT}", f"headers[{CUT}]", "must be a str, not int"),
        ("nested-value", "a value of type dict for the header 'source'", "headers.source", "must be a str, not dict"),
    ],
)
def test_headers_of_the_wrong_type_are_a_validation_error_naming_the_header(
    app: App, user: User, given: str, gave: str, path: str, problem: str
) -> None:
    t = _open(app, user)
    refused = failure_of(app.dispatch(note, Note(t, given), user=user), "validation_error")
    assert refused.message == (
        f"append_event AehTicket: headers= gave {gave}; pass a mapping of text header names to text values"
        " (convert numbers, ids and dates with str())"
    )
    assert refused.details == [{"path": path, "message": problem, "step": None}]
    assert "s3cret" not in repr(refused)  # a header's value is never quoted
    assert _headers(app) == [{}]  # nothing written


@pytest.mark.parametrize("given", ["nul", "lone-surrogate"])
def test_header_text_the_json_column_cannot_hold_is_a_validation_error(app: App, user: User, given: str) -> None:
    t = _open(app, user)
    refused = failure_of(app.dispatch(note, Note(t, given), user=user), "validation_error")
    assert isinstance(refused.details, list)
    assert [(p["path"], p["column"]) for p in refused.details] == [("$", "kumiko_events.headers")]
    assert _headers(app) == [{}]
