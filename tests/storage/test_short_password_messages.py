"""A short password (one letter, a common word) is hidden where a URL quotes it, and the
rest of the message stays readable.  Every occurrence of its text was replaced: with the
password ``p``, "Can't load plugin: sqlalchemy.dialects:postgres.psycopg" read "Can't load
***lugin: ...***ostgres.***syco***g"; with ``host``, libpq's "Is the server running on
that host" lost its host."""

from __future__ import annotations

import socket

import pytest
import sqlalchemy as sa

from kumiko_typed import App, BootError
from kumiko_typed._database_urls import without_secrets


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _no_password_in_url_context(text: str, password: str) -> None:
    for quoted in (f":{password}@", f"password={password}"):
        assert quoted not in text, text


@pytest.mark.parametrize("password", ["p", "postgres"])
def test_a_bad_driver_names_it_readably_without_a_short_password(password: str) -> None:
    with pytest.raises(BootError) as refused:
        App([], database_url=f"postgres+psycopg://u:{password}@host/db?sslpassword={password}")
    message = str(refused.value)
    assert "(Can't load plugin: sqlalchemy.dialects:postgres.psycopg)" in message, message
    assert "postgresql+psycopg://u:***@host/db?sslpassword=***" in message, message
    _no_password_in_url_context(message, password)


@pytest.mark.parametrize("in_query", [False, True], ids=["user-part", "query"])
@pytest.mark.parametrize("password", ["p", "host"])
def test_an_unreachable_server_quoted_with_its_url_reads_whole_without_a_short_password(
    password: str, in_query: bool
) -> None:
    """psycopg's own words, and an app's exception quoting the URL beside them (the
    command line hides the URL's password in either)."""
    where = f"127.0.0.1:{_closed_port()}/db"
    url = (
        f"postgresql+psycopg://u@{where}?password={password}"
        if in_query
        else f"postgresql+psycopg://u:{password}@{where}"
    )
    engine = sa.create_engine(url)
    try:
        with pytest.raises(sa.exc.OperationalError) as failed:
            engine.connect()
    finally:
        engine.dispose()
    said = str(failed.value).splitlines()[0]
    text = without_secrets(f"cannot use {url}: {said}", url)
    shown = f"postgresql+psycopg://u@{where}?password=***" if in_query else f"postgresql+psycopg://u:***@{where}"
    assert text == f"cannot use {shown}: {said}", text
    assert 'connection failed: connection to server at "127.0.0.1"' in text and "Connection refused" in text
    hint = without_secrets(str(failed.value), url)
    assert "Is the server running on that host and accepting TCP/IP connections?" in hint, hint
    _no_password_in_url_context(text + hint, password)
