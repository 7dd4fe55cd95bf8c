"""A throw-away PostgreSQL server for tests (the kit's, and this project's own suite; needs the
``postgres`` extra).

``start_test_postgres()`` returns a :class:`PostgresServer` whose ``url`` is a SQLAlchemy URL
(``postgresql+psycopg://postgres@127.0.0.1:PORT/kumiko_test``), or ``None`` when no server
binaries (or no psycopg) are found and PostgreSQL is optional for this run (tests then skip
with :func:`unavailable_reason`). With ``CI`` set or ``KUMIKO_REQUIRE_POSTGRES=1`` they raise
:class:`PostgresUnavailable` instead, so CI cannot go green by skipping.  psycopg is imported
when a server is used, not with this module: the pytest plugin of a project installed
without it skips (or fails) naming the extra, rather than erroring with an ImportError.

Environment:
    KUMIKO_TEST_POSTGRES_URL  use this running server instead of starting one
    KUMIKO_PG_BIN             directory holding initdb/pg_ctl/postgres (no fallback search)
    KUMIKO_REQUIRE_POSTGRES   "1": missing binaries are an error (as under CI)

The server listens on 127.0.0.1 only (a free port, re-picked if start-up fails), keeps its
socket and data in a fresh directory under /tmp, runs without durability (fsync, full-page
writes and synchronous commit off), and is stopped with ``pg_ctl stop -m immediate`` and
deleted on :meth:`PostgresServer.stop`, at interpreter exit, or on SIGTERM (while that signal
has its default action, which then still ends the process). Directories of servers whose
owning process died without cleaning up (SIGKILL) are swept on the next start.

PostgreSQL refuses to run as root: as root, initdb/pg_ctl run as the system user ``kumiko-pg``
(created with useradd if missing) via runuser (or setpriv, or su), which owns the directory.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path

from sqlalchemy.engine import make_url

PG_USER = "kumiko-pg"
DB_NAME = "kumiko_test"
DIR_PREFIX = "kumiko-pg-"
_OWNER_FILE = "owner"
_START_ATTEMPTS = 5
_PG_CTL_TIMEOUT_S = 60
_CONNECT_TIMEOUT_S = 30.0

_SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    # Runtime tests run 8 threads and 4 worker processes, each with its own pool.
    "max_connections": "200",
    "max_wal_size": "'1GB'",
    "log_min_messages": "warning",
}


class PostgresUnavailable(RuntimeError):
    """PostgreSQL is required for this run (CI / KUMIKO_REQUIRE_POSTGRES) but cannot be had."""


class PostgresStartError(RuntimeError):
    """The binaries are there but the server would not start."""


# --------------------------------------------------------------------------- binaries


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def postgres_required() -> bool:
    """Whether a missing server must fail the run (CI, or KUMIKO_REQUIRE_POSTGRES=1)."""
    return _truthy(os.environ.get("CI")) or _truthy(os.environ.get("KUMIKO_REQUIRE_POSTGRES"))


def _has_server_binaries(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres"))


def _version_key(bin_dir: str) -> tuple[int, ...]:
    match = re.search(r"/postgresql/([0-9.]+)/bin$", bin_dir)
    return tuple(int(part) for part in match.group(1).split(".") if part) if match else ()


def find_pg_bin() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres, or None.

    KUMIKO_PG_BIN wins outright (no fallback); then PATH (symlinks resolved, so pg_ctl finds
    its own postgres and share dir); then the newest /usr/lib/postgresql/*/bin.
    """
    override = os.environ.get("KUMIKO_PG_BIN")
    if override:
        path = Path(override)
        return path if _has_server_binaries(path) else None
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidate = Path(os.path.realpath(on_path)).parent
        if _has_server_binaries(candidate):
            return candidate
    for bin_dir in sorted(glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True):
        if _has_server_binaries(Path(bin_dir)):
            return Path(bin_dir)
    return None


#: Why no server can be used when the driver is missing: the ``testing`` extra brings it.
DRIVER_MISSING = 'psycopg, the PostgreSQL driver, is not installed: pip install "kumiko-typed[testing]"'


def _driver_missing() -> bool:
    return importlib.util.find_spec("psycopg") is None


