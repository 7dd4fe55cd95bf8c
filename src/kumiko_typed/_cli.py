"""The ``kumiko-typed`` command line: demo, check, graph, worker, runs, outbox, keys."""

from __future__ import annotations

import importlib
import inspect
import os
import signal
import sys
import unicodedata
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import PurePath
from types import FrameType, ModuleType
from typing import Any, Final, Literal, TypeVar

import click
from sqlalchemy import URL, make_url
from sqlalchemy import inspect as inspect_database
from sqlalchemy.exc import DBAPIError

from ._app import App
from ._cli_logging import verbosity
from ._ctx import User
from ._database_urls import URL_PROBLEM, passwords_hidden, shown_url, without_secrets
from ._durations import parse_duration, positive_seconds
from ._engine import make_engine, read_only_engines
from ._errors import BootError
from ._feature import Feature
from ._graph import Format, render
from ._missing_table import lacking
from ._read_only import write_refused
from ._results import Failure, Ok
from ._retention import FINISHED
from ._run_listing import STATUSES
from ._runs import RunStatus
from ._schema_check import SCHEMA_FIX, missing_columns
from ._steps import OWN_FIX
from ._transient import unreachable
from ._user_frames import user_frames

__all__ = [
    "MIGRATE_FIRST",
    "OPERATOR",
    "OTHERS_FIX",
    "RUNS_FIX",
    "URL_HELP",
    "check",
    "demo",
    "graph",
    "load_app",
    "main",
    "outbox",
    "runs",
    "worker",
]

URL_HELP = "Database URL to use instead of the app's (also KUMIKO_DATABASE_URL)."
#: What ``check --against`` says to do about the runs it lists.
RUNS_FIX = (
    "They stay suspended, untouched. To resume them, map their old steps and keys with"
    " feature.workflow(..., renamed=, fill=) or deploy the workflow or class they need again;"
    " to end them, kumiko-typed runs cancel (docs/workflows.md#changing-a-workflow-that-has-suspended-runs)."
)
#: The same, after a list in which some reasons say their own fix.
OTHERS_FIX = RUNS_FIX.replace("They stay", "The runs whose reason says no fix stay", 1)
#: What a command says after the tables and columns its database lacks.
MIGRATE_FIRST = "Migrate this database to this release first (docs/operations.md#tables-and-migrations)."
#: Who the command line acts as: whoever can run it holds the database's credentials
#: anyway, so it crosses tenants (``sysadmin``).  Its id, the nil UUID, is what a
#: cancellation records as ``by``.
OPERATOR = User(id=uuid.UUID(int=0), tenant_id=uuid.UUID(int=0), roles=frozenset({"sysadmin"}))


