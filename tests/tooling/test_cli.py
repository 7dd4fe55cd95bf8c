"""The ``kumiko-typed`` command line (DESIGN §9), run as users run it: the console script in
a subprocess, from the repository root, on a temporary SQLite database given with
``--database-url`` or ``KUMIKO_DATABASE_URL``.  Small app modules written to ``tmp_path``
(and put on ``PYTHONPATH``) supply broken apps, nested pipelines, outbox rows and runs."""

from __future__ import annotations

import http.server
import importlib.util
import os
import pty
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sqlalchemy as sa

from kumiko_typed import App, User
from kumiko_typed._tables import outbox as outbox_table

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "kumiko-typed"
TIMEOUT = 120


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUMIKO_DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p)
    env["TMPDIR"] = str(tmp_path)  # the demo's mail folder lands here, not in /tmp
    env["NO_COLOR"] = "1"
    env.update(extra)
    return env


def cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), *args],
        cwd=ROOT,
        env=_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def _url(tmp_path: Path, name: str = "x") -> str:
    return f"sqlite:///{tmp_path / f'{name}.sqlite3'}"


def _module(tmp_path: Path, source: str, prefix: str) -> str:
    """Write an app module to ``tmp_path`` and return its (unique) module name."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    return name


def _import(tmp_path: Path, name: str) -> ModuleType:
    """Import a module written by :func:`_module` in this process (not kept in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, tmp_path / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_console_script_is_installed() -> None:
    assert CLI.is_file(), f"{CLI} missing: is the project installed in this venv?"


def test_python_dash_m_runs_the_same_command_line(tmp_path: Path) -> None:
    """``python -m kumiko_typed`` where the console script is not on PATH (a venv not
    activated, ``pipx run``-less containers): same commands, same name in its help."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kumiko_typed",
            "check",
            "examples.inventory.app:make_app",
            "--database-url",
            _url(tmp_path),
        ],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, _explain(result)
    assert "6 handler(s), 1 query handler(s), 1 workflow(s)" in result.stdout
    usage = subprocess.run(
        [sys.executable, "-m", "kumiko_typed", "--help"],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert usage.returncode == 0 and usage.stdout.startswith("Usage: kumiko-typed "), _explain(usage)


# --- demo -------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["option", "env"])
def test_demo_runs_the_inventory_example_end_to_end(tmp_path: Path, how: str) -> None:
    url = _url(tmp_path, "demo")
    if how == "option":
        result = cli(tmp_path, "demo", "--database-url", url)
    else:
        result = cli(tmp_path, "demo", KUMIKO_DATABASE_URL=url)
    assert result.returncode == 0, _explain(result)
    out = result.stdout
    for line in ("version_conflict", "rolled back", "completed", "delivered to the maildir"):
        assert line in out, _explain(result)
    assert re.search(r"events before / after the failure\s+(\d+) / \1\b", out), _explain(result)
    assert "Traceback" not in result.stderr
    assert (tmp_path / "demo.sqlite3").is_file(), "the demo did not use the database it was given"
    assert f"The demo's tables and rows stay in {url}." in out, _explain(result)
    assert not list(tmp_path.glob("kumiko-demo-*")), "the demo left its temporary folder behind"


def test_demo_removes_its_temporary_folder(tmp_path: Path) -> None:
    result = cli(tmp_path, "demo")  # TMPDIR is tmp_path: its folder would land there
    assert result.returncode == 0, _explain(result)
    assert "delivered to the maildir" in result.stdout, _explain(result)
    assert not list(tmp_path.glob("kumiko-demo-*")), "the demo left its temporary folder behind"
    removed = re.search(r"removed the temporary folder (\S+) \(--keep keeps it\)", result.stdout)
    assert removed is not None and removed[1].startswith(str(tmp_path / "kumiko-demo-")), _explain(result)


def test_demo_keep_says_where_its_files_are(tmp_path: Path) -> None:
    result = cli(tmp_path, "demo", "--keep")
    assert result.returncode == 0, _explain(result)
    (folder,) = tmp_path.glob("kumiko-demo-*")
    assert (folder / "demo.sqlite3").is_file() and list((folder / "mail").glob("*.eml"))
    assert f"kept {folder} (the database and the mail); remove it with: rm -r {folder}" in result.stdout


def test_the_demo_on_an_unreachable_database_is_a_clear_error(tmp_path: Path) -> None:
    """Was SQLAlchemy's OperationalError with a traceback."""
    down = "postgresql+psycopg://kumiko:secret@127.0.0.1:9/nothing"  # the discard port: refused
    result = cli(tmp_path, "demo", "--database-url", down)
    assert result.returncode == 1, _explain(result)
    assert "Error: database postgresql+psycopg://kumiko:***@127.0.0.1:9/nothing: connection failed" in result.stderr
    assert "Is the server reachable" in result.stderr, _explain(result)
    assert "Traceback" not in result.stderr and "secret" not in result.stdout + result.stderr, _explain(result)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://shop:s3cret@db.internal/shop", "postgresql+psycopg://shop:***@db.internal/shop"),
        # libpq reads a password from the query too: SQLAlchemy's rendering showed this one.
        (
            "postgresql+psycopg://shop@db.internal/shop?password=s3cret&sslmode=require",
            "postgresql+psycopg://shop@db.internal/shop?password=***&sslmode=require",
        ),
        ("postgresql+psycopg:///shop?host=db&sslpassword=s3cret", "postgresql+psycopg:///shop?host=db&sslpassword=***"),
    ],
)
def test_a_shown_database_url_never_holds_its_password(url: str, shown: str) -> None:
    """What the demo and the command line print of a URL (``shown_url``)."""
    from kumiko_typed._database_urls import shown_url

    assert shown_url(url) == shown


# --- --help -----------------------------------------------------------------------------------

HELP = {
    "check": "Boot-validate MODULE:APP; exit 1 listing every problem.",
    "demo": "Run the inventory example, then remove its temporary folder.",
    "graph": "Draw the pipelines of MODULE:APP as text, Mermaid or dot.",
    "keys": "Idempotency keys: purge the expired ones.",
    "outbox": "List pending and dead deliveries; requeue one; purge sent ones.",
    "runs": "List workflow runs, newest first; cancel one; purge old ones.",
    "worker": "Deliver the outbox, fire triggers, resume runs until stopped.",
}