def unavailable_reason() -> str:
    """Why no server can be started (the skip reason / error message)."""
    if _driver_missing():
        return DRIVER_MISSING
    override = os.environ.get("KUMIKO_PG_BIN")
    where = (
        f"KUMIKO_PG_BIN={override!r} holds no initdb/pg_ctl/postgres"
        if override
        else "searched PATH and /usr/lib/postgresql/*/bin"
    )
    return (
        "PostgreSQL 15 server binaries not found; install postgresql-15 "
        "(apt-get install postgresql-15) or set KUMIKO_PG_BIN to the directory holding "
        f"initdb/pg_ctl/postgres, or KUMIKO_TEST_POSTGRES_URL to a running server ({where})"
    )


# --------------------------------------------------------------------------- running as root


def _ensure_pg_user() -> pwd.struct_passwd:
    """The unprivileged ``kumiko-pg`` user, created (once, under a lock) if missing."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(PG_USER)
    # xdist workers race to create it: serialize, and re-check under the lock.
    with open(os.path.join(tempfile.gettempdir(), "kumiko-useradd.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(PG_USER)
        useradd = shutil.which("useradd")
        if useradd is None:
            raise PostgresStartError(
                f"running as root and user {PG_USER!r} is missing, but there is no useradd to create it"
            )
        shell = "/usr/sbin/nologin" if os.path.exists("/usr/sbin/nologin") else "/bin/false"
        proc = subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", shell, PG_USER],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            return pwd.getpwnam(PG_USER)
        except KeyError:
            raise PostgresStartError(f"useradd {PG_USER} failed ({proc.returncode}): {proc.stderr.strip()}") from None


def _as_user_prefix(user: pwd.struct_passwd) -> list[str] | None:
    """argv prefix that runs a command as ``user``; None means: use su."""
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", user.pw_name, "--"]
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--"]
    return None


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    """A port free on 127.0.0.1 right now (the server start is retried if it gets taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _process_identity(pid: int) -> str | None:
    """``"pid starttime"`` — survives PID reuse; None if the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return f"{pid} ?"
    return f"{pid} {stat.rsplit(')', 1)[1].split()[19]}"


def _base_dir() -> str:
    # Short (unix-socket paths max ~107 bytes) and world-traversable for the server user.
    return "/tmp" if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK | os.X_OK) else tempfile.gettempdir()


def _conninfo(url: str, database: str | None = None) -> str:
    """A libpq URI for psycopg from a SQLAlchemy URL (optionally another database)."""
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


def _with_database(url: str, database: str) -> str:
    return make_url(url).set(database=database).render_as_string(hide_password=False)


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


# --------------------------------------------------------------------------- the server


@dataclass
class PostgresServer:
    """A running server: ``url`` is the ``kumiko_test`` database; ``admin_url`` the ``postgres`` one."""

    url: str
    admin_url: str
    external: bool = False
    port: int | None = None
    base_dir: Path | None = None
    bin_dir: Path | None = None
    run_as: pwd.struct_passwd | None = None
    startup_seconds: float = 0.0
    _stopped: bool = field(default=False, repr=False)
    # Reentrant: the SIGTERM handler may stop the server while the main thread holds it.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _started_by: int = field(default_factory=os.getpid, repr=False)

    @property
    def data_dir(self) -> Path | None:
        return None if self.base_dir is None else self.base_dir / "data"

    @property
    def log_file(self) -> Path | None:
        return None if self.base_dir is None else self.base_dir / "server.log"

    # -- databases --------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """CREATE DATABASE ``name`` (empty); returns its SQLAlchemy URL."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(_conninfo(self.admin_url), autocommit=True) as conn:
            # PG 15+: FILE_COPY skips WAL-logging the template's pages; with fsync off its
            # checkpoint is cheap, so it is a bit faster than the default WAL_LOG here.
            strategy = sql.SQL(" STRATEGY FILE_COPY") if conn.info.server_version >= 150000 else sql.SQL("")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)) + strategy)
        return _with_database(self.url, name)

    def drop_database(self, name: str) -> None:
        """Terminate the database's leftover connections, then DROP it (if it exists)."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(_conninfo(self.admin_url), autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            force = sql.SQL(" WITH (FORCE)") if conn.info.server_version >= 130000 else sql.SQL("")
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)) + force)

    # -- lifecycle --------------------------------------------------------------------

    def stop(self) -> None:
        """Stop (immediate) and delete the directory; idempotent; no-op for an external server."""
        with self._lock:
            if self._stopped or self.external:
                self._stopped = True
                return
            self._stopped = True
        with contextlib.suppress(ValueError):
            _RUNNING.remove(self)
        assert self.base_dir is not None
        _stop_dir(self.base_dir, self.bin_dir, self.run_as)


_RUNNING: list[PostgresServer] = []


def _stop_all() -> None:
    """Stop this process's servers: a forked child (a pool's worker) inherits the list, the
    atexit hook and the SIGTERM handler, not the servers, and its end must not stop them."""
    for server in [s for s in _RUNNING if s._started_by == os.getpid()]:
        with contextlib.suppress(Exception):
            server.stop()


atexit.register(_stop_all)


def _stop_all_on_sigterm() -> None:
    """SIGTERM (a CI timeout, ``timeout pytest``) ends the process without atexit: stop the
    servers first, then die of the signal as before.  Only while SIGTERM has its default
    action (a handler of the user's stays theirs), and only from the main thread, the one
    that may set handlers."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def stop_then_end(signum: int, _frame: object) -> None:
        _stop_all()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, stop_then_end)