class _Listing(click.Group):
    """A group whose plain form lists (``runs TARGET``, as before the group existed);
    ``runs cancel TARGET ID`` names a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["list", *args]
        return super().parse_args(ctx, args)


def load_app(target: str, database_url: str | None) -> App:
    """Import ``MODULE:APP``: an App, or a callable returning one (given ``database_url``)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{target!r} is not MODULE:APP (e.g. myservice.app:app)")
    if _path_like(module_name):
        parts = [p for p in PurePath(module_name.removesuffix(".py")).parts if p != "."]
        dotted = ".".join(parts) if parts and all(p.isidentifier() for p in parts) else "myservice.app"
        raise click.BadParameter(
            f"in {target!r}, MODULE is a path or a relative name; name the module as Python imports it"
            f" from the current folder (e.g. {dotted}:{attribute})"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except BootError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and not f"{module_name}.".startswith(f"{exc.name}."):
            # the app's own import failed
            raise _raised(f"importing {module_name}", module_name, exc, database_url) from exc
        where = f"{module_name.replace('.', '/')}.py"
        raise click.ClickException(
            f"cannot load {target}: {exc}; the command line imports it from the current folder ({os.getcwd()})"
            f" or the installed packages: run it in the folder that holds {where}"
        ) from exc
    except (Exception, SystemExit) as exc:  # not KeyboardInterrupt: the user's Ctrl-C stops the command
        raise _raised(f"importing {module_name}", module_name, exc, database_url, _IMPORT_EXITED) from exc
    value: Any = getattr(module, attribute, _MISSING)
    if value is _MISSING:
        raise click.ClickException(
            f"cannot load {target}: module {module_name!r} has no attribute {attribute!r}; {_apps_of(module)}"
        )
    if isinstance(value, App):
        if database_url is None:
            return value
        return value.with_database(database_url)
    if inspect.isfunction(value) and inspect.signature(value).return_annotation in (None, "None"):
        # A program's main(), say: calling it to see what it returns would run the program.
        raise click.ClickException(f"{target} is a function returning None, not an App; {_apps_of(module)}")
    if callable(value):
        arguments = {"database_url": database_url} if database_url else {}
        try:
            inspect.signature(value).bind(**arguments)
        except TypeError as exc:
            raise click.ClickException(f"cannot call {target}: {exc}") from exc
        except ValueError:
            pass  # no signature to check (a builtin): the call itself tells
        try:
            with _database(database_url):  # a factory may create its tables
                app = value(**arguments)
        except (BootError, click.ClickException):
            raise
        except (Exception, SystemExit) as exc:
            raise _raised(f"calling {target}", module_name, exc, database_url, _CALL_EXITED) from exc
        if isinstance(app, App):
            return app
    what = f"a {type(value).__name__}, " if isinstance(value, Feature) else ""
    raise click.ClickException(f"{target} is {what}neither an App nor a function returning one; {_apps_of(module)}")


_MISSING: Any = object()
#: What to do about a module, or a function returning the App, that exits while loading.
_IMPORT_EXITED = "a module the command line imports must not exit: put its script part under if __name__ == '__main__':"
_CALL_EXITED = "a function returning the App must return it, not exit"


def _apps_of(module: ModuleType) -> str:
    """The targets ``module`` offers, for a wrong one: its Apps, and its functions
    annotated as returning one (none is called to find out)."""
    found = [
        f"{module.__name__}:{name}"
        for name, value in vars(module).items()
        if not name.startswith("_") and (isinstance(value, App) or _returns_app(value, module))
    ]
    if found:
        return f"it has {', '.join(found)}"
    return "it has no App, nor a function annotated -> App; give it one: app = App([features], database_url=...)"


def _returns_app(value: object, module: ModuleType) -> bool:
    """A function of ``module`` itself whose return annotation names App."""
    if not inspect.isfunction(value) or value.__module__ != module.__name__:
        return False
    returned = inspect.signature(value).return_annotation
    return returned is App or (isinstance(returned, str) and returned.rpartition(".")[2] == "App")


def _path_like(module_name: str) -> bool:
    """A path or a relative name where a module name belongs (``./app``, ``src/app``,
    ``app.py``, ``.app``): importlib's TypeError was reported as the app's own, or it
    imported ``app`` and then failed on its ``py``."""
    if module_name.startswith(".") or "/" in module_name or os.sep in module_name:
        return True
    return module_name.endswith(".py") and os.path.isfile(module_name)


def _raised(
    doing: str, module_name: str, exc: BaseException, database_url: str | None, fix: str = ""
) -> click.ClickException:
    """The application's own code raised while loading: its exception and where, in the
    application's frames only (the importer's, the libraries' and this package's are
    noise).  The text may quote the database URL the command was given
    (``ValueError(f"cannot use {url}")``): its password is hidden, as wherever the command
    line prints that URL; so is that of a URL the application read itself (its own
    environment variable, a settings file), found by where a URL holds one.

    A ``SystemExit`` (``sys.exit(3)`` at a module's top level, a script's argument parser)
    is said as the exit it is, with ``fix``, exit status 1 as for any failed load: let
    through, it ended the command with the module's own status and not a word."""
    frames = user_frames(exc.__traceback__, module_name)
    where = "".join(f"\n  {frame.filename}:{frame.lineno}: {(frame.line or '').strip()}" for frame in frames[-8:])
    if isinstance(exc, SystemExit):
        code = exc.code
        how = "no code" if code is None else f"code {code}" if isinstance(code, int) else f"message {str(code)!r}"
        text = f"{doing} exited with {how}; {fix}{where}"
    else:
        text = f"{doing} raised {type(exc).__name__}: {exc}{where}"
    if database_url is not None:  # first: its password also in a user part with no scheme
        text = without_secrets(text, database_url)
    return click.ClickException(passwords_hidden(text))


def _existing(url: str | URL, given_by: str) -> None:
    """A SQLite file that is not there: connecting would create it, empty.  Refused as a
    usage error before anything connects, so the file system is left as it was."""
    parsed = make_url(url)
    database = parsed.database or ":memory:"
    if parsed.get_backend_name() != "sqlite" or database == ":memory:" or database.startswith("file:"):
        return  # in memory, a URI filename (it says whether to create), or a server
    if not os.path.exists(database):
        raise click.BadParameter(
            f"there is no SQLite database {database!r}; this command needs an existing database and does"
            " not create one: check the path, or create the database first (app.create_all() or your migrations)",
            param_hint=given_by,
        )


def _url(option: str | None) -> str | None:
    url = option or os.environ.get("KUMIKO_DATABASE_URL") or None
    if url is not None:
        _usable(url, "--database-url" if option else "KUMIKO_DATABASE_URL")
    return url


def _usable(url: str, given_by: str) -> None:
    """Refuse a URL the App cannot run on (unreadable, another database or driver, a
    driver not installed) before the app is loaded: a usage error naming where it came
    from, saying what the App would say, never quoting the URL."""
    try:
        make_engine(url).dispose()  # builds, never connects
    except BootError as exc:
        raise click.BadParameter(exc.problems[0].removeprefix(URL_PROBLEM), param_hint=given_by) from exc


@click.group()
@click.version_option(package_name="kumiko-typed")
@click.pass_context
def main(ctx: click.Context) -> None:
    """kumiko-typed: event-sourced write-side pipelines that mypy checks.

    TARGET is MODULE:APP, an App or a function returning one, imported with the current
    folder on the path.  --database-url (or KUMIKO_DATABASE_URL) replaces the App's
    database; a function is then called with database_url=.
    """
    if os.environ.get("NO_COLOR"):  # https://no-color.org; click colours any terminal
        ctx.color = False  # the subcommands' contexts inherit it


@main.command()
@click.option(
    "--database-url",
    help="Database URL (also KUMIKO_DATABASE_URL; default: a SQLite file in a temporary folder). "
    "The demo's tables and rows stay in it.",
)
@click.option("--keep", is_flag=True, help="Keep the temporary folder (database, mail) and print its path.")
@verbosity()
def demo(database_url: str | None, keep: bool) -> None:
    """Run the inventory example, then remove its temporary folder.

    The example's handlers, a rollback, a workflow that waits a day and a mail through the
    outbox, printing each result; on a SQLite file in a temporary folder unless a database
    URL is given.
    """
    from ._demo import run_demo

    url = _url(database_url)
    with _database(url):
        run_demo(url, keep=keep)


@main.command()
@click.argument("target")
@click.option("--database-url", help=URL_HELP)
@click.option(
    "--against",
    metavar="DATABASE_URL",
    help="Also list the tables and columns this database lacks for MODULE:APP, or the running and suspended"
    " runs it could not resume.",
)
@verbosity()
def check(target: str, database_url: str | None, against: str | None) -> None:
    """Boot-validate MODULE:APP; exit 1 listing every problem.

    With --against, read (never write) that database and exit 1 listing every table and
    column it lacks for MODULE:APP (an older release's schema, to migrate first), or else,
    grouped by workflow, path and reason, every run the code of MODULE:APP could not resume.
    """
    try:
        if against is None:
            app = load_app(target, _url(database_url))
        else:
            _usable(against, "--against")
            _existing(against, "--against")
            with read_only_engines():  # a factory's create_all() may try to write there
                app = load_app(target, against)
    except BootError as exc:
        click.echo(click.style(f"{len(exc.problems)} problem(s):", fg="red", bold=True), err=True)
        for problem in exc.problems:
            click.echo(f"  - {problem}", err=True)
        sys.exit(1)
    summary = f"{len(app.handlers)} handler(s), {len(app.queries)} query handler(s), {len(app.workflows)} workflow(s)"
    if against is not None:
        with _database(app):
            # The schema first: the runs' check reads the framework tables the way the
            # new code does, and a missing column would end it with the driver's error.
            problems = missing_columns(app.engine, app.tables())
        if problems:
            heading = f"{len(problems)} schema problem(s) in this database:"
            click.echo(click.style(heading, fg="red", bold=True), err=True)
            for problem in problems:
                click.echo(f"  - {problem}", err=True)
            click.echo(SCHEMA_FIX, err=True)
            sys.exit(1)
        with _database(app):
            groups = app.check_runs()
        if groups:
            count = sum(len(g.run_ids) for g in groups)
            click.echo(click.style(f"{count} run(s) this code cannot resume:", fg="red", bold=True), err=True)
            for g in groups:
                where = _printable(f"{g.workflow} at {g.path}: {g.reason}")  # stored, maybe edited by hand
                click.echo(f"  {where} ({len(g.run_ids)} run(s))", err=True)
                for run_id in g.run_ids:
                    click.echo(f"    {run_id}", err=True)
            # A reason that says its own fix (a retry replaced, unnamed steps moved) is not
            # followed by the general one too: the fix said twice.
            unfixed = [g for g in groups if not g.reason.endswith(OWN_FIX)]
            if unfixed:
                click.echo(RUNS_FIX if len(unfixed) == len(groups) else OTHERS_FIX, err=True)
            sys.exit(1)
        summary += ", every running and suspended run resumes"
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
@verbosity()
def graph(target: str, name: str | None, fmt: Format, database_url: str | None) -> None:
    """Draw the pipelines of MODULE:APP as text, Mermaid or dot.

    Every handler (write and query) and workflow, or the one named by --handler; branch arms and loop bodies
    are groups, a branch's edges are labelled true and false.
    """
    app = _boot(target, database_url)
    pipelines: dict[str, Any] = {h.name: h.pipeline.steps for h in app.handlers.values()}
    pipelines.update({q.name: q.pipeline.steps for q in app.queries.values()})
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


def _positive_seconds(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    if not positive_seconds(value):  # 0 or less would poll in a busy loop; NaN and inf break the wait
        raise click.BadParameter(f"{value} is not a positive number of seconds")
    return value


@main.command()
@click.argument("target")
@click.option("--database-url", help=URL_HELP)
@click.option(
    "--poll-interval",
    type=float,
    default=1.0,
    show_default=True,
    callback=_positive_seconds,
    help="Seconds between polls when idle (a positive number).",
)
@verbosity("Log to stderr: -v each pass that did something (INFO), -vv every pass (DEBUG), with tracebacks.")
@click.option("--once", is_flag=True, help="Run one pass (what is due now), print its counts and exit.")
def worker(target: str, database_url: str | None, poll_interval: float, once: bool) -> None:
    """Deliver the outbox, fire triggers, resume runs until stopped.

    On SIGINT or SIGTERM it finishes the pass, prints the total counts and exits 0; a
    second signal exits at once (status 128 + its number) if the pass does not end.
    With --once it runs one pass, prints its counts and exits.
    """
    app = _boot(target, database_url)
    if once:
        with _database(app):
            counts = app.run_worker(once=True)
        click.echo(" ".join(f"{k}={v}" for k, v in counts.items()))
        return

    signalled = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        # Only what is safe wherever the main thread was interrupted (the pool, a lock, a
        # log line half written to stderr): stop_worker() takes no lock, and the notice
        # goes to the descriptor, not through sys.stderr's buffer and its lock.
        nonlocal signalled
        name = signal.Signals(signum).name
        if signalled:
            # The pass did not end (a step or a peer that never answers), and the operator
            # asked twice.  Exiting at once loses nothing committed: open transactions
            # roll back with their connections, and a delivery under way is sent again
            # when its lease runs out (as after a crash).  No clean-up: a thread stuck
            # in a peer would hold up the interpreter's own exit.
            _notice(f"{name} again: exiting now, without finishing the pass\n")
            os._exit(128 + signum)
        signalled = True
        app.stop_worker()
        _notice(f"{name}: stopping after this pass (again to exit at once)\n")

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    click.echo(f"worker on {shown_url(app.engine.url)}", err=True)
    with _database(app):
        counts = app.run_worker(poll_interval=poll_interval)
    click.echo(" ".join(f"{k}={v}" for k, v in counts.items()))


def _notice(text: str) -> None:
    with suppress(OSError):  # stderr closed: the notice is lost, the stop is not
        os.write(2, text.encode())


@main.group(cls=_Listing)
def runs() -> None:
    """List workflow runs, newest first; cancel one; purge old ones.

    runs MODULE:APP (or runs list MODULE:APP) lists; runs cancel MODULE:APP RUN_ID cancels;
    runs purge MODULE:APP --older-than P30D deletes finished runs.
    """


@runs.command("cancel")
@click.argument("target")
@click.argument("run_id", type=click.UUID)
@click.option("--reason", help="Why; kept in the run's error.")
@click.option("--database-url", help=URL_HELP)
@verbosity()
def cancel_run(target: str, run_id: uuid.UUID, reason: str | None, database_url: str | None) -> None:
    """Cancel a running or suspended run: no worker resumes it."""
    app = _boot(target, database_url, existing=True)
    with _database(app):
        _done(app, app.cancel_run(run_id, user=OPERATOR, reason=reason or "cancelled from the command line"))
    click.echo(f"cancelled {run_id}")


FC = TypeVar("FC", bound=Callable[..., Any])


def _older_than(what: str) -> Callable[[FC], FC]:
    """A purge's required age: ``what`` is deleted when older than it."""
    return click.option(
        "--older-than",
        required=True,
        metavar="DURATION",
        help=f"Delete {what} longer ago than this ISO-8601 duration, e.g. P30D.",
    )


@runs.command("purge")
@click.argument("target")
@_older_than("finished runs last changed")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(FINISHED),
    help="Only runs in this status (default: completed, failed and cancelled); repeat it for several.",
)
@click.option("--database-url", help=URL_HELP)
@verbosity()
def purge_runs(target: str, older_than: str, statuses: tuple[RunStatus, ...], database_url: str | None) -> None:
    """Delete finished workflow runs older than --older-than.

    Running and suspended runs stay.  Run it from a periodic job; it deletes in batches
    beside running workers.
    """
    age = _age(older_than)
    app = _boot(target, database_url, existing=True)
    with _database(app):
        deleted = app.purge_runs(older_than=age, status=statuses or None)
    click.echo(f"deleted {deleted} finished run{'' if deleted == 1 else 's'}")


@runs.command("list")
@click.argument("target")
@click.option("--workflow", help="Only runs of this workflow.")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(STATUSES),
    help="Only runs in this status; repeat it for several.",
)
@click.option("--stranded", is_flag=True, help="Only suspended runs the deployed code cannot resume, with why.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many runs (the newest).")
@click.option(
    "--before",
    metavar="RUN_ID",
    type=click.UUID,
    help="Only the runs listed after this one: the next page, from the last run of the previous.",
)
@click.option(
    "--tenant",
    "tenant_id",
    metavar="TENANT_ID",
    type=click.UUID,
    help="Only the runs this tenant's users started (00000000-0000-0000-0000-000000000000: cron's).",
)
@click.option("--key", help="With --tenant: the run started with this key (start_workflow(..., key=...)).")
@click.option("--database-url", help=URL_HELP)
@verbosity()
def list_runs(
    target: str,
    workflow: str | None,
    statuses: tuple[RunStatus, ...],
    stranded: bool,
    limit: int | None,
    before: uuid.UUID | None,
    tenant_id: uuid.UUID | None,
    key: str | None,
    database_url: str | None,
) -> None:
    """List workflow runs, newest first, with times and error code.

    Per run: its workflow, status, the step it is at, when it wakes, when it was created and
    last updated (UTC), the start of the fingerprint of the definition it started under, and
    a failed run's error code (a suspended run's too: why it waits to try again; with
    --stranded: the reason the run cannot resume).  With --limit, a full page ends with the
    --before option that lists the next (on stderr).
    """
    if key is not None and tenant_id is None:
        raise click.UsageError("--key needs --tenant: a key is its tenant's")
    app = _boot(target, database_url, existing=True)
    with _database(app):
        try:  # one more than asked: whether a next page exists
            found = app.runs(
                workflow,
                status=statuses or None,
                stranded=stranded,
                limit=None if limit is None else limit + 1,
                before=before,
                tenant_id=tenant_id,
                key=key,
            )
        except LookupError as exc:
            raise click.BadParameter(str(exc).removeprefix("before: "), param_hint="'--before'") from exc
    more = limit is not None and len(found) > limit
    found = found[:limit]
    rows = [
        (
            str(r.run_id),
            r.workflow,
            r.status,
            r.path or "",
            _time(r.wake_at),
            _time(r.created_at),
            _time(r.updated_at),
            (r.fingerprint or "")[:12],
            (r.error or {}).get("message" if stranded else "code", ""),
        )
        for r in found
    ]
    header = ("run", "workflow", "status", "at", "wakes", "created", "updated", "definition")
    _table((*header, "why" if stranded else "error"), rows)
    if more:
        click.echo(f"more: add --before {found[-1].run_id}", err=True)
    if not found and workflow is not None and workflow not in app.workflows:
        # Not an error: a workflow removed from the code may still have runs.  But an empty
        # list for a mistyped name reads as "no runs", so say what the App registers.
        known = ", ".join(sorted(app.workflows)) or "none"
        click.echo(f"note: this App registers no workflow {workflow!r} (it registers: {known})", err=True)


