"""A password given as a query parameter (``?password=``, which libpq reads as well as
``user:pw@``) is hidden wherever SQLAlchemy prints the engine: ``repr(app.engine)`` and
``str(app.engine.url)`` showed it whole, where they show a password of the user part as
``***``.  The driver still gets it, and the App runs on such a URL."""

from __future__ import annotations

import attrs
import pytest
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy import make_url
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, BootError, Entity, Feature, User, ok

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


@pytest.mark.parametrize("secret", [SECRET, "Kq7"], ids=["long", "short"])
def test_a_password_in_the_query_is_hidden_in_the_engines_renderings(
    fresh_postgres_url: str, admin: User, secret: str
) -> None:
    url = make_url(fresh_postgres_url).update_query_dict({"password": secret}).render_as_string(hide_password=False)
    app = App([up], database_url=url)
    try:
        for shown in (repr(app.engine), str(app.engine.url), repr(app), repr(app.engine.url)):
            assert secret not in shown and "password=" not in shown, shown
        assert "***" in repr(app.engine)
        _args, params = app.engine.dialect.create_connect_args(app.engine.url)
        assert params["password"] == secret
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


@pytest.mark.parametrize(
    ("query", "hidden"),
    [
        ("password=Kq7&password=Zw8&application_name=kt", ["Kq7", "Zw8"]),
        ("sslpassword=Kq7&sslpassword=Zw8&application_name=kt", ["Kq7", "Zw8"]),
        ("PASSWORD=Kq7&application_name=kt", ["Kq7"]),
    ],
    ids=["password-twice", "sslpassword-twice", "in-capitals"],
)
def test_a_secret_parameter_the_driver_cannot_use_is_not_printed_either(query: str, hidden: list[str]) -> None:
    """A password given twice, or named in capitals, is no password libpq takes (the
    connect fails as before), but it is one its writer meant: it stayed in the engine's URL,
    and ``repr(app.engine)`` and ``str(app.engine.url)`` printed it whole."""
    url = f"postgresql+psycopg://shop@127.0.0.1:1/shop?{query}"
    app = App([up], database_url=url)
    try:
        for shown in (repr(app.engine), str(app.engine.url), repr(app), repr(app.engine.url)):
            for secret in hidden:
                assert secret not in shown, shown
        assert app.engine.url.query == {"application_name": "kt"}
        # The driver gets what it got before, now as connect arguments (nothing listens on
        # port 1: the connect fails after do_connect saw them).
        _args, before = sa.create_engine(url).dialect.create_connect_args(make_url(url))
        given: list[dict[str, object]] = []
        sa.event.listen(app.engine, "do_connect", lambda _d, _r, _args, params: given.append(dict(params)))
        with pytest.raises(sa.exc.DBAPIError):
            app.engine.connect()
        secrets = {key: value for key, value in before.items() if key.lower().endswith("password")}
        assert secrets and given and all(given[0][key] == value for key, value in secrets.items())
    finally:
        app.dispose()


@pytest.mark.parametrize("password", ["Kq7", "'K q7'"], ids=["plain", "quoted"])
def test_a_libpq_keyword_string_is_refused_without_its_password(password: str) -> None:
    """libpq's keyword form (``host=db password=...``) is no URL SQLAlchemy reads: the
    boot refuses it naming the URL form, quoting none of it."""
    with pytest.raises(BootError) as refused:
        App([up], database_url=f"host=db.internal dbname=shop user=shop password={password}")
    assert "Kq7" not in str(refused.value) and "password" not in str(refused.value)
    assert "not a database URL SQLAlchemy can use" in str(refused.value)