def test_help_lists_every_command_in_full() -> None:
    """Each command once, with its whole first sentence on an 80-column terminal (click cuts
    a long one with "..."); what each says is held to by the tests of that command."""
    from click.testing import CliRunner

    from kumiko_typed._cli import main

    result = CliRunner().invoke(main, ["--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    listed = dict(re.findall(r"^  (\w+)\s{2,}(.+)$", result.output.split("Commands:")[1], flags=re.MULTILINE))
    assert listed == HELP
    assert set(listed) == set(main.commands)
    assert "MODULE:APP" in result.output and "KUMIKO_DATABASE_URL" in result.output
    for name, command in main.commands.items():
        sub = CliRunner().invoke(main, [name, "--help"], terminal_width=80)
        assert sub.exit_code == 0, sub.output
        for param in command.params:
            for opt in getattr(param, "opts", []):
                assert opt in sub.output or param.param_type_name == "argument", (name, opt)


# --- check ------------------------------------------------------------------------------------

BROKEN = '''
    """Built without mypy: a tier-2 step the feature does not declare, and a duplicate step name."""
    import attrs

    from kumiko_typed import App, Feature, ok


    @attrs.frozen
    class Order:
        email: str


    shop = Feature("shop")  # declares no tier-2 capability
    shop.write_handler(
        "order:confirm",
        shop.pipeline(Order)
        .send_mail(to=lambda c: c.payload.email, subject="Thanks", body="We got your order.")
        .compute("total", lambda c: 1)
        .compute("total", lambda c: 2)
        .return_(lambda c: ok(c.steps["total"])),
    )
'''


@pytest.fixture
def broken_factory(tmp_path: Path) -> str:
    source = (
        BROKEN
        + """

    def make_app(database_url: str = "sqlite:///broken.sqlite3") -> App:
        return App([shop], database_url=database_url)
    """
    )
    return _module(tmp_path, source, "broken_factory") + ":make_app"


@pytest.fixture
def broken_at_import(tmp_path: Path) -> str:
    source = (
        BROKEN
        + """

    app = App([shop], database_url="sqlite:///broken.sqlite3")
    """
    )
    return _module(tmp_path, source, "broken_import") + ":app"


def test_check_inventory_example_is_ok(tmp_path: Path) -> None:
    result = cli(tmp_path, "check", "examples.inventory.app:make_app", "--database-url", _url(tmp_path))
    assert result.returncode == 0, _explain(result)
    assert "6 handler(s), 1 query handler(s), 1 workflow(s)" in result.stdout


def test_check_reads_the_url_from_the_environment(tmp_path: Path) -> None:
    result = cli(tmp_path, "check", "examples.inventory.app:make_app", KUMIKO_DATABASE_URL=_url(tmp_path, "env"))
    assert result.returncode == 0, _explain(result)
    assert (tmp_path / "env.sqlite3").is_file()


def _on_a_terminal(tmp_path: Path, *args: str, **env: str) -> bytes:
    """What a command writes to a terminal: a pseudo-terminal is its stdout and stderr."""
    screen, terminal = pty.openpty()
    environment = _env(tmp_path, **env)
    if "NO_COLOR" not in env:  # _env sets it for every other test
        del environment["NO_COLOR"]
    try:
        subprocess.run(
            [str(CLI), *args], cwd=ROOT, env=environment, stdout=terminal, stderr=terminal, timeout=TIMEOUT, check=False
        )
    finally:
        os.close(terminal)
    shown = b""
    with suppress(OSError):  # EIO: everything written has been read
        while chunk := os.read(screen, 4096):
            shown += chunk
    os.close(screen)
    return shown


@pytest.mark.parametrize("no_color", [None, "1"])
def test_no_color_turns_the_colours_off_on_a_terminal(tmp_path: Path, no_color: str | None) -> None:
    """https://no-color.org: NO_COLOR set (and not empty) means no colour even on a terminal;
    the command line coloured its ``ok``, its problem count and its tables' headers anyway."""
    env = {} if no_color is None else {"NO_COLOR": no_color}
    target = "examples.inventory.app:make_app"
    shown = _on_a_terminal(tmp_path, "check", target, "--database-url", _url(tmp_path), **env)
    assert b"ok" in shown and b"6 handler(s)" in shown, shown
    assert (b"\x1b[" in shown) is (no_color is None), shown


PLAIN_APP = """
from kumiko_typed import App, Feature

app = App([Feature("plain")], database_url="sqlite://")
"""


@pytest.mark.parametrize(
    ("how", "url", "reason"),
    [
        ("--database-url", "garbage", "Could not parse SQLAlchemy URL"),
        ("--database-url", "nosuchdb://u:hunter2@host/db", "Can't load plugin: sqlalchemy.dialects:nosuchdb"),
        ("--against", "sqlite://relative/file.db", "Invalid SQLite URL"),
        ("--database-url", "postgresql+psycopg://u:hunter2@host:port/db", "its port is not a number"),
        ("--database-url", "postgresql+psycopg://u:hun@ter:hunter2@host/db", "its port is not a number"),
        ("KUMIKO_DATABASE_URL", "garbage", "Could not parse SQLAlchemy URL"),
    ],
)
@pytest.mark.parametrize("target", ["app", "factory"])
def test_a_database_url_sqlalchemy_cannot_use_is_a_usage_error(
    tmp_path: Path, how: str, url: str, reason: str, target: str
) -> None:
    """Was a SQLAlchemy traceback (an App target) or 'calling ... raised ArgumentError' (a
    factory): now exit 2 naming where the URL came from and why, never its password."""
    name = "examples.inventory.app:make_app" if target == "factory" else _module(tmp_path, PLAIN_APP, "plain") + ":app"
    args, env = (["check", name], {how: url}) if how.isupper() else (["check", name, how, url], {})
    result = cli(tmp_path, *args, **env)
    assert result.returncode == 2, _explain(result)
    assert "Traceback" not in result.stderr and "hunter2" not in result.stderr, _explain(result)
    assert f"Invalid value for {how}: not a database URL SQLAlchemy can use ({reason}" in result.stderr, _explain(
        result
    )


@pytest.mark.parametrize("target_fixture", ["broken_factory", "broken_at_import"])
def test_check_lists_every_problem_and_exits_1(
    tmp_path: Path, target_fixture: str, request: pytest.FixtureRequest
) -> None:
    target = request.getfixturevalue(target_fixture)
    result = cli(tmp_path, "check", target, "--database-url", _url(tmp_path))
    assert result.returncode == 1, _explain(result)
    err = result.stderr
    assert "2 problem(s)" in err, _explain(result)
    problems = [line for line in err.splitlines() if line.startswith("  - ")]
    assert len(problems) == 2, _explain(result)
    tier, duplicate = sorted(problems, key=lambda p: "already used" in p)
    assert "handler shop:order:confirm" in tier
    assert 'needs the tier-2 capability "mail.send"' in tier
    assert 'add "mail.send" to Feature(..., requires=[...])' in tier
    assert 'Step name "total" is already used in this pipeline' in duplicate
    assert "Traceback" not in err


def test_other_commands_report_a_broken_app_without_traceback(tmp_path: Path, broken_factory: str) -> None:
    result = cli(tmp_path, "graph", broken_factory, "--database-url", _url(tmp_path))
    assert result.returncode != 0, _explain(result)
    assert "2 problem(s) in the app definition" in result.stderr
    assert "Traceback" not in result.stderr


UNION_PAYLOAD_APP = """
import attrs
from kumiko_typed import App, Feature, ok

@attrs.frozen
class Paid:
    amount: int

@attrs.frozen
class Refunded:
    amount: int

f = Feature("pay")
f.write_handler("take", f.pipeline(Paid | Refunded).return_(lambda c: ok(None)))

def make_app(database_url):
    return App([f], database_url=database_url)
"""


def test_graph_of_a_handler_whose_payload_is_a_union_names_it_and_the_fix(tmp_path: Path) -> None:
    """Was drawn as if it worked, while a keyed dispatch of it could not store its payload."""
    target = _module(tmp_path, UNION_PAYLOAD_APP, "union") + ":make_app"
    result = cli(tmp_path, "graph", target, "--database-url", _url(tmp_path))
    assert result.returncode == 1, _explain(result)
    assert "handler pay:take: its pipeline pipeline(...) takes " in result.stderr, _explain(result)
    assert "which is no class: a payload is one class" in result.stderr, _explain(result)
    assert "Traceback" not in result.stderr


# --- graph ------------------------------------------------------------------------------------


def test_graph_text_of_an_inventory_handler(tmp_path: Path) -> None:
    result = cli(
        tmp_path,
        "graph",
        "examples.inventory.app:make_app",
        "--handler",
        "inventory:product:bulk-adjust",
        "--database-url",
        _url(tmp_path),
    )
    assert result.returncode == 0, _explain(result)
    assert result.stdout.splitlines() == [
        "inventory:product:bulk-adjust",
        '  0. for_each "item"',
        "     do:",
        '        0. call_feature "adjusted"',
        "  1. return",
    ]


def test_graph_without_handler_draws_every_pipeline(tmp_path: Path) -> None:
    result = cli(tmp_path, "graph", "examples.inventory.app:make_app", "--database-url", _url(tmp_path))
    assert result.returncode == 0, _explain(result)
    titles = [line for line in result.stdout.splitlines() if line.startswith("inventory:")]
    assert len(titles) == 8  # 6 write handlers, 1 query handler and 1 workflow
    assert {"inventory:restock-reminder", "inventory:report:low-stock"} <= set(titles)
    assert "  0. workflow.wait" in result.stdout


def test_graph_unknown_handler_lists_the_known_names(tmp_path: Path) -> None:
    result = cli(
        tmp_path,
        "graph",
        "examples.inventory.app:make_app",
        "--handler",
        "inventory:product:nope",
        "--database-url",
        _url(tmp_path),
    )
    assert result.returncode != 0, _explain(result)
    assert "no handler or workflow named 'inventory:product:nope'" in result.stderr
    for known in ("inventory:product:adjust-stock", "inventory:product:bulk-adjust", "inventory:restock-reminder"):
        assert known in result.stderr
    assert "Traceback" not in result.stderr


TWO_SHOPS = '''
    """Two features with a handler of the same name, and a branch with an empty arm."""
    import attrs

    from kumiko_typed import App, Feature, ok


    @attrs.frozen
    class Ping:
        loud: bool


    shop = Feature("shop")
    shop.write_handler(
        "ping",
        shop.pipeline(Ping)
        .branch(when=lambda c: c.payload.loud, on_true=lambda b: b.compute("shout", lambda c: "PING"))
        .return_(lambda c: ok(True)),
    )
    shop2 = Feature("shop2")
    shop2.write_handler("ping", shop2.pipeline(Ping).return_(lambda c: ok(False)))
    shop2.write_handler("order:pong", shop2.pipeline(Ping).return_(lambda c: ok(False)))


    def make_app(database_url: str = "sqlite:///two.sqlite3") -> App:
        return App([shop, shop2], database_url=database_url)
'''


def _graph_in_process(tmp_path: Path, target: str, *args: str) -> Any:
    """``kumiko-typed graph`` run in this process (click's runner): quicker than a subprocess."""
    from click.testing import CliRunner

    from kumiko_typed._cli import main

    return CliRunner().invoke(main, ["graph", target, *args, "--database-url", _url(tmp_path)])


def test_graph_handler_takes_an_unambiguous_short_name(tmp_path: Path) -> None:
    full = _graph_in_process(tmp_path, "examples.inventory.app:make_app", "--handler", "inventory:product:adjust-stock")
    assert full.exit_code == 0, full.output
    assert full.stdout.startswith("inventory:product:adjust-stock\n")
    for short in ("adjust-stock", "product:adjust-stock"):
        result = _graph_in_process(tmp_path, "examples.inventory.app:make_app", "--handler", short)
        assert (result.exit_code, result.stdout) == (0, full.stdout), result.output
    workflow = _graph_in_process(tmp_path, "examples.inventory.app:make_app", "--handler", "restock-reminder")
    assert workflow.exit_code == 0 and workflow.stdout.startswith("inventory:restock-reminder\n"), workflow.output
    # Only a whole ":"-separated end counts: "stock" is not the end of "adjust-stock".
    partial = _graph_in_process(tmp_path, "examples.inventory.app:make_app", "--handler", "stock")
    assert partial.exit_code == 1 and "no handler or workflow named 'stock'" in partial.stderr, partial.output


def test_graph_handler_refuses_an_ambiguous_short_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    target = _module(tmp_path, TWO_SHOPS, "two") + ":make_app"
    result = _graph_in_process(tmp_path, target, "--handler", "ping")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert "'ping' is ambiguous: it could be shop2:ping, shop:ping" in result.stderr, result.output
    assert "Traceback" not in result.output
    # A full name is taken as it is, though it is also the end of no other name.
    exact = _graph_in_process(tmp_path, target, "--handler", "shop:ping")
    assert exact.exit_code == 0 and exact.stdout.startswith("shop:ping\n"), exact.output
    assert _graph_in_process(tmp_path, target, "--handler", "pong").stdout.startswith("shop2:order:pong\n")


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_graph_labels_the_edge_past_an_empty_arm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """A branch without ``on_false`` goes straight on to the next step when false: that
    edge is the ``false`` one, the edge into ``on_true`` the ``true`` one."""
    monkeypatch.syspath_prepend(str(tmp_path))
    target = _module(tmp_path, TWO_SHOPS, "two") + ":make_app"
    result = _graph_in_process(tmp_path, target, "--handler", "shop:ping", "--format", fmt)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    ids = dict(re.findall(r'^\s*(s\d+) ?\[(?:label=)?"((?:[^"\\]|\\.)*)"\]', result.stdout, flags=re.MULTILINE))
    node = {label.replace("#quot;", '"').replace('\\"', '"'): i for i, label in ids.items()}
    assert _edges(lines, fmt) == {
        ("start", node["branch"]): "",
        (node["branch"], node['compute "shout"']): "true",
        (node['compute "shout"'], node["return"]): "",
        (node["branch"], node["return"]): "false",
    }


NESTED = '''
    """A handler whose for_each body holds a branch."""
    import attrs

    from kumiko_typed import App, Feature, ok


    @attrs.frozen
    class Line:
        sku: str
        qty: int


    @attrs.frozen
    class Order:
        lines: list[Line]


    shop = Feature("shop")
    check_lines = shop.write_handler(
        "order:check",
        shop.pipeline(Order)
        .compute("count", lambda c: len(c.payload.lines))
        .for_each(
            "line",
            over=lambda c: c.payload.lines,
            do=lambda b: b.compute("qty", lambda c: c.scope["line"].qty).branch(
                when=lambda c: c.scope["line"].qty > 10,
                on_true=lambda b: b.compute("big", lambda c: c.scope["line"].sku),
                on_false=lambda b: b.compute("small", lambda c: c.scope["line"].sku),
            ),
        )
        .return_(lambda c: ok(c.steps["count"])),
    )


    def make_app(database_url: str = "sqlite:///nested.sqlite3") -> App:
        return App([shop], database_url=database_url)
'''


@pytest.fixture
def nested(tmp_path: Path) -> str:
    return _module(tmp_path, NESTED, "nested") + ":make_app"


def _graph(tmp_path: Path, target: str, fmt: str) -> str:
    result = cli(
        tmp_path, "graph", target, "--handler", "shop:order:check", "--format", fmt, "--database-url", _url(tmp_path)
    )
    assert result.returncode == 0, _explain(result)
    return result.stdout


def test_graph_text_nests_branch_inside_for_each(tmp_path: Path, nested: str) -> None:
    assert _graph(tmp_path, nested, "text").splitlines() == [
        "shop:order:check",
        '  0. compute "count"',
        '  1. for_each "line"',
        "     do:",
        '        0. compute "qty"',
        "        1. branch",
        "           on_true:",
        '              0. compute "big"',
        "           on_false:",
        '              0. compute "small"',
        "  2. return",
    ]


def _groups_of_nodes(
    lines: list[str],
    *,
    open_group: re.Pattern[str],
    close: str,
    node: re.Pattern[str],
    label: re.Pattern[str] | None = None,
) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """For each node label, the labels of the groups around it (outermost first); and
    node id -> label.  A group is labelled on its opening line, or (``label``) by the
    first matching line inside it."""
    where: dict[str, tuple[str, ...]] = {}
    ids: dict[str, str] = {}
    stack: list[str] = []
    for raw in lines:
        line = raw.strip()
        if m := open_group.match(line):
            stack.append(m.groupdict().get("label") or "")
            # a group is indented one level deeper than the group around it
            assert len(raw) - len(raw.lstrip()) == 2 * len(stack), raw
        elif line == close and stack:
            stack.pop()
        elif label is not None and stack and not stack[-1] and (m := label.match(line)):
            stack[-1] = m["label"]
        elif m := node.match(line):
            ids[m["id"]] = m["label"]
            where[m["label"]] = tuple(stack)
    assert not stack, f"unclosed groups: {stack}"
    return where, ids


_EDGE = {
    "mermaid": re.compile(r"^(?P<a>\w+) -->(?:\|(?P<label>[^|]+)\|)? (?P<b>\w+)$"),
    "dot": re.compile(r'^(?P<a>\w+) -> (?P<b>\w+)(?: \[label="(?P<label>[^"]+)"\])?;$'),
}


def _edges(lines: list[str], fmt: str) -> dict[tuple[str, str], str]:
    """(from, to) -> the edge's label ("" for none), for every edge line of a drawing."""
    found = [_EDGE[fmt].match(line.strip()) for line in lines if " -->" in line or " -> " in line]
    assert all(found), lines
    return {(m["a"], m["b"]): m["label"] or "" for m in found if m}


def test_graph_mermaid_nests_subgraphs(tmp_path: Path, nested: str) -> None:
    out = _graph(tmp_path, nested, "mermaid")
    lines = out.splitlines()
    assert lines[0] == "flowchart TD"
    assert lines[1] == '  start(["shop:order:check"])'
    assert sum(1 for line in lines if line.strip().startswith("subgraph ")) == 3
    assert sum(1 for line in lines if line.strip() == "end") == 3
    where, ids = _groups_of_nodes(
        lines,
        open_group=re.compile(r'^subgraph \w+\["(?P<label>[^"]+)"\]$'),
        close="end",
        node=re.compile(r'^(?P<id>s\d+)\["(?P<label>[^"]*)"\]$'),
    )
    q = "#quot;"
    assert where == {
        f"compute {q}count{q}": (),
        f"for_each {q}line{q}": (),
        f"compute {q}qty{q}": ("do",),
        "branch": ("do",),
        f"compute {q}big{q}": ("do", "on_true"),
        f"compute {q}small{q}": ("do", "on_false"),
        "return": (),
    }
    by_label = {label: node for node, label in ids.items()}
    edges = _edges(lines, "mermaid")
    assert edges[by_label["branch"], by_label[f"compute {q}big{q}"]] == "true"
    assert edges[by_label["branch"], by_label[f"compute {q}small{q}"]] == "false"
    assert edges[by_label[f"for_each {q}line{q}"], by_label["return"]] == ""
    assert {b for _, b in edges} == set(ids), "every step has an incoming edge"
    assert sorted(label for label in edges.values() if label) == ["false", "true"]


QUOTED_NAMES = """
import attrs
from kumiko_typed import App, Feature, ok


@attrs.frozen
class Ask:
    n: int


shop = Feature("shop")
shop.write_handler(
    'say "hi" #1;', shop.pipeline(Ask).compute('a "b" #35;', lambda c: 1).return_(lambda c: ok(1))
)
app = App([shop], database_url="sqlite://")
"""


def test_graph_mermaid_escapes_quotes_and_entity_codes_in_every_name(tmp_path: Path) -> None:
    """Inside Mermaid's ``["..."]`` a ``"`` ends the text and ``#...;`` is an entity code: the
    title (the handler's name) was written as it is, which Mermaid cannot parse, and a ``#``
    in a step's name was read as the start of an entity."""
    target = _module(tmp_path, QUOTED_NAMES, "quoted") + ":app"
    result = cli(tmp_path, "graph", target, "--format", "mermaid")
    assert result.returncode == 0, _explain(result)
    lines = result.stdout.splitlines()
    assert lines[1] == '  start(["shop:say #quot;hi#quot; #35;1;"])'
    assert lines[2] == '  s1["compute #quot;a #quot;b#quot; #35;35;#quot;"]'


def test_graph_dot_nests_clusters(tmp_path: Path, nested: str) -> None:
    out = _graph(tmp_path, nested, "dot")
    lines = out.splitlines()
    assert lines[0] == "digraph pipeline {" and lines[-1] == "}"
    assert out.count("{") == out.count("}")
    assert sum(1 for line in lines if re.match(r"^\s*subgraph cluster_\w+ \{$", line)) == 3
    where, ids = _groups_of_nodes(
        lines[1:-1],
        open_group=re.compile(r"^subgraph cluster_\w+ \{$"),
        close="}",
        label=re.compile(r'^label="(?P<label>[^"]+)";$'),
        node=re.compile(r'^(?P<id>s\d+) \[label="(?P<label>(?:[^"\\]|\\.)*)"\];$'),
    )
    assert where == {
        r"compute \"count\"": (),
        r"for_each \"line\"": (),
        r"compute \"qty\"": ("do",),
        "branch": ("do",),
        r"compute \"big\"": ("do", "on_true"),
        r"compute \"small\"": ("do", "on_false"),
        "return": (),
    }
    edges = _edges(lines, "dot")
    by_label = {label: node for node, label in ids.items()}
    assert edges[by_label["branch"], by_label[r"compute \"big\""]] == "true"
    assert edges[by_label["branch"], by_label[r"compute \"small\""]] == "false"
    assert {b for _, b in edges} == set(ids)
    assert sorted(label for label in edges.values() if label) == ["false", "true"]


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_graph_joins_the_arms_of_a_branch(tmp_path: Path, fmt: str) -> None:
    """The README's diagram: the step after a branch follows both arms, and the branch node
    stays outside its arms' groups."""
    result = cli(
        tmp_path,
        "graph",
        "examples.inventory.app:make_app",
        "--handler",
        "inventory:product:adjust-stock",
        "--format",
        fmt,
        "--database-url",
        _url(tmp_path),
    )
    assert result.returncode == 0, _explain(result)
    lines = result.stdout.splitlines()
    if fmt == "mermaid":
        where, ids = _groups_of_nodes(
            lines,
            open_group=re.compile(r'^subgraph \w+\["(?P<label>[^"]+)"\]$'),
            close="end",
            node=re.compile(r'^(?P<id>s\d+)\["(?P<label>[^"]*)"\]$'),
        )
    else:
        where, ids = _groups_of_nodes(
            lines[1:-1],
            open_group=re.compile(r"^subgraph cluster_\w+ \{$"),
            close="}",
            label=re.compile(r'^label="(?P<label>[^"]+)";$'),
            node=re.compile(r'^(?P<id>s\d+) \[label="(?P<label>(?:[^"\\]|\\.)*)"\];$'),
        )
    edges = _edges(lines, fmt)
    node = {label: i for i, label in ids.items()}
    assert where["branch"] == ()
    assert where["unsafe_projection_upsert"] == ("on_true",)
    assert where["unsafe_projection_delete"] == ("on_false",)
    assert where["return"] == ()
    into_return = {a for a, b in edges if b == node["return"]}
    assert into_return == {node["unsafe_projection_upsert"], node["unsafe_projection_delete"]}
    assert {b for a, b in edges if a == node["branch"]} == into_return
    assert edges[node["branch"], node["unsafe_projection_upsert"]] == "true"
    assert edges[node["branch"], node["unsafe_projection_delete"]] == "false"
    assert {edges[a, node["return"]] for a in into_return} == {""}
    # Every edge is written after the groups, at the top level.
    first_edge = next(i for i, line in enumerate(lines) if " -->" in line or " -> " in line)
    assert all(" -->" in line or " -> " in line for line in lines[first_edge:] if line != "}")


# --- runs and outbox ----------------------------------------------------------------------------

TINY = '''
    """A webhook handler and a workflow that waits a day: rows for `outbox` and `runs`."""
    from datetime import timedelta

    import attrs

    from kumiko_typed import App, Feature, RetryPolicy, manual, ok


    @attrs.frozen
    class Ping:
        url: str


    @attrs.frozen
    class Remind:
        note: str


    tiny = Feature("tiny", requires=["webhook.send"])
    ping = tiny.write_handler(
        "ping",
        tiny.pipeline(Ping)
        .send_webhook(url=lambda c: c.payload.url, body=lambda c: {"hello": "world"}, retry=RetryPolicy(times=1))
        .return_(lambda c: ok(True)),
    )
    remind = tiny.workflow(
        "remind",
        trigger=manual(Remind),
        pipeline=tiny.workflow_pipeline(Remind).compute("note", lambda c: c.payload.note).wait(timedelta(days=1)),
    )
    fail = tiny.workflow(  # fails at its first step: a run with an error code
        "fail",
        trigger=manual(Remind),
        pipeline=tiny.workflow_pipeline(Remind).compute("boom", lambda c: 1 // 0),
    )


    def make_app(database_url: str = "sqlite:///tiny.sqlite3") -> App:
        app = App([tiny], database_url=database_url)
        app.create_all()
        return app


    def make_bare_app(database_url: str = "sqlite:///tiny.sqlite3") -> App:
        return App([tiny], database_url=database_url)  # no tables created
'''


class _Fail(http.server.BaseHTTPRequestHandler):
    """A peer that answers every delivery 500: ping's one try makes its row dead."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class Tiny:
    def __init__(self, tmp_path: Path, dead_url: str) -> None:
        self.dead_url = dead_url
        self.name = _module(tmp_path, TINY, "tiny")
        self.target = f"{self.name}:make_app"
        self.url = _url(tmp_path, "tiny")
        self.module = _import(tmp_path, self.name)
        self.user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())

    def app(self) -> App:
        app: App = self.module.make_app(self.url)
        return app

    def dispatch_ping(self) -> None:
        app = self.app()
        try:
            result: Any = app.dispatch(self.module.ping, self.module.Ping(self.dead_url), user=self.user)
            assert result.data is True, result
        finally:
            app.dispose()

    def start_remind(self, workflow: str = "remind") -> uuid.UUID:
        app = self.app()
        try:
            run_id: uuid.UUID = app.start_workflow(
                getattr(self.module, workflow), self.module.Remind("call the supplier"), user=self.user
            )
            return run_id
        finally:
            app.dispose()

    def run(self, run_id: uuid.UUID) -> Any:
        app = self.app()
        try:
            return app.get_run(run_id)
        finally:
            app.dispose()

    def outbox(self) -> list[Any]:
        app = self.app()
        try:
            return app.outbox()
        finally:
            app.dispose()

    def outbox_statuses(self) -> list[str]:
        app = self.app()
        try:
            return [item.status for item in app.outbox()]
        finally:
            app.dispose()


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Tiny]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Fail)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Tiny(tmp_path, f"http://127.0.0.1:{server.server_port}/hook")
    finally:
        server.shutdown()
        server.server_close()


def _rows(output: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in output.splitlines()]


def _table(output: str) -> list[dict[str, str]]:
    """The rows of a CLI table, each cell read at its header's column (cells may be empty)."""
    header, *lines = output.splitlines()
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=  ))\S", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    return [
        {name: line[a:b].strip() for name, a, b in zip(names, starts, [*starts[1:], None], strict=True)}
        for line in lines
    ]