def _time(at: datetime | None) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S}" if at is not None else ""


@main.group(cls=_Listing)
def outbox() -> None:
    """List pending and dead deliveries; requeue one; purge sent ones.

    outbox MODULE:APP (or outbox list MODULE:APP) lists; outbox requeue MODULE:APP ID requeues;
    outbox purge MODULE:APP --older-than P30D deletes sent rows.
    """


@outbox.command("requeue")
@click.argument("target")
@click.argument("outbox_id", type=click.UUID)
@click.option("--database-url", help=URL_HELP)
@verbosity()
def requeue(target: str, outbox_id: uuid.UUID, database_url: str | None) -> None:
    """Deliver a dead row again: pending, due now, its attempts counted from zero."""
    app = _boot(target, database_url, existing=True)
    with _database(app):
        _done(app, app.requeue(outbox_id, user=OPERATOR))
    click.echo(f"requeued {outbox_id}")


@outbox.command("purge")
@click.argument("target")
@_older_than("rows sent")
@click.option("--database-url", help=URL_HELP)
@verbosity()
def purge_outbox(target: str, older_than: str, database_url: str | None) -> None:
    """Delete sent deliveries older than --older-than.

    Pending and dead rows stay.  Run it from a periodic job; it deletes in batches beside
    running workers.
    """
    age = _age(older_than)
    app = _boot(target, database_url, existing=True)
    with _database(app):
        deleted = app.purge_outbox(older_than=age)
    click.echo(f"deleted {deleted} sent outbox row{'' if deleted == 1 else 's'}")


