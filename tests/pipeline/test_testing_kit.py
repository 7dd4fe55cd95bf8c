"""kumiko_typed.testing: FakeClock, MemoryMail, any MailTransport, OutboxItem.target and the
pytest plugin's App fixtures (used here as a user's suite would, on both databases)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from importlib.metadata import entry_points
from pathlib import Path

import attrs
import pytest

from kumiko_typed import App, Feature, MailMessage, User, ok
from kumiko_typed.testing import AppFactory, AppSettings, FakeClock, MemoryMail

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@attrs.frozen
class Letter:
    to: list[str]
    subject: str
    sender: str | None = None


@attrs.frozen
class Ping:
    url: str


post = Feature("post", requires=["mail.send", "webhook.send"])
letter = post.write_handler(
    "letter",
    post.pipeline(Letter)
    .send_mail(
        to=lambda c: c.payload.to,
        subject=lambda c: c.payload.subject,
        body="Hello.\n",
        sender=lambda c: c.payload.sender,
    )
    .return_(lambda c: ok(None)),
)
ping = post.write_handler(
    "ping", post.pipeline(Ping).send_webhook(url=lambda c: c.payload.url).return_(lambda c: ok(None))
)


class Flaky:
    """A user's own transport: fails the first time, then keeps the subjects it sent."""

    def __init__(self) -> None:
        self.subjects: list[str] = []
        self.calls = 0

    def send(self, mail: MailMessage, lookup: object, /) -> None:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("relay down")
        self.subjects.append(mail.subject)


# --- FakeClock ------------------------------------------------------------------------------


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock(T0)
    assert clock() == T0 and clock.now == T0
    assert clock.advance(timedelta(hours=1), minutes=30) == T0 + timedelta(hours=1, minutes=30)
    assert clock() == T0 + timedelta(hours=1, minutes=30)
    clock.now = T0  # going back is a deliberate assignment
    assert clock() == T0
    assert FakeClock().now.tzinfo is not None


def test_fake_clock_refuses_naive_times_and_moving_backwards() -> None:
    with pytest.raises(ValueError, match="time-zone-aware"):
        FakeClock(datetime(2026, 3, 2, 9, 0))
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=timezone(timedelta(hours=2))))
    with pytest.raises(ValueError, match="time-zone-aware"):
        clock.now = datetime(2026, 3, 2, 9, 0)
    with pytest.raises(ValueError, match="forward only"):
        clock.advance(seconds=-1)
    assert clock.now.utcoffset() == timedelta(hours=2)


# --- mail transports ------------------------------------------------------------------------


@pytest.mark.parametrize(("amount", "seconds"), [(1.5, "1.5"), (2, "2"), ("PT1H", "...")])
def test_fake_clock_advance_by_a_bare_amount_says_what_to_pass(amount: object, seconds: str) -> None:
    """``advance(1.5)`` raised timedelta's own "unsupported operand type(s) for +", naming
    no unit and no fix."""
    clock = FakeClock(T0)
    with pytest.raises(TypeError) as raised:
        clock.advance(amount)  # type: ignore[arg-type]
    assert str(raised.value) == (
        f"FakeClock.advance takes a timedelta or units by keyword, not {type(amount).__name__} {amount!r}: "
        f"advance(timedelta(seconds={seconds})) or advance(seconds={seconds})"
    )
    assert clock.now == T0


def test_memory_mail_records_typed_messages(kumiko_app: AppFactory, user: User) -> None:
    mail = MemoryMail()
    clock = FakeClock(T0)
    app = kumiko_app([post], clock=clock, mail=mail)
    assert isinstance(
        app.dispatch(letter, Letter(["ann@example.com", "bob@example.com"], "Low stock"), user=user), type(ok(None))
    )
    clock.advance(seconds=1)  # outbox rows are delivered (and listed) oldest first
    app.dispatch(letter, Letter(["cy@example.com"], "Hi", sender="shop@example.com"), user=user)
    assert mail.sent == []  # nothing is sent inside the handler's transaction
    assert app.run_worker(once=True)["sent"] == 2
    ids = [item.id for item in app.outbox()]
    assert mail.sent == [
        MailMessage(ids[0], ("ann@example.com", "bob@example.com"), "Low stock", "Hello.\n", None),
        MailMessage(ids[1], ("cy@example.com",), "Hi", "Hello.\n", "shop@example.com"),
    ]
    mail.clear()
    assert mail.sent == []


def test_a_users_transport_is_called_and_its_error_retried(kumiko_sqlite_app: AppFactory, user: User) -> None:
    clock = FakeClock(T0)
    transport = Flaky()
    app = kumiko_sqlite_app([post], clock=clock, mail=transport)
    app.dispatch(letter, Letter(["ann@example.com"], "Again"), user=user)
    assert app.run_worker(once=True)["retried"] == 1
    [item] = app.outbox()
    assert item.status == "pending" and item.last_error == "ConnectionError: relay down"
    clock.advance(minutes=1)
    assert app.run_worker(once=True)["sent"] == 1
    assert transport.subjects == ["Again"] and app.outbox()[0].status == "sent"


# --- OutboxItem.target ----------------------------------------------------------------------