def _utc(at: Any) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S}"


def test_runs_and_outbox_are_empty_at_first(tmp_path: Path, tiny: Tiny) -> None:
    tiny.app().dispose()  # its tables created: a listing creates no database
    for command in ("runs", "outbox"):
        result = cli(tmp_path, command, tiny.target, "--database-url", tiny.url)
        assert result.returncode == 0, _explain(result)
        assert result.stdout.strip() == "(none)"


def test_runs_lists_a_suspended_run(tmp_path: Path, tiny: Tiny) -> None:
    run_id = tiny.start_remind()
    result = cli(tmp_path, "runs", tiny.target, "--database-url", tiny.url)
    assert result.returncode == 0, _explain(result)
    header = ["run", "workflow", "status", "at", "wakes", "created", "updated", "definition", "error"]
    assert _rows(result.stdout)[0] == header
    (row,) = _table(result.stdout)
    info = tiny.run(run_id)
    assert info.created_at is not None and info.updated_at is not None
    assert row == {
        "run": str(run_id),
        "workflow": "tiny:remind",
        "status": "suspended",
        "at": "@wait",
        "wakes": _utc(info.wake_at),
        "created": _utc(info.created_at),
        "updated": _utc(info.updated_at),
        "definition": (info.fingerprint or "")[:12],
        "error": "",
    }

    only = cli(tmp_path, "runs", tiny.target, "--workflow", "tiny:other", KUMIKO_DATABASE_URL=tiny.url)
    assert only.returncode == 0 and only.stdout.strip() == "(none)", _explain(only)
    # An empty list for a name the App does not register says so (a typo reads as "no runs"
    # otherwise); still exit 0, as a removed workflow's name may have runs.
    assert "registers no workflow 'tiny:other'" in only.stderr, _explain(only)
    assert "tiny:remind" in only.stderr
    same = cli(tmp_path, "runs", tiny.target, "--workflow", "tiny:remind", KUMIKO_DATABASE_URL=tiny.url)
    assert same.returncode == 0 and str(run_id) in same.stdout, _explain(same)
    assert "registers no workflow" not in same.stderr