def _age(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--older-than'") from None


@outbox.command("list")
@click.argument("target")
@click.option("--all", "show_all", is_flag=True, help="Also list sent deliveries: every row app.outbox() returns.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many deliveries (the oldest).")
@click.option(
    "--after",
    metavar="ID",
    type=click.UUID,
    help="Only the deliveries listed after this one: the next page, from the last row of the previous.",
)
@click.option("--database-url", help=URL_HELP)
@verbosity()
def list_outbox(
    target: str, show_all: bool, limit: int | None, after: uuid.UUID | None, database_url: str | None
) -> None:
    """List pending and dead deliveries, oldest first.

    Mail and webhooks, with attempts, next attempt (UTC), target and last error.  With
    --limit, a full page ends with the --after option that lists the next (on stderr).
    """
    app = _boot(target, database_url, existing=True)
    statuses: tuple[Literal["pending", "sent", "dead"], ...] | None = None if show_all else ("pending", "dead")
    with _database(app):
        try:  # one more than asked: whether a next page exists
            items = app.outbox(status=statuses, limit=None if limit is None else limit + 1, after=after)
        except LookupError as exc:
            raise click.BadParameter(str(exc).removeprefix("after: "), param_hint="'--after'") from exc
    more = limit is not None and len(items) > limit
    items = items[:limit]
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
    ]
    _table(("id", "kind", "status", "attempts", "next attempt", "target", "last error"), rows)
    if more:
        click.echo(f"more: add --after {items[-1].id}", err=True)