def _run(
    argv: list[str], base_dir: Path, run_as: pwd.struct_passwd | None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    if run_as is not None:
        prefix = _as_user_prefix(run_as)
        if prefix is None:
            argv = ["su", "-s", "/bin/sh", run_as.pw_name, "-c", "exec " + shlex.join(argv)]
        else:
            argv = prefix + argv
    return subprocess.run(
        argv,
        cwd=base_dir,  # the server user must be able to stat its cwd
        env=_child_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _stop_dir(base_dir: Path, bin_dir: Path | None, run_as: pwd.struct_passwd | None) -> None:
    data = base_dir / "data"
    pid_file = data / "postmaster.pid"
    if pid_file.exists():
        stopped = False
        if bin_dir is not None:
            with contextlib.suppress(Exception):
                proc = _run(
                    [str(bin_dir / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate", "-w", "-t", "30"],
                    base_dir,
                    run_as,
                    timeout=60,
                )
                stopped = proc.returncode == 0
        if not stopped:  # fall back to signalling the postmaster ourselves (SIGQUIT = immediate)
            with contextlib.suppress(Exception):
                pid = int(pid_file.read_text().split()[0])
                if b"postgres" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    raise ProcessLookupError(pid)  # stale pid file: the PID was reused
                os.kill(pid, signal.SIGQUIT)
                for _ in range(100):
                    os.kill(pid, 0)
                    time.sleep(0.05)
    shutil.rmtree(base_dir, ignore_errors=True)


def _sweep_stale(bin_dir: Path, run_as: pwd.struct_passwd | None) -> None:
    """Stop and delete servers left by test processes that died without cleaning up."""
    for entry in glob(os.path.join(_base_dir(), DIR_PREFIX + "*")):
        base = Path(entry)
        try:
            owner = (base / _OWNER_FILE).read_text().strip()
            pid = int(owner.split()[0])
        except (OSError, ValueError, IndexError):
            continue  # being set up right now, or not ours
        if _process_identity(pid) == owner or (owner.endswith(" ?") and _process_identity(pid)):
            continue  # its owner is alive
        try:
            stat = base.stat()
        except OSError:
            continue
        if os.geteuid() != 0 and stat.st_uid != os.geteuid():
            continue  # someone else's
        user = run_as if os.geteuid() == 0 and run_as is not None and stat.st_uid == run_as.pw_uid else None
        with contextlib.suppress(Exception):
            _stop_dir(base, bin_dir, user)


def _make_base_dir(run_as: pwd.struct_passwd | None) -> Path:
    base = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=_base_dir()))  # mode 0o700
    if run_as is not None:
        os.chown(base, run_as.pw_uid, run_as.pw_gid)
    return base


def _write_owner(base: Path) -> None:
    identity = _process_identity(os.getpid()) or f"{os.getpid()} ?"
    (base / _OWNER_FILE).write_text(identity + "\n")


def _fail(step: str, proc: subprocess.CompletedProcess[str], log: Path | None = None) -> PostgresStartError:
    detail = (proc.stdout + proc.stderr).strip()
    if log is not None and log.exists():
        detail += "\n--- server log ---\n" + log.read_text(errors="replace")[-4000:]
    return PostgresStartError(f"{step} failed (exit {proc.returncode}):\n{detail}")


def _wait_for_connections(conninfo: str, deadline: float) -> None:
    import psycopg

    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(conninfo, connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
                return
        except psycopg.OperationalError as exc:
            last = exc
            time.sleep(0.1)
    raise PostgresStartError(f"server did not accept connections: {last}")


def _start_local(bin_dir: Path) -> PostgresServer:
    began = time.monotonic()
    run_as = _ensure_pg_user() if os.geteuid() == 0 else None
    _sweep_stale(bin_dir, run_as)
    base = _make_base_dir(run_as)
    try:
        _write_owner(base)  # a dead owner means: sweep this directory
        data = base / "data"
        log = base / "server.log"
        proc = _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "--no-instructions",
                "-E",
                "UTF8",
                "--locale=C",
            ],
            base,
            run_as,
        )
        if proc.returncode != 0:
            raise _fail("initdb", proc)
        settings = dict(_SERVER_SETTINGS, unix_socket_directories=f"'{base}'")
        with open(data / "postgresql.conf", "a") as conf:
            conf.write("\n# kumiko test harness\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

        last_error: PostgresStartError | None = None
        for _attempt in range(_START_ATTEMPTS):
            port = _free_port()
            proc = _run(
                [
                    str(bin_dir / "pg_ctl"),
                    "start",
                    "-D",
                    str(data),
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    str(_PG_CTL_TIMEOUT_S),
                    "-o",
                    f"-p {port}",
                ],
                base,
                run_as,
                timeout=_PG_CTL_TIMEOUT_S + 30,
            )
            if proc.returncode == 0:
                break
            last_error = _fail("pg_ctl start", proc, log)
            # Port taken between the bind test and the start (another xdist worker?): make
            # sure nothing half-started lingers, then try another port.
            _run([str(bin_dir / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate"], base, run_as, timeout=60)
        else:
            assert last_error is not None
            raise last_error

        admin_url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        server = PostgresServer(
            url=_with_database(admin_url, DB_NAME),
            admin_url=admin_url,
            port=port,
            base_dir=base,
            bin_dir=bin_dir,
            run_as=run_as,
        )
        _RUNNING.append(server)
        _stop_all_on_sigterm()
        _wait_for_connections(_conninfo(admin_url), time.monotonic() + _CONNECT_TIMEOUT_S)
        server.create_database(DB_NAME)
        server.startup_seconds = time.monotonic() - began
        return server
    except BaseException:
        _stop_dir(base, bin_dir, run_as)
        for server in [s for s in _RUNNING if s.base_dir == base]:
            server._stopped = True
            _RUNNING.remove(server)
        raise


def _external(url: str) -> PostgresServer:
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    full = parsed.render_as_string(hide_password=False)
    server = PostgresServer(url=full, admin_url=_with_database(full, "postgres"), external=True, port=parsed.port)
    _wait_for_connections(_conninfo(full), time.monotonic() + _CONNECT_TIMEOUT_S)
    return server


def start_test_postgres() -> PostgresServer | None:
    """Start (or, with KUMIKO_TEST_POSTGRES_URL, attach to) a test server.

    Returns None if the binaries or psycopg are missing and PostgreSQL is optional for this
    run; raises PostgresUnavailable if they are missing and required (CI /
    KUMIKO_REQUIRE_POSTGRES=1), and PostgresStartError if they are there but the server will
    not start.
    """
    if _driver_missing():
        if postgres_required():
            raise PostgresUnavailable(DRIVER_MISSING)
        return None
    external = os.environ.get("KUMIKO_TEST_POSTGRES_URL")
    if external:
        return _external(external)
    bin_dir = find_pg_bin()
    if bin_dir is None:
        if postgres_required():
            raise PostgresUnavailable(unavailable_reason())
        return None
    return _start_local(bin_dir)