def test_runs_shows_a_failed_runs_error_code(tmp_path: Path, tiny: Tiny) -> None:
    failed = tiny.start_remind("fail")
    waiting = tiny.start_remind()
    result = cli(tmp_path, "runs", tiny.target, "--database-url", tiny.url)
    assert result.returncode == 0, _explain(result)
    rows = {row["run"]: row for row in _table(result.stdout)}
    assert (rows[str(failed)]["status"], rows[str(failed)]["error"]) == ("failed", "internal_error")
    assert rows[str(failed)]["created"] == _utc(tiny.run(failed).created_at)
    assert (rows[str(waiting)]["status"], rows[str(waiting)]["error"]) == ("suspended", "")
    assert "ZeroDivisionError" not in result.stdout  # the code, not the message


WIDE = """
import attrs
from kumiko_typed import App, Feature, manual


@attrs.frozen
class Order:
    item: str


shop = Feature("shop")
for name in ("注文の確認", "order", "e\u0301te\u0301"):  # wide characters, combining accents
    shop.workflow(name, trigger=manual(Order), pipeline=shop.workflow_pipeline(Order).wait("P1D"))


def make_app(database_url: str) -> App:
    app = App([shop], database_url=database_url)
    app.create_all()
    return app
"""


def _columns(text: str) -> int:
    """How many columns ``text`` takes on a terminal."""
    return sum(
        0 if unicodedata.category(c) in ("Mn", "Me") else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def test_runs_keeps_its_columns_with_wide_and_combining_characters(tmp_path: Path) -> None:
    """A name in Japanese, or with combining accents, pushed the rest of its row out of its
    column: the table padded by code points, not by the columns a terminal shows."""
    name = _module(tmp_path, WIDE, "wide")
    module = _import(tmp_path, name)
    app: App = module.make_app(_url(tmp_path))
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    for workflow in app.workflows.values():
        app.start_workflow(workflow, module.Order("tea"), user=user)
    app.dispose()
    result = cli(tmp_path, "runs", f"{name}:make_app", "--database-url", _url(tmp_path))
    assert result.returncode == 0, _explain(result)
    lines = result.stdout.splitlines()
    assert any("注文の確認" in line for line in lines) and len(lines) == 4
    starts = {_columns(line[: line.index(word)]) for line, word in zip(lines, ["status", *["suspended"] * 3])}
    assert len(starts) == 1, result.stdout


def test_runs_by_status_a_page_at_a_time(tmp_path: Path, tiny: Tiny) -> None:
    """--status (repeatable), --limit and --before: the listing of ``app.runs`` with those
    arguments; a full page says on stderr how to list the next one."""
    failed = [tiny.start_remind("fail") for _ in range(2)]
    waiting = tiny.start_remind()
    url = ("--database-url", tiny.url)

    only_failed = cli(tmp_path, "runs", tiny.target, "--status", "failed", *url)
    assert only_failed.returncode == 0, _explain(only_failed)
    assert [row["run"] for row in _table(only_failed.stdout)] == [str(r) for r in failed[::-1]]
    both = cli(tmp_path, "runs", "list", tiny.target, "--status", "failed", "--status", "suspended", *url)
    assert {row["run"] for row in _table(both.stdout)} == {str(r) for r in (*failed, waiting)}, _explain(both)
    mixed = cli(tmp_path, "runs", tiny.target, "--status", "completed", "--workflow", "tiny:remind", *url)
    assert mixed.returncode == 0 and mixed.stdout.strip() == "(none)", _explain(mixed)

    first = cli(tmp_path, "runs", tiny.target, "--limit", "2", *url)
    assert [row["run"] for row in _table(first.stdout)] == [str(waiting), str(failed[1])], _explain(first)
    assert first.stderr.strip() == f"more: add --before {failed[1]}"
    rest = cli(tmp_path, "runs", tiny.target, "--limit", "2", "--before", str(failed[1]), *url)
    assert [row["run"] for row in _table(rest.stdout)] == [str(failed[0])], _explain(rest)
    assert rest.stderr == ""  # the last page

    other = uuid.uuid4()
    tiny.user, mine = User(id=uuid.uuid4(), tenant_id=other), tiny.user
    theirs = tiny.start_remind()
    by_tenant = cli(tmp_path, "runs", tiny.target, "--tenant", str(other), *url)
    assert [row["run"] for row in _table(by_tenant.stdout)] == [str(theirs)], _explain(by_tenant)
    by_mine = cli(tmp_path, "runs", tiny.target, "--tenant", str(mine.tenant_id), "--status", "failed", *url)
    assert [row["run"] for row in _table(by_mine.stdout)] == [str(r) for r in failed[::-1]], _explain(by_mine)
    app = tiny.app()
    try:
        keyed = app.start_workflow(tiny.module.remind, tiny.module.Remind("call"), user=tiny.user, key="call-1")
    finally:
        app.dispose()
    by_key = cli(tmp_path, "runs", tiny.target, "--tenant", str(other), "--key", "call-1", *url)
    assert [row["run"] for row in _table(by_key.stdout)] == [str(keyed)], _explain(by_key)
    no_tenant = cli(tmp_path, "runs", tiny.target, "--key", "call-1", *url)
    assert no_tenant.returncode == 2 and "--key needs --tenant" in no_tenant.stderr, _explain(no_tenant)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--status", "faild"], "'faild' is not one of 'running', 'suspended', 'completed', 'failed', 'cancelled'"),
        (["--limit", "0"], "0 is not in the range x>=1"),
        (["--limit", "many"], "'many' is not a valid integer"),
        (["--before", "nope"], "'nope' is not a valid UUID"),
        (["--tenant", "acme"], "'acme' is not a valid UUID"),
    ],
)
def test_runs_refuses_a_bad_option_as_a_usage_error(
    tmp_path: Path, tiny: Tiny, option: list[str], message: str
) -> None:
    result = cli(tmp_path, "runs", tiny.target, *option, "--database-url", tiny.url)
    assert result.returncode == 2 and message in result.stderr, _explain(result)
    assert "Traceback" not in result.stderr