@main.group()
def keys() -> None:
    """Idempotency keys: purge the expired ones."""


@keys.command("purge")
@click.argument("target")
@click.option("--database-url", help=URL_HELP)
@verbosity()
def purge_keys(target: str, database_url: str | None) -> None:
    """Delete the idempotency keys older than the App's idempotency_retention.

    Run it from a periodic job; it deletes in batches beside running dispatches.
    """
    app = _boot(target, database_url, existing=True)
    with _database(app):
        deleted = app.purge_idempotency_keys()
    click.echo(f"deleted {deleted} expired idempotency key{'' if deleted == 1 else 's'}")


def _done(app: App, result: Ok[object] | Failure) -> None:
    """An operation's Failure is the command's error (exit status 1).  One that is about
    the database names it, as the listings' errors do: ``unavailable`` (down, busy), and
    ``internal_error`` on a database that lacks a column of this release, with what to
    migrate."""
    if isinstance(result, Failure):
        where = f" (database {shown_url(app.engine.url)})" if result.code == "unavailable" else ""
        lacking = _schema_problems(app) if result.code == "internal_error" else []
        raise click.ClickException(f"{result.code}: {result.message}{where}{_migrate_first(lacking)}")


def _boot(target: str, database_url: str | None, *, existing: bool = False) -> App:
    """Load MODULE:APP on ``database_url`` (or the environment's, or its own).  ``existing``:
    for a command that lists or changes what the database holds, which must find it there
    (a SQLite file that is not there is a usage error; connecting would create it, empty,
    and the command then said only that its tables are missing).  A URL given is checked
    before the app is loaded: a factory may create its tables."""
    url = _url(database_url)
    if existing and url is not None:
        _existing(url, "--database-url" if database_url else "KUMIKO_DATABASE_URL")
    try:
        app = load_app(target, url)
    except BootError as exc:
        raise click.ClickException(str(exc)) from exc
    if existing and url is None:
        _existing(app.engine.url, f"the database_url of {target}")
    return app