def test_outbox_items_show_their_target_without_secrets(kumiko_sqlite_app: AppFactory, user: User) -> None:
    clock = FakeClock(T0)
    app = kumiko_sqlite_app([post], clock=clock, mail=MemoryMail())
    app.dispatch(letter, Letter(["ann@example.com", "bob@example.com"], "s"), user=user)
    clock.advance(seconds=1)
    app.dispatch(ping, Ping("https://bot:hunter2@hooks.example.com:8443/in?token=s3cret&flag&v=1#frag"), user=user)
    clock.advance(seconds=1)
    app.dispatch(ping, Ping("http://[::1]/plain"), user=user)
    targets = [item.target for item in app.outbox()]
    assert targets == [
        "ann@example.com, bob@example.com",
        "https://bot:***@hooks.example.com:8443/in?token=***&flag&v=***",
        "http://[::1]/plain",
    ]


# --- the plugin -----------------------------------------------------------------------------


def test_the_plugin_is_registered_for_pytest() -> None:
    plugins = {ep.value for ep in entry_points(group="pytest11")}
    assert "kumiko_typed.testing.plugin" in plugins


_USERS_TEST = """
from kumiko_typed import Feature
from kumiko_typed.testing import AppFactory


def test_an_app(kumiko_sqlite_app: AppFactory) -> None:
    assert kumiko_sqlite_app([Feature("mine")]).outbox() == []
"""


@pytest.mark.parametrize(
    ("conftest", "args"),
    [
        ('pytest_plugins = ["kumiko_typed.testing.plugin"]\n', []),
        ("", ["-p", "kumiko_typed.testing.plugin"]),
    ],
    ids=["pytest_plugins", "-p"],
)
def test_naming_the_plugin_as_well_loads_it_once(tmp_path: Path, conftest: str, args: list[str]) -> None:
    """A suite that names the plugin (how pytest loads one with PYTEST_DISABLE_PLUGIN_AUTOLOAD)
    where the entry point loads it too: pytest crashed at start-up, ``Plugin already
    registered under a different name``, while the entry point had another name than the
    module."""
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_users.py").write_text(_USERS_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


_SESSION_END = """
import os
import sys


def pytest_sessionfinish(session):
    # What the whole run imported, the plugin's fixtures unused: written where the outer test reads it.
    loaded = session.config.pluginmanager.has_plugin("kumiko_typed.testing.plugin")
    with open(os.environ["KUMIKO_MODULES_OUT"], "w") as out:
        out.write(f"{loaded}\\n" + "\\n".join(sorted(sys.modules)))
"""


def test_a_run_that_uses_no_fixture_imports_none_of_the_library(tmp_path: Path) -> None:
    """pytest loads the plugin in every run of an environment kumiko-typed is installed in,
    a project's that never uses it too: loading it imported the whole library, SQLAlchemy
    with it (806 modules against 395, about half a second per run).  Now it imports its
    packages and itself, and the rest when a fixture is first used."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(_SESSION_END)
    (project / "test_plain.py").write_text("def test_plain() -> None:\n    assert 1 + 1 == 2\n")
    out = tmp_path / "modules.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # autoload on: the entry point
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env={**env, "KUMIKO_MODULES_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    loaded, *modules = out.read_text().splitlines()
    assert loaded == "True"
    assert "sqlalchemy" not in modules and "psycopg" not in modules
    assert [m for m in modules if m.startswith("kumiko_typed")] == [
        "kumiko_typed",
        "kumiko_typed._lazy_exports",
        "kumiko_typed.testing",
        "kumiko_typed.testing.plugin",
    ]


def test_app_settings_name_every_app_keyword() -> None:
    """The factories' keywords are AppSettings: a keyword added to App must be added there."""
    keywords = {
        name
        for name, p in inspect.signature(App).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "database_url"
    }
    assert set(AppSettings.__annotations__) == keywords


def test_kumiko_app_runs_on_each_database(kumiko_app: AppFactory, request: pytest.FixtureRequest) -> None:
    app = kumiko_app([post])
    want = "postgresql" if request.node.callspec.params["kumiko_app"] == "postgres" else "sqlite"
    assert app.engine.dialect.name == want
    assert app.outbox() == []  # its tables exist


def test_without_psycopg_the_postgres_half_is_skipped_or_required_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A project that installed kumiko-typed and pytest but not the ``testing`` extra: its
    ``kumiko_app`` tests on PostgreSQL errored with ``ModuleNotFoundError: psycopg`` (the
    harness imported it at the top); now they skip with the fix, or fail with it under CI.
    (tests/tooling/test_wheel.py runs such a project in a venv that never had psycopg.)"""
    from kumiko_typed.testing import postgres

    monkeypatch.setitem(sys.modules, "psycopg", None)  # what an import finds when it is not installed
    for name in ("CI", "KUMIKO_REQUIRE_POSTGRES", "KUMIKO_TEST_POSTGRES_URL"):
        monkeypatch.delenv(name, raising=False)
    assert postgres.start_test_postgres() is None
    assert postgres.unavailable_reason() == (
        'psycopg, the PostgreSQL driver, is not installed: pip install "kumiko-typed[testing]"'
    )
    monkeypatch.setenv("KUMIKO_REQUIRE_POSTGRES", "1")
    with pytest.raises(postgres.PostgresUnavailable, match=r"pip install \"kumiko-typed\[testing\]\""):
        postgres.start_test_postgres()