def test_runs_before_a_run_that_does_not_exist_is_a_clear_error(tmp_path: Path, tiny: Tiny) -> None:
    tiny.start_remind()
    unknown = uuid.uuid4()
    result = cli(tmp_path, "runs", tiny.target, "--before", str(unknown), "--database-url", tiny.url)
    assert result.returncode == 2, _explain(result)
    assert f"Invalid value for '--before': no run {unknown}" in result.stderr and "Traceback" not in result.stderr


#: Each command that lists or changes what a database holds, after its TARGET.
ON_A_DATABASE = {
    "runs list": [],
    "runs cancel": [str(uuid.UUID(int=1))],
    "runs purge": ["--older-than", "P30D"],
    "outbox list": [],
    "outbox requeue": [str(uuid.UUID(int=1))],
    "outbox purge": ["--older-than", "P30D"],
    "keys purge": [],
}


def _no_database_made(tmp_path: Path, result: subprocess.CompletedProcess[str], given_by: str, name: str) -> None:
    """The command refused a missing SQLite file as a usage error naming where its URL came
    from, and neither the file nor its journal is there."""
    assert result.returncode == 2, _explain(result)
    assert f"Invalid value for {given_by}: there is no SQLite database" in result.stderr, _explain(result)
    assert "does not create one" in result.stderr and "Traceback" not in result.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(name)] == []


@pytest.mark.parametrize("command", list(ON_A_DATABASE))
def test_a_command_on_a_database_that_is_not_there_creates_none(tmp_path: Path, tiny: Tiny, command: str) -> None:
    """Connecting to a SQLite file creates it: ``runs list`` on a mistyped path left an
    empty database there and then said only that its tables were missing.  Each command
    that lists or changes what a database holds refuses a missing file before anything
    connects (before a factory runs, which may create its tables)."""
    missing = tmp_path / "missing.sqlite3"
    target = f"{tiny.name}:make_bare_app"
    result = cli(tmp_path, *command.split(), target, *ON_A_DATABASE[command], "--database-url", f"sqlite:///{missing}")
    _no_database_made(tmp_path, result, "--database-url", "missing")


def test_a_listing_on_a_database_that_is_not_there_creates_none_whoever_named_it(tmp_path: Path) -> None:
    """The URL from the environment, and the App's own, are refused the same way."""
    own = tmp_path / "theirs.sqlite3"
    source = f"""
        from kumiko_typed import App, Feature

        app = App([Feature("own")], database_url={f"sqlite:///{own}"!r})
    """
    name = _module(tmp_path, source, "own")
    from_env = cli(tmp_path, "runs", f"{name}:app", KUMIKO_DATABASE_URL=f"sqlite:///{tmp_path / 'env.sqlite3'}")
    _no_database_made(tmp_path, from_env, "KUMIKO_DATABASE_URL", "env")
    its_own = cli(tmp_path, "outbox", f"{name}:app")
    _no_database_made(tmp_path, its_own, f"the database_url of {name}:app", "theirs")


def test_outbox_lists_a_pending_delivery(tmp_path: Path, tiny: Tiny) -> None:
    tiny.dispatch_ping()
    result = cli(tmp_path, "outbox", tiny.target, KUMIKO_DATABASE_URL=tiny.url)
    assert result.returncode == 0, _explain(result)
    header = _rows(result.stdout)[0]
    assert header == ["id", "kind", "status", "attempts", "next attempt", "target", "last error"]
    (row,) = _table(result.stdout)
    (item,) = tiny.outbox()
    assert row == {
        "id": str(item.id),
        "kind": "webhook",
        "status": "pending",
        "attempts": "0",
        "next attempt": _utc(item.next_attempt_at),
        "target": tiny.dead_url,
        "last error": "",
    }


def test_outbox_lists_a_page_at_a_time(tmp_path: Path, tiny: Tiny) -> None:
    """``--limit`` and ``--after`` page through the deliveries, oldest first; a full page
    says on stderr how to list the next; an ``--after`` that is no row is a usage error."""
    for _ in range(3):
        tiny.dispatch_ping()
    ids = [str(i.id) for i in tiny.outbox()]
    url = ("--database-url", tiny.url)
    first = cli(tmp_path, "outbox", "list", tiny.target, "--limit", "2", *url)
    assert [row["id"] for row in _table(first.stdout)] == ids[:2], _explain(first)
    assert first.stderr.strip() == f"more: add --after {ids[1]}"
    rest = cli(tmp_path, "outbox", tiny.target, "--limit", "2", "--after", ids[1], *url)
    assert [row["id"] for row in _table(rest.stdout)] == ids[2:], _explain(rest)
    assert rest.stderr == ""  # the last page
    unknown = uuid.uuid4()
    wrong = cli(tmp_path, "outbox", tiny.target, "--after", str(unknown), *url)
    assert wrong.returncode == 2, _explain(wrong)
    assert f"Invalid value for '--after': no outbox row {unknown}" in wrong.stderr
    assert "Traceback" not in wrong.stderr


@pytest.mark.parametrize(
    ("signum", "verbose"), [(signal.SIGTERM, False), (signal.SIGINT, True)], ids=["SIGTERM", "SIGINT-verbose"]
)
def test_worker_delivers_then_stops_on_signal(
    tmp_path: Path, tiny: Tiny, signum: signal.Signals, verbose: bool
) -> None:
    tiny.dispatch_ping()
    proc = subprocess.Popen(
        [str(CLI), "worker", tiny.target, "--database-url", tiny.url, "--poll-interval", "0.2"]
        + (["-v"] if verbose else []),
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while tiny.outbox_statuses() != ["dead"]:
            assert proc.poll() is None, f"the worker exited early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the worker did not deliver the outbox row"
            time.sleep(0.1)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    assert f"{signum.name}: stopping after this pass" in err
    assert "Traceback" not in err
    counts = dict(pair.split("=") for pair in out.split())
    assert counts == {"started": "0", "resumed": "0", "sent": "0", "retried": "0", "dead": "1"}, out
    # -v: a line at INFO on stderr per pass that did something; they add up to the total.
    passes = re.findall(r"^\S+ \S+ INFO kumiko_typed: worker pass: (.+)$", err, flags=re.MULTILINE)
    if not verbose:
        assert passes == [] and "worker pass" not in err, err
    else:
        assert passes, err  # at least the pass that made the row dead
        summed = {key: 0 for key in counts}
        for line in passes:
            for key, value in (pair.split("=") for pair in line.split()):
                summed[key] += int(value)
        assert summed == {key: int(value) for key, value in counts.items()}, err

    result = cli(tmp_path, "outbox", tiny.target, "--database-url", tiny.url)
    assert result.returncode == 0, _explain(result)
    (row,) = _table(result.stdout)
    assert (row["kind"], row["status"], row["attempts"], row["next attempt"]) == ("webhook", "dead", "1", "")
    assert row["last error"] == "HTTP 500 Internal Server Error"


HANG = '''
    """A workflow whose second step never ends: it waits for a file nobody writes."""
    import time
    from datetime import timedelta
    from pathlib import Path

    import attrs

    from kumiko_typed import App, Feature, manual


    @attrs.frozen
    class Folder:
        path: str


    def block(folder: str) -> int:
        Path(folder, "started").touch()
        deadline = time.monotonic() + 600
        while not Path(folder, "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return 1


    hang = Feature("hang")
    stuck = hang.workflow(
        "stuck",
        trigger=manual(Folder),
        pipeline=hang.workflow_pipeline(Folder)
        .wait(timedelta(seconds=1))
        .compute("x", lambda c: block(c.payload.path)),
    )


    def make_app(database_url: str) -> App:
        app = App([hang], database_url=database_url)
        app.create_all()
        return app
'''


def test_a_second_signal_ends_a_worker_whose_pass_does_not_end(tmp_path: Path) -> None:
    """A step that never returns kept the worker past SIGTERM and SIGINT alike: only
    SIGKILL ended it.  The first signal still lets the pass finish; the second exits."""
    name = _module(tmp_path, HANG, "hang")
    module = _import(tmp_path, name)
    url = _url(tmp_path, "hang")
    app = module.make_app(url)
    try:
        run_id = app.start_workflow(module.stuck, module.Folder(str(tmp_path)), user=User(uuid.uuid4(), uuid.uuid4()))
    finally:
        app.dispose()
    proc = subprocess.Popen(
        [str(CLI), "worker", f"{name}:make_app", "--database-url", url, "--poll-interval", "0.2"],
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()

    def wait_for(done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 60
        while not done():
            assert proc.poll() is None, f"the worker exited early: {lines}"
            assert time.monotonic() < deadline, f"{what}: {lines}"
            time.sleep(0.05)

    try:
        wait_for((tmp_path / "started").exists, "the worker did not reach the blocking step")
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: any("SIGTERM: stopping after this pass" in line for line in lines), "no first notice")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(timeout=30)
    err = "".join(lines)
    assert proc.returncode == 128 + signal.SIGINT, f"exit {proc.returncode}\n{err}"
    assert "SIGINT again: exiting now, without finishing the pass" in err, err
    assert "Traceback" not in err
    app = module.make_app(url)
    try:  # nothing of the unfinished step was written: the run is as the pass found it
        assert app.get_run(run_id).status in ("running", "suspended")
    finally:
        app.dispose()


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "inf", "soon"])
def test_worker_refuses_a_poll_interval_that_is_no_positive_number(tmp_path: Path, tiny: Tiny, interval: str) -> None:
    """A usage error, before anything runs: 0 or less polled in a busy loop, NaN and inf
    ended in a traceback from the idle wait."""
    result = cli(tmp_path, "worker", tiny.target, "--once", "--poll-interval", interval, "--database-url", tiny.url)
    assert result.returncode == 2 and "Invalid value for '--poll-interval'" in result.stderr, _explain(result)
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_outbox_shows_a_stored_error_without_its_control_characters(tmp_path: Path, tiny: Tiny) -> None:
    """A peer's text in a stored error (an SMTP reply, a reason phrase) reaches the
    operator's terminal as escapes, not as the sequences it would act on."""
    tiny.dispatch_ping()
    hostile = "550 \x1b[2J\x1b]0;owned\x07 gone\u202e"
    engine = sa.create_engine(tiny.url)
    with engine.begin() as conn:
        conn.execute(sa.update(outbox_table).values(last_error=hostile))
    engine.dispose()
    result = cli(tmp_path, "outbox", tiny.target, "--database-url", tiny.url)
    assert result.returncode == 0, _explain(result)
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout and "\u202e" not in result.stdout
    (row,) = _table(result.stdout)
    assert row["last error"] == "550 \\x1b[2J\\x1b]0;owned\\x07 gone\\u202e"


