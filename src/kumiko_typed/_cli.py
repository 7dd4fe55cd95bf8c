"""The ``kumiko-typed`` command line: demo, check, graph, worker, runs, outbox."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import click
from sqlalchemy import URL, make_url
from sqlalchemy.exc import DBAPIError

from ._app import App
from ._errors import BootError
from ._graph import Format, render

__all__ = ["URL_HELP", "check", "demo", "graph", "load_app", "main", "outbox", "runs", "worker"]

URL_HELP = "Database URL to use instead of the app's (also KUMIKO_DATABASE_URL)."


def load_app(target: str, database_url: str | None) -> App:
    """Import ``MODULE:APP``: an App, or a callable returning one (given ``database_url``)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{target!r} is not MODULE:APP (e.g. myservice.app:app)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        value: Any = getattr(module, attribute)
    except BootError:
        raise
    except (ImportError, AttributeError) as exc:
        raise click.ClickException(f"cannot load {target}: {exc}") from exc
    if isinstance(value, App):
        if database_url is None:
            return value
        return value.with_database(database_url)
    if callable(value):
        try:
            with _database(database_url):  # a factory may create its tables
                app = value(database_url=database_url) if database_url else value()
        except TypeError as exc:
            raise click.ClickException(f"cannot call {target}: {exc}") from exc
        if isinstance(app, App):
            return app
    raise click.ClickException(f"{target} is neither an App nor a function returning one")


def _url(option: str | None) -> str | None:
    return option or os.environ.get("KUMIKO_DATABASE_URL") or None


@click.group()
@click.version_option(package_name="kumiko-typed")
def main() -> None:
    """kumiko-typed: event-sourced write-side pipelines that mypy checks.

    TARGET is MODULE:APP, an App or a function returning one, imported with the current
    folder on the path.  --database-url (or KUMIKO_DATABASE_URL) replaces the App's
    database; a function is then called with database_url=.
    """


@main.command()
@click.option(
    "--database-url",
    help="Database URL (also KUMIKO_DATABASE_URL; default: a SQLite file in a temporary folder). "
    "The demo's tables and rows stay in it.",
)
@click.option("--keep", is_flag=True, help="Keep the temporary folder (database, mail) and print its path.")
def demo(database_url: str | None, keep: bool) -> None:
    """Run the inventory example, then remove its temporary folder.

    The example's handlers, a rollback, a workflow that waits a day and a mail through the
    outbox, printing each result; on a SQLite file in a temporary folder unless a database
    URL is given.
    """
    from ._demo import run_demo

    run_demo(_url(database_url), keep=keep)


@main.command()
@click.argument("target")
@click.option("--database-url", help=URL_HELP)
def check(target: str, database_url: str | None) -> None:
    """Boot-validate MODULE:APP; exit 1 listing every problem."""
    try:
        app = load_app(target, _url(database_url))
    except BootError as exc:
        click.echo(click.style(f"{len(exc.problems)} problem(s):", fg="red", bold=True), err=True)
        for problem in exc.problems:
            click.echo(f"  - {problem}", err=True)
        sys.exit(1)
    summary = f"{len(app.handlers)} handler(s), {len(app.workflows)} workflow(s)"
    click.echo(click.style("ok", fg="green") + f": {summary}")


@main.command()
@click.argument("target")
@click.option(
    "--handler",
    "name",
    help="Only this handler or workflow: its full name, or its end after a ':' if that names only one.",
)
@click.option("--format", "fmt", type=click.Choice(["text", "mermaid", "dot"]), default="text", show_default=True)
@click.option("--database-url", help=URL_HELP)
def graph(target: str, name: str | None, fmt: Format, database_url: str | None) -> None:
    """Draw the pipelines of MODULE:APP as text, Mermaid or dot.

    Every handler and workflow, or the one named by --handler; branch arms and loop bodies
    are groups, a branch's edges are labelled true and false.
    """
    app = _boot(target, database_url)
    pipelines: dict[str, Any] = {h.name: h.pipeline.steps for h in app.handlers.values()}
    pipelines.update({w.name: w.pipeline.steps for w in app.workflows.values()})
    if name is not None:
        full = _full_name(name, sorted(pipelines))
        pipelines = {full: pipelines[full]}
    click.echo("\n\n".join(render(title, steps, fmt) for title, steps in sorted(pipelines.items())))


