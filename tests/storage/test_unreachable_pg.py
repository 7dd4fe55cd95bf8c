"""A PostgreSQL server that cannot be reached for a new connection: a dispatch answers
``unavailable`` (503, try again later), as docs/errors.md says of an unreachable
database, not ``internal_error``: the server is down or restarting, the port closed,
the connect timed out, the host's name does not resolve.  psycopg raises these with no SQLSTATE, only libpq's text.  A
server that answers and refuses (no such database), or that libpq itself will not go on
with (a password asked for and not given, SSL wanted and not there), is the set-up's to
fix: still ``internal_error``, also when the server says so in another language than
English (its ``lc_messages``).  A worker whose first pass finds no server stops with the
error, as for a wrong URL, for its supervisor to see."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import attrs
import pytest
import sqlalchemy as sa
from _worker_thread import Worker

from kumiko_typed import App, Failure, Feature, User, ok
from kumiko_typed.testing.postgres import PostgresServer, start_test_postgres

SECRET = "pw-7c1e2b0a"


@attrs.frozen
class Ping:
    n: int


f = Feature("unreach")
ping = f.write_handler("ping", f.pipeline(Ping).compute("n", lambda c: c.payload.n).return_(lambda c: ok(c.steps["n"])))
USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _down_url(host: str = "127.0.0.1", port: int | None = None) -> str:
    return f"postgresql+psycopg://kumiko:{SECRET}@{host}:{port or _closed_port()}/kumiko?connect_timeout=2"


@contextmanager
def _silent_server() -> Iterator[int]:
    """A port that takes the connection and never answers (a server hung, a black hole
    behind a firewall that accepts): libpq's connect times out."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        yield int(listening.getsockname()[1])


@pytest.mark.parametrize("server", ["port closed", "silent", "no such host"])
def test_a_dispatch_to_a_server_that_does_not_answer_is_unavailable(
    caplog: pytest.LogCaptureFixture, server: str
) -> None:
    with ExitStack() as stack:
        if server == "silent":
            url = _down_url(port=stack.enter_context(_silent_server()))
        else:
            url = _down_url("kumiko-test.invalid" if server == "no such host" else "127.0.0.1")
        _dispatch_is_unavailable(App([f], database_url=url))
    assert all(SECRET not in record.getMessage() for record in caplog.records)


def _dispatch_is_unavailable(app: App) -> None:
    try:
        result = app.dispatch(ping, Ping(1), user=USER)
        assert isinstance(result, Failure) and result.code == "unavailable", result
        assert "the database is busy or unreachable, try again" in result.message
        assert "127.0.0.1" not in result.message and SECRET not in str(result)
        also = app.dispatch_json("unreach:ping", {"n": 2}, user=USER)
        assert isinstance(also, Failure) and also.code == "unavailable", also
    finally:
        app.dispose()


@pytest.mark.postgres
def test_a_server_that_refuses_the_connection_itself_is_a_set_up_error(fresh_postgres_url: str) -> None:
    """The server answers: no such database.  Trying again later does not help."""
    url = sa.make_url(fresh_postgres_url).set(database=f"no_such_{uuid.uuid4().hex}")
    app = App([f], database_url=url.render_as_string(hide_password=False))
    try:
        result = app.dispatch(ping, Ping(1), user=USER)
        assert isinstance(result, Failure) and result.code == "internal_error", result
    finally:
        app.dispose()


def test_a_worker_whose_first_pass_finds_no_server_stops_with_the_error() -> None:
    app = App([f], database_url=_down_url())
    worker = Worker(app)
    worker.thread.join(timeout=60)
    try:
        assert not worker.thread.is_alive()
        raised = worker.raised
        assert len(raised) == 1 and isinstance(raised[0], sa.exc.OperationalError), raised
        assert "Connection refused" in str(raised[0])
    finally:
        app.stop_worker()
        app.dispose()