class _Accept(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_outbox_all_includes_sent_rows(tmp_path: Path, tiny: Tiny) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Accept)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        app = tiny.app()
        try:
            sent: Any = app.dispatch(
                tiny.module.ping, tiny.module.Ping(f"http://127.0.0.1:{server.server_port}/hook"), user=tiny.user
            )
            assert sent.data is True, sent
            counts = app.run_worker(once=True)
        finally:
            app.dispose()
    finally:
        server.shutdown()
        server.server_close()
    assert counts["sent"] == 1, counts
    pending = cli(tmp_path, "outbox", tiny.target, "--database-url", tiny.url)
    assert pending.returncode == 0 and pending.stdout.strip() == "(none)", _explain(pending)
    tiny.dispatch_ping()  # a pending row after the sent one
    everything = cli(tmp_path, "outbox", tiny.target, "--all", "--database-url", tiny.url)
    assert everything.returncode == 0, _explain(everything)
    # --all lists exactly what app.outbox() returns, in its order (oldest first).
    rows = _table(everything.stdout)
    items = tiny.outbox()
    assert [(r["id"], r["kind"], r["status"], r["attempts"], r["target"]) for r in rows] == [
        (str(i.id), i.kind, i.status, str(i.attempts), i.target) for i in items
    ]
    assert [i.status for i in items] == ["sent", "pending"]
    assert items[0].target == f"http://127.0.0.1:{server.server_port}/hook"


def test_worker_once_runs_one_pass_and_outbox_requeue_puts_a_dead_row_back(tmp_path: Path, tiny: Tiny) -> None:
    """The command line acts as the operator (a sysadmin): the row is another tenant's."""
    tiny.dispatch_ping()
    once = cli(tmp_path, "worker", tiny.target, "--once", "--database-url", tiny.url)
    assert once.returncode == 0, _explain(once)
    assert dict(pair.split("=") for pair in once.stdout.split())["dead"] == "1", once.stdout
    (row,) = _rows(cli(tmp_path, "outbox", tiny.target, "--database-url", tiny.url).stdout)[1:]
    assert row[1:4] == ["webhook", "dead", "1"]

    requeued = cli(tmp_path, "outbox", "requeue", tiny.target, row[0], "--database-url", tiny.url)
    assert requeued.returncode == 0 and requeued.stdout.strip() == f"requeued {row[0]}", _explain(requeued)
    (after,) = _rows(cli(tmp_path, "outbox", "list", tiny.target, "--database-url", tiny.url).stdout)[1:]
    assert after[1:4] == ["webhook", "pending", "0"]

    again = cli(tmp_path, "outbox", "requeue", tiny.target, row[0], "--database-url", tiny.url)
    assert again.returncode == 1 and "status_conflict" in again.stderr and "Traceback" not in again.stderr
    unknown = str(uuid.uuid4())
    missing = cli(tmp_path, "outbox", "requeue", tiny.target, unknown, "--database-url", tiny.url)
    assert missing.returncode == 1 and f"not_found: no outbox row {unknown}" in missing.stderr, _explain(missing)


def test_runs_cancel_stops_a_suspended_run(tmp_path: Path, tiny: Tiny) -> None:
    run_id = tiny.start_remind()
    url = ("--database-url", tiny.url)
    result = cli(tmp_path, "runs", "cancel", tiny.target, str(run_id), "--reason", "no supplier", *url)
    assert result.returncode == 0 and result.stdout.strip() == f"cancelled {run_id}", _explain(result)
    (row,) = _rows(cli(tmp_path, "runs", tiny.target, "--database-url", tiny.url).stdout)[1:]
    assert row[:3] == [str(run_id), "tiny:remind", "cancelled"] and row[-1] == "cancelled"
    app = tiny.app()
    try:
        info = app.get_run(run_id)
    finally:
        app.dispose()
    assert info is not None and info.error == {
        "code": "cancelled",
        "message": "no supplier",
        "by": "00000000-0000-0000-0000-000000000000",
    }
    unknown = str(uuid.uuid4())
    missing = cli(tmp_path, "runs", "cancel", tiny.target, unknown, "--database-url", tiny.url)
    assert missing.returncode == 1 and f"not_found: no workflow run {unknown}" in missing.stderr, _explain(missing)
    bad = cli(tmp_path, "runs", "cancel", tiny.target, "nope", "--database-url", tiny.url)
    assert bad.returncode == 2 and "not a valid UUID" in bad.stderr, _explain(bad)


VALUES = '''
    """An App *instance* (not a factory) whose workflow stores a class named only in value_types."""
    import attrs

    from kumiko_typed import App, Feature, manual


    @attrs.frozen
    class Note:
        text: str


    @attrs.frozen
    class Start:
        text: str


    notes = Feature("notes")
    keep = notes.workflow(
        "keep",
        trigger=manual(Start),
        pipeline=notes.workflow_pipeline(Start)
        .compute("note", lambda c: Note(c.payload.text))
        .wait("PT1S")
        .compute("done", lambda c: c.steps["note"].text.upper()),
    )
    app = App([notes], database_url="sqlite:///values.sqlite3", value_types=[Note])
'''