def _full_name(name: str, known: Sequence[str]) -> str:
    """``name`` itself, or the one known name ending in ``:name``."""
    if name in known:
        return name
    matches = [k for k in known if k.endswith(f":{name}")]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise click.ClickException(f"{name!r} is ambiguous: it could be {', '.join(matches)}")
    raise click.ClickException(f"no handler or workflow named {name!r}; known: {', '.join(known)}")


@main.command()
@click.argument("target")
@click.option("--database-url", help=URL_HELP)
@click.option("--poll-interval", default=1.0, show_default=True, help="Seconds between polls when idle.")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log to stderr: -v each pass that did something (INFO), -vv every pass (DEBUG).",
)
def worker(target: str, database_url: str | None, poll_interval: float, verbose: int) -> None:
    """Deliver the outbox, fire triggers, resume runs until stopped.

    On SIGINT or SIGTERM it finishes the pass, prints the total counts and exits 0.
    """
    if verbose:
        level = logging.INFO if verbose == 1 else logging.DEBUG
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = _boot(target, database_url)

    def stop(signum: int, _frame: FrameType | None) -> None:
        click.echo(f"{signal.Signals(signum).name}: stopping after this pass", err=True)
        app.stop_worker()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    click.echo(f"worker on {app.engine.url!r}", err=True)
    with _database(app.engine.url):
        counts = app.run_worker(poll_interval=poll_interval)
    click.echo(" ".join(f"{k}={v}" for k, v in counts.items()))


@main.command()
@click.argument("target")
@click.option("--workflow", help="Only runs of this workflow.")
@click.option("--database-url", help=URL_HELP)
def runs(target: str, workflow: str | None, database_url: str | None) -> None:
    """List workflow runs, newest first, with times and error code.

    Per run: its workflow, status, the step it is at, when it wakes, when it was created and
    last updated (UTC), and a failed run's error code.
    """
    app = _boot(target, database_url)
    with _database(app.engine.url):
        found = app.runs(workflow)
    rows = [
        (
            str(r.run_id),
            r.workflow,
            r.status,
            r.path or "",
            _time(r.wake_at),
            _time(r.created_at),
            _time(r.updated_at),
            (r.error or {}).get("code", ""),
        )
        for r in found
    ]
    _table(("run", "workflow", "status", "at", "wakes", "created", "updated", "error"), rows)


def _time(at: datetime | None) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S}" if at is not None else ""


@main.command()
@click.argument("target")
@click.option("--all", "show_all", is_flag=True, help="Also list sent deliveries: every row app.outbox() returns.")
@click.option("--database-url", help=URL_HELP)
def outbox(target: str, show_all: bool, database_url: str | None) -> None:
    """List pending and dead deliveries, oldest first.

    Mail and webhooks, with attempts, next attempt (UTC), target and last error.
    """
    app = _boot(target, database_url)
    with _database(app.engine.url):
        items = app.outbox()
    rows = [
        (
            str(i.id),
            i.kind,
            i.status,
            str(i.attempts),
            _time(i.next_attempt_at),
            i.target,
            " ".join((i.last_error or "").split()),  # one line per row
        )
        for i in items
        if show_all or i.status != "sent"
    ]
    _table(("id", "kind", "status", "attempts", "next attempt", "target", "last error"), rows)


def _boot(target: str, database_url: str | None) -> App:
    try:
        return load_app(target, _url(database_url))
    except BootError as exc:
        raise click.ClickException(str(exc)) from exc


@contextmanager
def _database(url: str | URL | None) -> Iterator[None]:
    """A database that is down, or has no tables yet, is a short error, not a traceback."""
    try:
        yield
    except DBAPIError as exc:
        reason = next(iter(str(exc.orig).strip().splitlines()), type(exc.orig).__name__)
        where = f"database {make_url(url)!r}" if url else "the app's database"
        raise click.ClickException(
            f"{where}: {reason}\n"
            "Is the server reachable, and were the tables created (app.create_all() or your migrations)?"
        ) from exc


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    if not rows:
        click.echo("(none)")
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    click.echo(click.style("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), bold=True))
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
