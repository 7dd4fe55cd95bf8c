"""A password given as a query parameter (``?password=``, which libpq reads as well as
``user:pw@``) is hidden wherever SQLAlchemy prints the engine: ``repr(app.engine)`` and
``str(app.engine.url)`` showed it whole, where they show a password of the user part as
``***``.  The driver still gets it, and the App runs on such a URL."""

from __future__ import annotations

import attrs
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy import make_url
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok

SECRET = "s3cr3t-in-the-query"


class UpNote(Entity):
    __tablename__ = "up_note"
    text: Mapped[str] = mapped_column(sa.String(20))


@attrs.frozen
class Write:
    text: str


up = Feature("up")
up.entity(UpNote)
write = up.write_handler(
    "write",
    up.pipeline(Write).create("note", UpNote, data=lambda c: UpNote(text=c.payload.text)).return_(lambda c: ok(1)),
)


def test_a_password_in_the_query_is_hidden_in_the_engines_renderings(fresh_postgres_url: str, admin: User) -> None:
    url = make_url(fresh_postgres_url).update_query_dict({"password": SECRET}).render_as_string(hide_password=False)
    app = App([up], database_url=url)
    try:
        for shown in (repr(app.engine), str(app.engine.url), repr(app), repr(app.engine.url)):
            assert SECRET not in shown and "password=" not in shown, shown
        assert "***" in repr(app.engine)
        _args, params = app.engine.dialect.create_connect_args(app.engine.url)
        assert params["password"] == SECRET
        app.create_all()
        assert ok_data(app.dispatch(write, Write("hello"), user=admin)) == 1
    finally:
        app.dispose()


def test_an_sslpassword_in_the_query_is_hidden_in_the_engines_renderings(fresh_postgres_url: str, admin: User) -> None:
    """``?sslpassword=`` (the client key's pass phrase) has no place SQLAlchemy hides, so
    it goes to the driver as a connect argument, not in the engine's URL.  Before, it
    stayed in the URL: ``repr(app.engine)`` and ``str(app.engine.url)`` (and SQLAlchemy's
    log lines and errors quoting them) showed it whole."""
    url = make_url(fresh_postgres_url).update_query_dict({"sslpassword": SECRET, "application_name": "kt"})
    app = App([up], database_url=url.render_as_string(hide_password=False))
    given: list[dict[str, object]] = []
    sa.event.listen(app.engine, "do_connect", lambda _d, _r, _args, params: given.append(dict(params)))
    try:
        for shown in (repr(app.engine), str(app.engine.url), repr(app), repr(app.engine.url)):
            assert SECRET not in shown and "sslpassword" not in shown, shown
        assert app.engine.url.query == {"application_name": "kt"}
        app.create_all()
        assert ok_data(app.dispatch(write, Write("hello"), user=admin)) == 1
        assert given and given[0]["sslpassword"] == SECRET  # libpq still gets it
    finally:
        app.dispose()