def test_url_override_keeps_the_apps_value_types(tmp_path: Path) -> None:
    """``--database-url`` rebuilds an App instance on another database: it must keep the
    value types the App was given, or a worker cannot read back the runs it resumes."""
    name = _module(tmp_path, VALUES, "values")
    url = _url(tmp_path, "values")
    module = _import(tmp_path, name)
    app = App([module.notes], database_url=url, value_types=[module.Note])  # the module's app, on this database
    app.create_all()
    run_id = app.start_workflow(module.keep, module.Start("hello"), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4()))
    proc = subprocess.Popen(
        [str(CLI), "worker", f"{name}:app", "--database-url", url, "--poll-interval", "0.2"],
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (run := app.get_run(run_id)) is not None and run.status == "suspended":
            assert proc.poll() is None, f"the worker exited early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the worker did not resume the run"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        app.dispose()
    assert proc.returncode == 0, f"{out}\n{err}"
    assert run is not None and run.status == "completed", run
    assert run.steps["done"] == "HELLO"


# --- bad targets -----------------------------------------------------------------------------


BAD_TARGETS = [
    # Each names what to do: where the module is looked for, the targets a module offers.
    (
        "no_such_module_xyz:app",
        f"cannot load no_such_module_xyz:app: No module named 'no_such_module_xyz'; the command line imports it"
        f" from the current folder ({ROOT}) or the installed packages: run it in the folder that holds"
        " no_such_module_xyz.py",
    ),
    ("examples.inventory.app:nope", "has no attribute 'nope'; it has examples.inventory.app:make_app"),
    ("examples.inventory.app", "'examples.inventory.app' is not MODULE:APP"),
    (
        "examples.inventory.model:LOW_STOCK",
        "neither an App nor a function returning one; it has no App, nor a function annotated -> App; give it one:"
        " app = App([features], database_url=...)",
    ),
    (
        "examples.inventory.handlers:inventory",
        "examples.inventory.handlers:inventory is a Feature, neither an App nor a function returning one;",
    ),
    # Was called, and ran the whole example, to learn that it returns None.
    (
        "examples.inventory.app:main",
        "examples.inventory.app:main is a function returning None, not an App; it has examples.inventory.app:make_app",
    ),
    ("examples.inventory.model:AlertView", "cannot call examples.inventory.model:AlertView"),
    # A path for the module: './...' was 'importing ./... raised TypeError' (importlib's, said
    # to be the app's); 'x.py' imported x, then 'No module named x.py'.
    *[
        (
            path,
            "MODULE is a path or a relative name; name the module as Python imports it from the current folder"
            " (e.g. examples.inventory.app:make_app)",
        )
        for path in ("./examples/inventory/app:make_app", "examples/inventory/app.py:make_app")
    ],
]


@pytest.mark.parametrize(("target", "message"), BAD_TARGETS, ids=[t for t, _ in BAD_TARGETS])
def test_bad_target_is_a_clear_error(tmp_path: Path, target: str, message: str) -> None:
    result = cli(tmp_path, "check", target, "--database-url", _url(tmp_path))
    assert result.returncode != 0, _explain(result)
    assert message in result.stderr, _explain(result)
    assert "Traceback" not in result.stderr + result.stdout
    assert not result.stdout, _explain(result)  # nothing of the module's ran


@pytest.mark.parametrize("command", ["graph", "worker"])  # the others share graph's loader
def test_every_command_reports_a_bad_target(tmp_path: Path, command: str) -> None:
    result = cli(tmp_path, command, "no_such_module_xyz:app", "--database-url", _url(tmp_path))
    assert result.returncode != 0, _explain(result)
    assert "cannot load no_such_module_xyz:app" in result.stderr, _explain(result)
    assert "Traceback" not in result.stderr + result.stdout


RAISING_APPS = [
    # (module source, attribute, what the error says): the app's own code raised while loading
    (
        "x = {}\nvalue = x['missing']\n",
        "app",
        ["importing {m} raised KeyError: 'missing'", "{m}.py:2: value = x['missing']"],
    ),
    ("import no_such_dependency_xyz\n", "app", ["importing {m} raised ModuleNotFoundError", "{m}.py:1: import"]),
    (
        "def make_app(database_url=None):\n    return 1 // 0\n",
        "make_app",
        [
            "calling {m}:make_app raised ZeroDivisionError: integer division or modulo by zero",
            "{m}.py:2: return 1 // 0",
        ],
    ),
    ("def make_app(region):\n    return region\n", "make_app", ["cannot call {m}:make_app: missing a required"]),
    # Raised inside installed packages (the standard library's json, SQLAlchemy's mapping of a
    # class): their frames were listed after the application's own line.
    (
        "import json\ndef make_app(database_url=None):\n    return json.loads('{nope')\n",
        "make_app",
        ["calling {m}:make_app raised JSONDecodeError: Expecting property name", "{m}.py:3: return json.loads"],
    ),
    (
        "from sqlalchemy.orm import Mapped, mapped_column\nfrom kumiko_typed import Entity\n"
        "class Thing(Entity):\n    __tablename__ = 'thing'\n    name: Mapped['Nope'] = mapped_column()\n",
        "app",
        ["importing {m} raised MappedAnnotationError: Could not resolve", "{m}.py:3: class Thing(Entity):"],
    ),
]


@pytest.mark.parametrize(
    ("source", "attribute", "expected"),
    RAISING_APPS,
    ids=["import", "dependency", "factory", "signature", "in-the-stdlib", "in-sqlalchemy"],
)
def test_an_app_module_that_raises_is_reported_with_its_own_lines(
    tmp_path: Path, source: str, attribute: str, expected: list[str]
) -> None:
    module = _module(tmp_path, source, "raising")
    result = cli(tmp_path, "check", f"{module}:{attribute}", "--database-url", _url(tmp_path))
    assert result.returncode == 1, _explain(result)
    for text in expected:
        assert text.format(m=module) in result.stderr, _explain(result)
    assert "Traceback" not in result.stderr + result.stdout
    # Where: the application's own lines only.
    where = [line for line in result.stderr.splitlines() if line.startswith("  ")]
    assert all(line.startswith(f"  {tmp_path / module}.py:") for line in where), _explain(result)


EXITING_APPS = [
    # (module source, attribute, what the error says): the app's own code raised SystemExit
    # while loading.  The command exited with its code (3), or printed 'text' and exited 1,
    # and said nothing of the module nor of importing it.
    (
        "import sys\nsys.exit(3)\n",
        "app",
        "importing {m} exited with code 3; a module the command line imports must not exit",
        "{m}.py:2: sys.exit(3)",
    ),
    (
        "raise SystemExit('text')\n",
        "app",
        "importing {m} exited with message 'text'; a module the command line imports must not exit",
        "{m}.py:1: raise SystemExit('text')",
    ),
    (
        "raise SystemExit\n",
        "app",
        "importing {m} exited with no code; a module the command line imports must not exit",
        "{m}.py:1: raise SystemExit",
    ),
    (
        "def make_app(database_url=None):\n    raise SystemExit(4)\n",
        "make_app",
        "calling {m}:make_app exited with code 4; a function returning the App must return it, not exit",
        "{m}.py:2: raise SystemExit(4)",
    ),
]


@pytest.mark.parametrize(
    ("source", "attribute", "message", "line"), EXITING_APPS, ids=["code", "text", "none", "factory"]
)
def test_an_app_module_that_exits_is_reported_as_a_failed_import(
    tmp_path: Path, source: str, attribute: str, message: str, line: str
) -> None:
    module = _module(tmp_path, source, "exiting")
    result = cli(tmp_path, "check", f"{module}:{attribute}", "--database-url", _url(tmp_path))
    assert result.returncode == 1, _explain(result)  # as for any exception the app raises
    assert message.format(m=module) in result.stderr, _explain(result)
    assert "if __name__ == '__main__'" in result.stderr or attribute == "make_app", _explain(result)
    assert f"  {tmp_path}/{line.format(m=module)}" in result.stderr.splitlines(), _explain(result)
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("password", "phrase", "hidden"),
    [("pa%40ss-w0rd", "k3y-pass-phrase", ["pa@ss-w0rd", "pa%40ss-w0rd"]), ("Wq7", "k3", ["Wq7"])],
    ids=["long", "short"],
)
@pytest.mark.parametrize("given_by", ["option", "environment", "the-apps-own-variable"])
@pytest.mark.parametrize("raises", ["import", "factory"])
def test_an_app_error_quoting_the_database_url_hides_its_passwords(
    tmp_path: Path, given_by: str, raises: str, password: str, phrase: str, hidden: list[str]
) -> None:
    # The app's own exception quoting the URL the command gave it printed its password and
    # sslpassword whole, where every other line of the command line shows them as ***.  A
    # URL the app reads from a variable of its own (the command given none) was printed
    # whole too: the command knew no URL to hide.
    url = f"postgresql+psycopg://shop:{password}@127.0.0.1:1/shop?sslpassword={phrase}"
    variable = "SHOP_DATABASE_URL" if given_by == "the-apps-own-variable" else "KUMIKO_DATABASE_URL"
    if raises == "import":
        source = f"import os\nraise ValueError('cannot use ' + os.environ['{variable}'])\n"
    elif given_by == "the-apps-own-variable":
        source = (
            f"import os\ndef make_app(database_url=os.environ['{variable}']):\n"
            "    raise ValueError(f'cannot use {database_url}')\n"
        )
    else:
        source = "def make_app(database_url):\n    raise ValueError(f'cannot use {database_url}')\n"
    module = _module(tmp_path, source, "quoting")
    target = f"{module}:{'make_app' if raises == 'factory' else 'app'}"
    if given_by == "option":
        result = cli(tmp_path, "outbox", target, "--database-url", url, KUMIKO_DATABASE_URL=url)
    else:
        result = cli(tmp_path, "outbox", target, **{variable: url})
    assert result.returncode == 1, _explain(result)
    assert "raised ValueError: cannot use postgresql+psycopg://shop:***@127.0.0.1:1/shop?sslpassword=***" in (
        result.stderr
    ), _explain(result)
    for secret in (*hidden, f"sslpassword={phrase}"):
        assert secret not in result.stderr + result.stdout, _explain(result)


def test_keys_purge_deletes_the_expired_keys_only(tmp_path: Path, tiny: Tiny) -> None:
    import sqlalchemy as sa

    from kumiko_typed._tables import idempotency_keys

    app = tiny.app()
    try:
        assert app.dispatch(tiny.module.ping, tiny.module.Ping(tiny.dead_url), user=tiny.user, idempotency_key="fresh")
        old = datetime.now(UTC) - app.idempotency_retention - timedelta(minutes=1)
        with app.engine.begin() as conn:
            row = {"tenant_id": tiny.user.tenant_id, "handler": "tiny:ping", "fingerprint": "0" * 64, "result": None}
            conn.execute(idempotency_keys.insert(), [{**row, "key": f"old-{i}", "created_at": old} for i in range(2)])
    finally:
        app.dispose()
    result = cli(tmp_path, "keys", "purge", tiny.target, "--database-url", tiny.url)
    assert (result.returncode, result.stdout) == (0, "deleted 2 expired idempotency keys\n"), _explain(result)
    again = cli(tmp_path, "keys", "purge", tiny.target, KUMIKO_DATABASE_URL=tiny.url)
    assert (again.returncode, again.stdout) == (0, "deleted 0 expired idempotency keys\n"), _explain(again)
    app = tiny.app()
    try:
        with app.engine.connect() as conn:
            assert list(conn.scalars(sa.select(idempotency_keys.c.key))) == ["fresh"]
    finally:
        app.dispose()


@pytest.mark.parametrize("command", ["runs", "outbox", "worker", "keys purge"])
def test_a_database_without_tables_is_a_clear_error(tmp_path: Path, tiny: Tiny, command: str) -> None:
    (tmp_path / "empty.sqlite3").touch()  # an empty file is an empty SQLite database
    empty = _url(tmp_path, "empty")
    result = cli(tmp_path, *command.split(), f"{tiny.name}:make_bare_app", "--database-url", empty)
    assert result.returncode == 1, _explain(result)
    assert "no such table" in result.stderr, _explain(result)
    assert "\nWere the tables created (app.create_all() or your migrations)?" in result.stderr
    assert "server" not in result.stderr  # a SQLite file has none to reach
    assert "Traceback" not in result.stderr + result.stdout


def test_a_postgres_database_without_tables_says_to_create_them(
    tmp_path: Path, tiny: Tiny, fresh_postgres_url: str
) -> None:
    """The server answered: asking whether it is reachable sends the operator the wrong way."""
    result = cli(tmp_path, "runs", f"{tiny.name}:make_bare_app", "--database-url", fresh_postgres_url)
    assert result.returncode == 1, _explain(result)
    assert "\nWere the tables created (app.create_all() or your migrations)?" in result.stderr, _explain(result)
    assert "reachable" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"not a database at all " * 100, "it holds no SQLite database"),
        (None, "does not exist"),  # its folder is missing
    ],
)
def test_an_unusable_sqlite_file_names_its_fix_and_no_server(
    tmp_path: Path, tiny: Tiny, content: bytes | None, says: str
) -> None:
    """Was followed by 'Is the server reachable, and were the tables created?': a SQLite
    file has no server, and the line above already says what to do.  A file that is not
    there is refused before connecting by a listing; the worker, which may be what sets a
    database up, connects and names the missing folder."""
    path = tmp_path / "bad.sqlite3" if content is not None else tmp_path / "gone" / "x.sqlite3"
    if content is not None:
        path.write_bytes(content)
    command = ["runs"] if content is not None else ["worker", "--once"]
    result = cli(tmp_path, *command, f"{tiny.name}:make_bare_app", "--database-url", f"sqlite:///{path}")
    assert result.returncode == 1, _explain(result)
    assert says in result.stderr, _explain(result)
    assert "server" not in result.stderr and "tables created" not in result.stderr, _explain(result)
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "down",
    [
        "postgresql+psycopg://kumiko:secret@127.0.0.1:9/nothing",  # the discard port: refused
        # The password as a query parameter: it was printed in the error's URL.
        "postgresql+psycopg://kumiko@127.0.0.1:9/nothing?password=secret",
    ],
)
def test_an_unreachable_database_is_a_clear_error(tmp_path: Path, tiny: Tiny, down: str) -> None:
    for target in (tiny.target, f"{tiny.name}:make_bare_app"):  # failing in the factory, or in the command
        result = cli(tmp_path, "runs", target, "--database-url", down)
        assert result.returncode == 1, _explain(result)
        assert "127.0.0.1" in result.stderr, _explain(result)
        assert "secret" not in result.stderr  # the password stays out of the message
        assert "Is the server reachable" in result.stderr
        assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("command", ["runs cancel", "outbox requeue"])
