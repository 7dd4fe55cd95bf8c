"""What many test modules share: unwrapping results and runs, and the small payloads and events
the tenancy tests write documents with."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import sqlalchemy as sa

from kumiko_typed import App, Failure, Feature, Ok, RetryPolicy, WriteHandler, ok


def ok_data(result: object) -> Any:
    """The data of an ``Ok`` (the test fails on anything else, showing it)."""
    assert isinstance(result, Ok), result
    return result.data


def refused_by_the_database(answer: object, step: str = '0 read.find_many "r"') -> None:
    """``answer`` is the database's refusal of a value (PostgreSQL's DataError, or SQLite's
    imitation of it) in ``step``."""
    refused = failure_of(answer, "validation_error")
    assert refused.message.startswith(f"step {step}: the database refused a value of the input"), refused
    assert [d["message"] for d in refused.details] == ["the database refused a value"]


def read_queries(
    feature: Feature[Any],
    payload: type[Any],
    reads: Mapping[str, Callable[[Any], object]],
    shape: Callable[[list[Any]], object] = list,
) -> dict[str, Any]:
    """A query handler per read of ``reads``, named as it, answering with ``shape`` of the
    rows its ``find_many`` found: the parity tests run each expression on both databases."""
    return {
        name: feature.query_handler(
            name, feature.query_pipeline(payload).find_many("r", read).return_(lambda c: ok(shape(c.steps["r"])))
        )
        for name, read in reads.items()
    }


def failure_of(result: object, code: str | None = None) -> Failure:
    """The ``Failure`` (the test fails on anything else, showing it), with ``code`` if given."""
    assert isinstance(result, Failure), result
    assert code is None or result.code == code, result
    return result


@attrs.frozen
class Wrote:
    """An event: words were added to a document."""

    words: int


@attrs.frozen
class NewDoc:
    """A payload: create a document with this title."""

    title: str


@attrs.frozen
class Hook:
    """A payload naming the URL a webhook step posts to (the outbox tests' receiver)."""

    url: str


def holding_itself() -> list[Any]:
    """A list that holds itself: converting it recurses without end."""
    items: list[Any] = []
    items.append(items)
    return items


def nested_lists(depth: int) -> list[Any]:
    """``depth`` lists, each inside the next (``[[[]]]`` is 3)."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def hook_feature(name: str, retry: RetryPolicy | None = None) -> tuple[Feature[str], WriteHandler[Hook, None]]:
    """A feature ``name`` whose ``hook`` handler posts ``{"n": 1}`` to the payload's URL
    through the outbox (``retry``: the step's policy, else the default)."""
    feature = Feature(name, requires=["webhook.send"])
    hook = feature.write_handler(
        "hook",
        feature.pipeline(Hook)
        .send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}, retry=retry)
        .return_(lambda c: ok(None)),
    )
    return feature, hook


def run_info(app: App, run_id: uuid.UUID) -> Any:
    """The run ``run_id`` as ``app.get_run`` shows it (the test fails if there is none)."""
    info = app.get_run(run_id)
    assert info is not None, run_id
    return info


def server_time_zone(db_url: str, zone: str) -> None:
    """Set the database's default time zone (PostgreSQL; SQLite has none): what a server
    configured for its country's local time gives every new connection."""
    if not db_url.startswith("postgresql"):
        return
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        name = conn.execute(sa.text("SELECT current_database()")).scalar_one()
        conn.execute(sa.text(f"ALTER DATABASE \"{name}\" SET timezone = '{zone}'"))
    engine.dispose()


