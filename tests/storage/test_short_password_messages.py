"""A short password (one letter, a common word) is hidden where a URL quotes it, and the
rest of the message stays readable.  Every occurrence of its text was replaced: with the
password ``p``, "Can't load plugin: sqlalchemy.dialects:postgres.psycopg" read "Can't load
***lugin: ...***ostgres.***syco***g"; with ``host``, libpq's "Is the server running on
that host" lost its host."""

from __future__ import annotations

import re
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
    assert not re.search(rf"(?<![^\W_]){re.escape(password)}(?![^\W_])", text), text  # nor as a word


@pytest.mark.parametrize("password", ["p", "postgres"])
def test_a_bad_driver_names_it_readably_without_a_short_password(password: str) -> None:
    with pytest.raises(BootError) as refused:
        App([], database_url=f"postgres+psycopg://u:{password}@host/db?sslpassword={password}")
    message = str(refused.value)
    # Inside another word the password is left as it is; as a word of its own, hidden.
    dialect = "postgres" if password == "p" else "***"
    assert f"(Can't load plugin: sqlalchemy.dialects:{dialect}.psycopg)" in message, message
    assert "postgresql+psycopg://u:***@host/db?sslpassword=***" in message, message
    # The hint's own words name the scheme; they quote no part of the URL.
    _no_password_in_url_context(message.replace("PostgreSQL postgresql, not postgres:", ""), password)


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
    host = "host" if password == "p" else "***"
    assert f"Is the server running on that {host} and accepting TCP/IP connections?" in hint, hint
    _no_password_in_url_context(text + hint, password)


def test_a_password_quoted_outside_a_url_is_hidden_as_a_word_not_inside_other_words() -> None:
    """An app factory's own exception may quote the password bare: hidden wherever it stands
    as a word, never left in; inside another word (``p`` in ``plugin``) it is no password."""
    url = "postgresql+psycopg://u:Tr0ub4dor-3@db/app"
    said = without_secrets("login refused with Tr0ub4dor-3 (Tr0ub4dor-3x is not it)", url)
    assert said == "login refused with *** (Tr0ub4dor-3x is not it)", said
    short = without_secrets("plugin p failed", "postgresql+psycopg://u:p@db/app")
    assert short == "plugin *** failed", short