def test_an_operation_on_an_unreachable_database_names_it(tmp_path: Path, tiny: Tiny, command: str) -> None:
    # They answered "unavailable: ... the database is busy or unreachable" without saying
    # which database, where every other command names it (its password hidden).
    down = "postgresql+psycopg://kumiko:secret@127.0.0.1:9/nothing?sslpassword=ssl-secret"
    result = cli(tmp_path, *command.split(), f"{tiny.name}:make_bare_app", str(uuid.uuid4()), "--database-url", down)
    assert result.returncode == 1, _explain(result)
    error = result.stderr.splitlines()[-1]
    # The App's engine has no sslpassword in its URL (the driver gets it apart): none shown.
    assert error.startswith("Error: unavailable: ") and error.endswith(
        " (database postgresql+psycopg://kumiko:***@127.0.0.1:9/nothing)"
    ), _explain(result)
    assert "secret" not in result.stderr.replace("sslpassword", ""), _explain(result)


def _without_column(url: str, table: str, column: str) -> None:
    """An older release's database: ``table`` lacks ``column``."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {table} DROP COLUMN {column}")
    finally:
        engine.dispose()


def test_an_operation_that_raises_prints_its_traceback_only_with_v(tmp_path: Path, tiny: Tiny) -> None:
    """``runs cancel`` on a database that lacks a column: without -v the library's ERROR
    record went through Python's last-resort handler, its traceback quoting the statement
    and its parameters above the command's own error.  Now the record is one line naming
    the exception's class, and -v (any command's) prints it whole."""
    run_id = str(tiny.start_remind())
    _without_column(tiny.url, "kumiko_workflow_runs", "fingerprint")
    command = ("runs", "cancel", f"{tiny.name}:make_bare_app", run_id, "--database-url", tiny.url)
    result = cli(tmp_path, *command)
    assert result.returncode == 1, _explain(result)
    logged, error, *rest = result.stderr.splitlines()
    assert logged.startswith(f"ERROR kumiko_typed: cancel_run of run {run_id} raised (error id "), _explain(result)
    assert logged.endswith(" (OperationalError; -v shows its traceback)"), _explain(result)
    assert error.startswith("Error: internal_error: ") and "has no column fingerprint" in rest[0], _explain(result)
    for detail in ("Traceback", "SELECT", "[parameters", run_id.replace("-", "")):
        assert detail not in result.stderr + result.stdout, _explain(result)

    verbose = cli(tmp_path, *command, "-v")
    assert verbose.returncode == 1, _explain(verbose)
    assert "Traceback" in verbose.stderr and "SELECT kumiko_workflow_runs.run_id" in verbose.stderr, _explain(verbose)
    assert verbose.stderr.count("Error: internal_error: ") == 1


FAILING_RUN = """
    import attrs

    from kumiko_typed import App, Feature, manual


    @attrs.frozen
    class Go:
        n: int


    boom = Feature("boom")
    divide = boom.workflow(
        "divide",
        trigger=manual(Go),
        pipeline=boom.workflow_pipeline(Go).wait("PT0S").compute("x", lambda c: 1 // c.payload.n),
    )


    def make_app(database_url: str) -> App:
        app = App([boom], database_url=database_url)
        app.create_all()
        return app
"""


def test_a_worker_logs_a_failing_run_in_one_line_without_v(tmp_path: Path) -> None:
    """A run whose step raises fails in the worker's pass: its ERROR record printed the
    whole traceback to stderr (the last-resort handler) with no -v given."""
    name = _module(tmp_path, FAILING_RUN, "failing")
    url = _url(tmp_path)
    module = _import(tmp_path, name)
    app = module.make_app(url)
    try:
        app.start_workflow(module.divide, module.Go(0), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4()))
    finally:
        app.dispose()
    result = cli(tmp_path, "worker", f"{name}:make_app", "--once", "--database-url", url)
    assert result.returncode == 0 and result.stdout.split()[1] == "resumed=1", _explain(result)
    (line,) = result.stderr.splitlines()
    assert re.fullmatch(
        r"ERROR kumiko_typed: workflow boom:divide run \S+: step x compute \"x\" raised \(error id \w+\)"
        r" \(ZeroDivisionError; -v shows its traceback\)",
        line,
    ), _explain(result)


def test_an_app_on_another_database_keeps_every_setting(tmp_path: Path) -> None:
    """``--database-url`` derives the App with ``with_database``: every constructor setting
    is carried. Adding a parameter to ``App`` without carrying it fails here."""
    import inspect
    from datetime import UTC, datetime, timedelta

    import attrs
    import httpx

    from kumiko_typed import Feature, MaildirTransport

    @attrs.frozen
    class Marker:
        n: int

    def clock() -> datetime:
        return datetime(2030, 1, 1, tzinfo=UTC)

    def secrets(name: str) -> str | None:
        return None

    given: dict[str, Any] = {
        "clock": clock,
        "mail": MaildirTransport(str(tmp_path / "mail")),
        "secrets": secrets,
        "http": httpx.Client(),
        "value_types": (Marker,),
        "idempotency_retention": timedelta(hours=3),
        "delivery_concurrency": 7,
        "webhook_timeout": timedelta(seconds=7),
        "webhook_private_addresses": True,  # False needs the App's own client (no http=)
    }
    settings = set(inspect.signature(App).parameters) - {"features", "database_url"}
    assert settings == set(given), "a new App setting needs a value here and must be carried by with_database"
    app = App([Feature("f")], database_url=f"sqlite:///{tmp_path / 'a.sqlite3'}", **given)
    other = app.with_database(f"sqlite:///{tmp_path / 'b.sqlite3'}")
    assert other.engine.url.database == str(tmp_path / "b.sqlite3")
    assert other._settings == app._settings
    assert all(other._settings[name] is given[name] or other._settings[name] == given[name] for name in given)
    assert other.clock is clock and other.mail == given["mail"] and other.secrets is secrets
    assert other.idempotency_retention == timedelta(hours=3)
    assert Marker in other.codec.by_name.values()
    for made in (app, other):
        made.dispose()
    given["http"].close()


def test_runs_purge_deletes_old_finished_runs_only(tmp_path: Path, tiny: Tiny) -> None:
    import sqlalchemy as sa

    from kumiko_typed._tables import workflow_runs

    failed, suspended = tiny.start_remind("fail"), tiny.start_remind()
    app = tiny.app()
    try:
        old = datetime.now(UTC) - timedelta(days=40)
        with app.engine.begin() as conn:  # both started 40 days ago
            conn.execute(sa.update(workflow_runs).values(created_at=old, updated_at=old))
    finally:
        app.dispose()
    result = cli(tmp_path, "runs", "purge", tiny.target, "--older-than", "P30D", "--database-url", tiny.url)
    assert (result.returncode, result.stdout) == (0, "deleted 1 finished run\n"), _explain(result)
    assert tiny.run(failed) is None and tiny.run(suspended).status == "suspended"
    wrong = cli(tmp_path, "runs", "purge", tiny.target, "--older-than", "30d", "--database-url", tiny.url)
    assert wrong.returncode == 2 and "Invalid value for '--older-than'" in wrong.stderr, _explain(wrong)
    assert "is not an ISO-8601 duration" in wrong.stderr and "Traceback" not in wrong.stderr, _explain(wrong)
    # Before: an OverflowError traceback ("Python int too large to convert to C int").
    endless = cli(tmp_path, "runs", "purge", tiny.target, "--older-than", "P99999999999D", "--database-url", tiny.url)
    assert endless.returncode == 2 and "is longer than the longest duration" in endless.stderr, _explain(endless)
    suspended_only = cli(
        tmp_path,
        "runs",
        "purge",
        tiny.target,
        "--older-than",
        "PT0S",
        "--status",
        "suspended",
        "--database-url",
        tiny.url,
    )
    assert suspended_only.returncode == 2 and "'suspended' is not one of" in suspended_only.stderr, _explain(
        suspended_only
    )


def test_outbox_purge_deletes_old_sent_rows_only(tmp_path: Path, tiny: Tiny) -> None:
    import sqlalchemy as sa

    from kumiko_typed._tables import outbox as outbox_table

    tiny.dispatch_ping()
    app = tiny.app()
    try:
        app.run_worker(once=True)  # the receiver refuses: the only attempt, dead
        old = datetime.now(UTC) - timedelta(days=40)
        (row,) = app.outbox()
        with app.engine.begin() as conn:  # and a copy of it, sent 40 days ago
            source = conn.execute(sa.select(outbox_table)).mappings().one()
            conn.execute(sa.insert(outbox_table), [{**source, "id": uuid.uuid4(), "status": "sent", "sent_at": old}])
    finally:
        app.dispose()
    result = cli(tmp_path, "outbox", "purge", tiny.target, "--older-than", "P30D", "--database-url", tiny.url)
    assert (result.returncode, result.stdout) == (0, "deleted 1 sent outbox row\n"), _explain(result)
    assert [(i.id, i.status) for i in tiny.outbox()] == [(row.id, "dead")]
    missing = cli(tmp_path, "outbox", "purge", tiny.target, "--database-url", tiny.url)
    assert missing.returncode == 2 and "Missing option '--older-than'" in missing.stderr, _explain(missing)