@contextmanager
def _database(target: App | str | URL | None) -> Iterator[None]:
    """A database that is down, or has no tables yet, is a short error, not a traceback;
    one that lacks a table or column of an App's (an older release's) names each.
    ``target``: the App, or before there is one, the URL given to make it."""
    app, url = (target, target.engine.url) if isinstance(target, App) else (None, target)
    try:
        yield
    except DBAPIError as exc:
        reason = next(iter(str(exc.orig).strip().splitlines()), type(exc.orig).__name__)
        where = f"database {shown_url(url)}" if url else "the app's database"
        problems = [] if app is None else _schema_problems(app)
        if problems:
            raise click.ClickException(f"{where}: {reason}{_migrate_first(problems)}") from exc
        if write_refused(exc):  # only an engine of read_only_engines() refuses a write so
            raise click.ClickException(
                f"{where}: {reason}\n"
                "The check only reads this database, and building MODULE:APP wrote to it: a factory's"
                " app.create_all() creating a table this code adds?  Check against a factory that leaves"
                " the schema to your migrations, or an App."
            ) from exc
        raise click.ClickException(f"{where}: {reason}{_hint(exc, url)}") from exc


_CREATE_TABLES: Final = "Were the tables created (app.create_all() or your migrations)?"


def _hint(exc: DBAPIError, url: URL | str | None) -> str:
    """The line that follows a database error: what to check, for the error at hand.  A
    SQLite file has no server to reach, and its own errors already name the file and the
    fix (``_engine``), so it gets a hint only for a table it lacks."""
    if lacking(exc) is not None:
        return f"\n{_CREATE_TABLES}"
    if url is not None and make_url(url).get_backend_name() == "sqlite":
        return ""
    if unreachable(exc):
        return "\nIs the server reachable?"
    return "\nIs the server reachable, and were the tables created (app.create_all() or your migrations)?"