def loopback_tls(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """A server TLS context with a self-signed certificate for 127.0.0.1 (made with the
    ``openssl`` command in ``folder``), and the certificate's file: trusted only where a
    test points ``SSL_CERT_FILE`` at it."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the TLS tests make their certificate with the openssl command: install it")
    cert, key = folder / "cert.pem", folder / "key.pem"
    make = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1"
    san = "subjectAltName=IP:127.0.0.1"
    subprocess.run([*make.split(), "-addext", san, "-keyout", key, "-out", cert], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert


class RefusingSmtp:
    """An aiosmtpd handler (:func:`smtp_server`) that accepts every recipient but those in
    ``refuse`` (address -> the reply), and collects what it accepted."""

    def __init__(self, refuse: dict[str, str]) -> None:
        self.refuse = refuse
        self.sender_reply = "250 OK"  # the answer to MAIL FROM
        self.data_reply = "250 Message accepted for delivery"  # the answer to the content
        self.envelopes: list[Any] = []

    async def handle_MAIL(self, _server: Any, _session: Any, envelope: Any, address: str, _options: Any) -> str:
        if self.sender_reply.startswith("250"):
            envelope.mail_from = address
        return self.sender_reply

    async def handle_RCPT(self, _server: Any, _session: Any, envelope: Any, address: str, _options: Any) -> str:
        if address in self.refuse:
            return self.refuse[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        if self.data_reply.startswith("250"):
            self.envelopes.append(envelope)
        return self.data_reply


@contextlib.contextmanager
def smtp_server(handler: object, **options: Any) -> Iterator[int]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 with ``handler`` (and the Controller's
    ``options``: ``tls_context=`` for STARTTLS, ``ssl_context=`` for TLS from the first
    byte, ``authenticator=``...), running while the block does; yields its port."""
    from aiosmtpd.controller import Controller

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    controller = Controller(handler, hostname="127.0.0.1", port=port, **options)
    controller.start()
    try:
        yield port
    finally:
        controller.stop()


def lock_waiters(conn: sa.Connection) -> int:
    """PostgreSQL: how many other connections to ``conn``'s database wait for a lock now."""
    stmt = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
    )
    return int(conn.execute(stmt).scalar_one())


def until_appends_wait(engine: sa.Engine, count: int, what: str) -> None:
    """PostgreSQL: until ``count`` transactions wait for a lock on ``kumiko_events`` (their
    appends); ``what`` they are, for the message of a 30 s hang."""
    query = sa.text(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'kumiko_events'::regclass"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    deadline = time.monotonic() + 30
    with engine.connect() as conn:
        while conn.execute(query).scalar_one() < count:
            assert time.monotonic() < deadline, f"the {what} never reached their appends"
            time.sleep(0.02)


def short_lock_wait(app: App) -> None:
    """Make the App's connections wait 0.3 s for a lock instead of SQLite's five-second busy
    timeout (or PostgreSQL's endless wait): a listener after the App's own, new connections."""

    def shorten(dbapi_connection: Any, _record: object) -> None:
        if app.engine.dialect.name == "sqlite":
            dbapi_connection.execute("PRAGMA busy_timeout=300")
            return
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True  # SET outside a transaction: no rollback undoes it
        dbapi_connection.execute("SET lock_timeout = 300")
        dbapi_connection.autocommit = autocommit

    sa.event.listen(app.engine, "connect", shorten)
    app.engine.dispose()


class Gate:
    """Holds a worker inside a segment: a step calling :meth:`block` waits there until the
    test lets it go, so the test can act while the run is busy."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def block(self, n: int) -> int:
        self.entered.set()
        assert self.release.wait(60), "the test never released the segment"
        return n

    @contextlib.contextmanager
    def holding(self, work: Callable[[], object]) -> Iterator[None]:
        """Run ``work`` (a worker pass) in a thread; the block runs once it is held in
        :meth:`block`, and the segment is let go (and the thread joined) after it."""
        self.entered.clear()
        self.release.clear()
        worker = threading.Thread(target=work)
        worker.start()
        try:
            assert self.entered.wait(60), "the worker did not reach the blocking step"
            yield
        finally:
            self.release.set()
            worker.join(60)


def together(*calls: Callable[[], object]) -> list[object]:
    """Run ``calls`` each in a thread of its own, released at once by a barrier; their
    answers, in order.  An exception one raised is raised here; one still running after
    two minutes is a hang, not a slow machine."""
    barrier = threading.Barrier(len(calls))
    answers: list[object] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            answers[i] = calls[i]()
        except BaseException as exc:  # raised in the caller's thread below
            answers[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a call hung"
    for a in answers:
        if isinstance(a, BaseException):
            raise a
    return answers
