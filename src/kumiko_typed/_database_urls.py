"""Database URLs: which the App runs on, what it says of one it cannot, and how one is
printed.  A URL may hold a password (``user:pw@`` or ``?password=``): no message quotes
it, and a printed URL shows it as ``***``."""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import quote, quote_plus

from sqlalchemy import URL, make_url
from sqlalchemy.exc import ArgumentError

from ._errors import BootError

__all__ = [
    "URL_PROBLEM",
    "passwords_hidden",
    "refuse_unsupported",
    "secrets_out_of_sight",
    "shown_url",
    "url_refusal",
    "without_secrets",
]

#: How each problem :func:`make_engine` finds begins: the App's BootError says which
#: argument; the command line, which says which option, drops it.
URL_PROBLEM: Final = "database_url: "
#: The (dialect, driver) pairs the runtime speaks: the dialect seam knows these two, and
#: LISTEN/NOTIFY and the segment savepoints call psycopg 3 itself.
_SUPPORTED: Final = frozenset({("sqlite", "pysqlite"), ("postgresql", "psycopg")})
_WHAT_RUNS: Final = "SQLite (sqlite:///app.sqlite3) or PostgreSQL through psycopg 3 (postgresql+psycopg://user@host/db)"
#: Query parameters libpq takes as secrets (``?password=`` works as well as ``user:pw@``).
_SECRET_PARAMETERS: Final = frozenset({"password", "sslpassword"})
_HIDDEN: Final = "***"
#: A password where any URL holds one: after ``scheme://user:``, up to the ``@``.
_USER_PART_PASSWORD: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:)[^\s/?#@]*(?=@)")
#: A password given by name: a URL's query parameter or a libpq keyword (``password=pw``,
#: ``sslpassword = 'p w'``), up to the next ``&`` or blank, or the closing quote.
_NAMED_PASSWORD: Final = re.compile(r"(\b(?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s&'\"]+)", re.IGNORECASE)


def refuse_unsupported(url: str) -> None:
    """Raise :class:`BootError` if ``url`` names a database or driver the App does not
    run on (SQLAlchemy would build an engine that fails later, deep inside)."""
    dialect = make_url(url).get_dialect()
    if (dialect.name, dialect.driver) not in _SUPPORTED:
        async_ = " (an asyncio driver; the App's calls are synchronous)" if dialect.is_async else ""
        raise BootError(
            [f"{URL_PROBLEM}kumiko-typed runs on {_WHAT_RUNS}, not on {dialect.name}+{dialect.driver}{async_}"]
        )


def url_refusal(exc: ValueError | ArgumentError | ImportError, url: str) -> BootError:
    """The :class:`BootError` for what SQLAlchemy raised reading ``url`` or loading its
    driver, naming the fix and quoting no part of the URL's secrets."""
    if isinstance(exc, ArgumentError):
        reason = without_secrets(next(iter(str(exc).splitlines()), type(exc).__name__), url)
        return BootError(
            [f"{URL_PROBLEM}not a database URL SQLAlchemy can use ({reason}){_hint(url)}; e.g. {_WHAT_RUNS}"]
        )
    if isinstance(exc, ImportError):
        module = exc.name or str(exc)
        # psycopg is the one driver that is not a dependency: the postgres extra installs it.
        fix = ': pip install "kumiko-typed[postgres]"' if module.partition(".")[0] == "psycopg" else ""
        return BootError([f"{URL_PROBLEM}the database driver {module} is not installed{fix}"])
    # The port: int()'s message quotes it ("w0rd@db" of "u:p@ss:w0rd@db").
    return BootError(
        [
            f"{URL_PROBLEM}not a database URL SQLAlchemy can use (its port is not a number; a '@', ':' or '/'"
            f" in the password must be percent-encoded); e.g. {_WHAT_RUNS}"
        ]
    )


def _hint(url: str) -> str:
    """What a new user most likely meant by a URL SQLAlchemy cannot read: the ``postgres://``
    of a hosting service's DATABASE_URL (a scheme SQLAlchemy dropped), a SQLite file with two
    slashes, or a bare path."""
    scheme, slashes, rest = url.partition("://")
    if scheme.partition("+")[0].lower() == "postgres":
        try:
            meant = shown_url(f"postgresql+psycopg://{rest}")
        except (ArgumentError, ValueError):
            meant = "postgresql+psycopg://user@host/db"
        return f"; SQLAlchemy names PostgreSQL postgresql, not postgres: {meant}"
    if scheme.lower() == "sqlite" and rest:
        return "; a SQLite file takes three slashes before a relative path, four before an absolute one"
    if not slashes and ("/" in url or "." in url):
        return "; a file path is no URL: sqlite:///PATH for a SQLite file"
    return ""


def without_secrets(text: str, url: str) -> str:
    """``text`` (SQLAlchemy's message, which may quote the URL: "Invalid SQLite URL: ...";
    an app factory's exception, which may quote the URL it was given) with the URL's
    password and secret query values as ``***``: the URL whole, then each secret wherever
    it stands as a whole word, as given and percent-encoded (a URL's ``user:pw@`` and
    libpq's ``password=pw`` among them).  Not inside other words: a short password (``p``)
    replaced everywhere mangled the rest of the message (``Can't load ***lugin``); a
    password that is a word of the message (``host``) is hidden there too, since a
    secret's leak costs more than a word."""
    try:
        parsed = make_url(url)
        shown = shown_url(parsed)
    except (ArgumentError, ValueError):
        return text  # then SQLAlchemy's message quotes no part of it
    secrets = [parsed.password] if parsed.password else []
    for key, value in parsed.query.items():
        if key.lower() in _SECRET_PARAMETERS:
            secrets += [value] if isinstance(value, str) else value
    # The longer first: either may hold the other.
    for quoted in sorted({url, parsed.render_as_string(hide_password=False)}, key=len, reverse=True):
        text = text.replace(quoted, shown)
    for secret in filter(None, secrets):  # as given, and as a rendered URL quotes it
        for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
            text = re.sub(rf"(?<![^\W_]){re.escape(form)}(?![^\W_])", _HIDDEN, text)
    return text


def passwords_hidden(text: str) -> str:
    """``text`` (an application's exception, which may quote a URL it read from its own
    settings) with every password that stands where a database URL or libpq's keyword
    form puts one shown as ``***``: known to be one by its place, whatever its length."""
    return _NAMED_PASSWORD.sub(rf"\g<1>{_HIDDEN}", _USER_PART_PASSWORD.sub(rf"\g<1>{_HIDDEN}", text))


def shown_url(url: str | URL) -> str:
    """``url`` as it may be printed: a password, in the user part or as a query
    parameter, shown as ``***`` (SQLAlchemy's own rendering hides the first only)."""
    parsed = make_url(url)
    secrets = {key: _HIDDEN for key in parsed.query if key.lower() in _SECRET_PARAMETERS}
    rendered = parsed.update_query_dict(secrets).render_as_string(hide_password=True)
    return rendered.replace(quote_plus(_HIDDEN), _HIDDEN)  # the query's value, quoted on the way


def secrets_out_of_sight(url: str) -> tuple[URL, dict[str, Any]]:
    """``url`` and the driver's extra connect arguments, with the URL's secret query
    parameters where SQLAlchemy's own renderings (``repr(app.engine)``,
    ``str(app.engine.url)``, its log lines and errors) do not show them; they show a query
    parameter as it is.  A ``?password=`` moves into the user part, which they show as
    ``***`` (libpq reads either, the query's over the user part's, and so does the URL made
    here); every other (an ``?sslpassword=``, which has no such place, one given twice, one
    spelt in capitals) into the connect arguments, which the driver gets as it got the
    query's (a repeated or capitalized one fails there as before; it was printed whole)."""
    parsed = make_url(url)
    password = parsed.query.get("password")
    if isinstance(password, str):
        parsed = parsed.difference_update_query(["password"]).set(password=password)
    hidden = [key for key in parsed.query if key.lower() in _SECRET_PARAMETERS]
    moved: dict[str, Any] = {key: parsed.query[key] for key in hidden}
    return parsed.difference_update_query(hidden), moved