def _answering_server(answer: bytes) -> Iterator[int]:
    """A loopback port that speaks PostgreSQL's start-up as far as ``answer``: it turns
    down SSL and GSS encryption, reads the start-up message and sends ``answer`` (what
    a real server sends there), then closes.  The test server trusts every login, so
    an authentication request or a start-up refusal is staged here."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(8)
    listening.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listening.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                while True:
                    head = conn.recv(8)
                    if len(head) < 8:
                        break
                    length, code = struct.unpack("!ii", head)
                    conn.recv(length - 8) if length > 8 else b""
                    if code in (_SSL_REQUEST, _GSS_REQUEST):
                        conn.sendall(b"N")
                        continue
                    conn.sendall(answer)
                    break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listening.getsockname()[1])
    finally:
        done.set()
        thread.join(timeout=5)
        listening.close()


_SSL_REQUEST, _GSS_REQUEST = 80877103, 80877104


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _fatal(code: str, text: str, severity: str = "FATAL") -> bytes:
    """A start-up refusal; ``severity`` as the server's ``lc_messages`` says it (``V``
    stays ``FATAL``: libpq shows the localized ``S``)."""
    fields = ((b"S", severity), (b"V", "FATAL"), (b"C", code), (b"M", text))
    return _message(b"E", b"".join(k + v.encode() + b"\0" for k, v in fields) + b"\0")


#: The server asks for a password (AuthenticationCleartextPassword).
_ASKS_PASSWORD = _message(b"R", struct.pack("!i", 3))


@pytest.mark.parametrize(
    ("answer", "query", "code"),
    [
        # libpq's own refusals, with no FATAL from the server: the URL names no password
        # the server asks for, or wants SSL the server has not: set-up errors, as a wrong
        # password is.  They were unavailable: try again, for good.
        (_ASKS_PASSWORD, "", "internal_error"),
        (_ASKS_PASSWORD, "?sslmode=require", "internal_error"),
        # The server answers that it takes no connection for now: an outage.
        (_fatal("57P03", "the database system is starting up"), "", "unavailable"),
        # Refusals in the server's language: without the English "FATAL:" they were
        # taken for a server that is not there (unavailable, and a worker's first pass
        # outlived a misspelt database name for good).
        (_fatal("3D000", 'база данных "kumiko" не существует', "ВАЖНО"), "", "internal_error"),
        (_fatal("28000", '角色 "kumiko" 不存在', "致命错误"), "", "internal_error"),
    ],
    ids=["no password given", "no SSL on the server", "starting up", "no database, in Russian", "no role, in Chinese"],
)
def test_a_server_that_answers_the_start_up_is_told_from_one_that_is_not_there(
    monkeypatch: pytest.MonkeyPatch, answer: bytes, query: str, code: str
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", "/nonexistent/pgpass")
    with contextmanager(_answering_server)(answer) as port:
        app = App([f], database_url=f"postgresql+psycopg://kumiko@127.0.0.1:{port}/kumiko{query}")
        try:
            result = app.dispatch(ping, Ping(1), user=USER)
            assert isinstance(result, Failure) and result.code == code, result
        finally:
            app.dispose()


#: Bounds a hang only.
HANG_S = 30


def _refusal(engine: sa.Engine) -> str:
    """What the server says refusing ``engine``'s connection."""
    try:
        engine.connect().close()
    except sa.exc.OperationalError as exc:
        return str(exc.orig)
    raise AssertionError("the connection was not refused")


@pytest.fixture
def russian_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[PostgresServer]:
    """A server of the test's own whose messages are Russian: started with ``LANGUAGE=ru``
    (gettext reads it for any locale but C; the test machines have no ru_RU locale to set
    ``lc_messages`` to) and ``lc_messages = 'C.UTF-8'``, so that a refused connection
    carries no English word, not even ``FATAL``."""
    monkeypatch.setenv("LANGUAGE", "ru")
    server = start_test_postgres()
    if server is None or server.external:
        pytest.skip("needs a server of the test's own, started with LANGUAGE=ru")
    try:
        admin = sa.create_engine(server.admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
        with admin.connect() as conn:
            conn.execute(sa.text("ALTER SYSTEM SET lc_messages = 'C.UTF-8'"))
            conn.execute(sa.text("SELECT pg_reload_conf()"))
        admin.dispose()
        # The reload is the postmaster's to do, a moment later: wait until a refusal says it.
        nowhere = sa.create_engine(sa.make_url(server.url).set(database="no_such_database"), poolclass=sa.pool.NullPool)
        deadline = time.monotonic() + HANG_S
        while "FATAL" in _refusal(nowhere):
            if time.monotonic() > deadline:
                pytest.skip(f"this server's messages are not translated: {_refusal(nowhere)}")
            time.sleep(0.05)
        nowhere.dispose()
        yield server
    finally:
        server.stop()


@pytest.mark.postgres
def test_a_server_refusing_in_russian_is_a_set_up_error_not_an_outage(russian_server: PostgresServer) -> None:
    """A real server whose ``lc_messages`` is not English refuses a database that does not
    exist: ``ВАЖНО: база данных ... не существует`` (transliterated while the connection
    has no encoding yet).  Before, the missing word ``FATAL:`` made it a server that is
    not there: the dispatch answered ``unavailable`` (try again, for good) and a worker's
    first pass outlived it with a warning instead of stopping for its supervisor."""
    url = sa.make_url(russian_server.url).set(database="no_such_database").render_as_string(hide_password=False)
    app = App([f], database_url=url)
    try:
        with pytest.raises(sa.exc.OperationalError) as raised:
            app.run_worker(once=True)
        said = str(raised.value.orig)
        assert "FATAL" not in said and "does not exist" not in said, said
        result = app.dispatch(ping, Ping(1), user=USER)
        assert isinstance(result, Failure) and result.code == "internal_error", result
    finally:
        app.dispose()
    # A server that is not there is still one: the same classification, no words needed.
    down = App([f], database_url=_down_url())
    try:
        result = down.dispatch(ping, Ping(1), user=USER)
        assert isinstance(result, Failure) and result.code == "unavailable", result
    finally:
        down.dispose()