def _migrate_first(problems: list[str]) -> str:
    """The lines that end an error with what the database lacks, if anything."""
    if not problems:
        return ""
    return "".join(f"\n  - {problem}" for problem in problems) + f"\n{MIGRATE_FIRST}"


def _schema_problems(app: App) -> list[str]:
    """What the database lacks of ``app``'s tables; none when it cannot be asked (down) or
    has none of them (never set up: the generic message says to create them)."""
    try:
        if not any(inspect_database(app.engine).has_table(t.name, schema=t.schema) for t in app.tables()):
            return []
        return missing_columns(app.engine, app.tables())
    except DBAPIError:
        return []


def _printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as its escape: an
    error stored from a peer (an SMTP server's reply, a receiver's reason) may carry an
    escape sequence that would recolour, retitle or clear an operator's terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _columns(text: str) -> int:
    """The terminal columns ``text`` takes: two for a wide character (CJK), none for a
    combining mark.  Padding by ``len`` pushed a row with such a name out of its columns."""
    return sum(
        0 if unicodedata.category(c) in ("Mn", "Me") else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    if not rows:
        click.echo("(none)")
        return
    rows = [[_printable(cell) for cell in row] for row in rows]
    widths = [max(_columns(h), *(_columns(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c + " " * (w - _columns(c)) for c, w in zip(cells, widths, strict=True))

    click.echo(click.style(line(header), bold=True))
    for row in rows:
        click.echo(line(row))
