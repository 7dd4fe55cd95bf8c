"""The installed package works outside a clone: a wheel built from this tree, installed by
the tutorial's own commands into a fresh venv under ``tmp_path`` (dependencies from the
package index), runs ``kumiko-typed demo`` in an empty folder and the tutorial's commands
with the tutorial's files, and ships the mypy plugin and the PEP 561 markers.

One venv serves the whole module (module-scoped fixtures); commands see a PATH without this
repository's venv, so nothing the new venv lacks is borrowed from it.  A second half, at the
end, needs no package index: a working clone's wheel, installed by itself into a venv that
borrows only its dependencies from this one."""

from __future__ import annotations

import email
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _docblocks import ROOT, parse
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

# One worker builds the venv: ./dev test distributes with --dist loadgroup.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]

TUTORIAL = ROOT / "docs" / "tutorial.md"
#: The tutorial's install line names the clone; the test gives pip the wheel built from it.
CLONE = "/path/to/kumiko-typed"
TIMEOUT = 600


@dataclass(frozen=True)
class Command:
    line: str  # what follows "$ "
    output: list[str]  # the lines the tutorial shows after it


def _commands() -> list[Command]:
    """The ``$ `` lines of the tutorial's console blocks, with the output shown under each."""
    return [c for block in parse(TUTORIAL) if block.lang == "console" for c in _console(block.code)]


def _console(code: str) -> list[Command]:
    """A console block's ``$ `` lines, with the output shown under each."""
    out: list[Command] = []
    for text in code.splitlines():
        if text.startswith("$ "):
            out.append(Command(text[2:], []))
        else:
            out[-1].output.append(text)
    return out


def _command(line: str) -> Command:
    found = [c for c in _commands() if c.line == line]
    assert len(found) == 1, f"docs/tutorial.md shows `$ {line}` {len(found)} times"
    return found[0]


def _env(tmp: Path, venv: Path | None = None) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH, no venv of this repository on PATH
    (``python3`` is this interpreter's base one), ``venv`` activated when given."""
    shim = tmp / "shim"
    if not shim.is_dir():
        shim.mkdir()
        (shim / "python3").symlink_to(getattr(sys, "_base_executable", sys.executable))
    ours = str(Path(sys.executable).parent)
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and p != ours]
    drop = ("PYTHON", "VIRTUAL_ENV", "KUMIKO_", "PYTEST_", "MYPY", "COV_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(PATH=os.pathsep.join([str(shim), *path]), TMPDIR=str(tmp), NO_COLOR="1")
    if venv is not None:
        env.update(PATH=os.pathsep.join([str(venv / "bin"), env["PATH"]]), VIRTUAL_ENV=str(venv))
    return env


def _run(cmd: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def _explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"{result.args[-1]}: exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def _tracked() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()


def _working_clone(clone: Path, strays: tuple[str, ...]) -> Path:
    """A working clone at ``clone``: the tracked files, and ``strays`` beside them (what a
    developer leaves in a clone, each holding a secret)."""
    for name in _tracked():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clone / name)
    for stray in strays:
        (clone / stray).parent.mkdir(parents=True, exist_ok=True)
        (clone / stray).write_text("KUMIKO_SECRET_CRM=hunter2\n", encoding="utf-8")
    return clone


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", str(ROOT), "-w", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("*.whl")
    return built


@dataclass(frozen=True)
class Installed:
    tmp: Path
    venv: Path
    todo: Path  # the tutorial's project folder, holding its files

    def env(self) -> dict[str, str]:
        return _env(self.tmp, self.venv)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Section 1 of the tutorial run as written, the wheel in place of the clone, then the
    tutorial's files (mypy.ini and its ``<!-- file: -->`` blocks) saved in the new folder."""
    tmp = tmp_path_factory.mktemp("user")
    install = [c.line for c in _commands()[:3]]
    assert install[0] == "mkdir todo && cd todo" and CLONE in install[2], install
    script = "set -e\n" + "\n".join(install).replace(CLONE, str(wheel))
    result = _run(script, tmp, _env(tmp))
    assert result.returncode == 0, _explain(result)
    todo = tmp / "todo"
    (ini,) = [b for b in parse(TUTORIAL) if b.lang == "ini"]
    (todo / "mypy.ini").write_text(ini.code, encoding="utf-8")
    for block in parse(TUTORIAL):
        if block.named is not None:
            (todo / block.named).write_text(block.code, encoding="utf-8")
    return Installed(tmp, todo / ".venv", todo)


def test_the_wheel_ships_the_plugin_the_demo_app_and_the_typed_markers(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"kumiko_typed/py.typed", "kumiko_typed_mypy/py.typed", "kumiko_typed_mypy/__init__.py"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or n.startswith(("tests/", "examples/"))]
    # The demo app is the repository's examples/inventory, shipped as it is (one copy of it).
    example = ROOT / "examples" / "inventory"
    shipped = {n.removeprefix("kumiko_typed/_demo_app/") for n in names if n.startswith("kumiko_typed/_demo_app/")}
    assert shipped == {p.name for p in example.glob("*.py")}
    with zipfile.ZipFile(wheel) as archive:
        for name in shipped:
            assert archive.read(f"kumiko_typed/_demo_app/{name}").decode() == (example / name).read_text()
    assert wheel.name in TUTORIAL.read_text(encoding="utf-8"), "docs/tutorial.md names another wheel file"


def test_the_wheel_installs_only_its_two_packages(wheel: Path) -> None:
    """No tests, examples, scripts or benches as top-level packages of a user's venv."""
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"kumiko_typed", "kumiko_typed_mypy", "kumiko_typed-0.1.0.dist-info"}
    # pyproject says MIT: the text it refers to travels with the package.
    assert "kumiko_typed-0.1.0.dist-info/licenses/LICENSE" in names


def test_the_sdist_is_the_tracked_tree_and_builds_the_same_wheel(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The source distribution holds every tracked file and nothing else: a working clone's
    untracked files (notes, an .env, the mail folder an example leaves where it ran) were
    shipped, only .gitignore kept anything out.  A wheel built from it is the wheel built
    from the tree (the demo app, the generated builders, the plugin)."""
    tmp = tmp_path_factory.mktemp("sdist")
    strays = ("notes.txt", ".env", "examples/kumiko-mail/new/1.eml", "orders.sqlite3")
    clone = _working_clone(tmp / "clone", strays)
    result = _run(f"{sys.executable} -m hatchling build -t sdist -d {tmp / 'sdist'}", clone, _env(tmp))
    assert result.returncode == 0, _explain(result)
    (sdist,) = (tmp / "sdist").glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        shipped = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name} - {"PKG-INFO"}
    assert shipped == set(_tracked()), shipped ^ set(_tracked())

    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", str(sdist), "-w", str(tmp / "wheel")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    (rebuilt,) = (tmp / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as ours, zipfile.ZipFile(rebuilt) as theirs:
        assert ours.namelist() == theirs.namelist()
        assert [ours.read(n) for n in ours.namelist()] == [theirs.read(n) for n in theirs.namelist()]


def test_the_package_comes_from_the_venv_not_the_clone(installed: Installed) -> None:
    code = "import kumiko_typed, kumiko_typed_mypy; print(kumiko_typed.__file__); print(kumiko_typed_mypy.__file__)"
    result = _run(f"python -c '{code}'", installed.todo, installed.env())
    assert result.returncode == 0, _explain(result)
    for line in result.stdout.splitlines():
        assert Path(line).is_relative_to(installed.venv), _explain(result)


def test_demo_runs_in_an_empty_folder(installed: Installed) -> None:
    empty = installed.tmp / "empty"
    empty.mkdir()
    result = _run("kumiko-typed demo", empty, installed.env())
    assert result.returncode == 0, _explain(result)
    for line in ("version_conflict", "rolled back", "completed", "delivered to the maildir"):
        assert line in result.stdout, _explain(result)
    assert not list(empty.iterdir()), "the demo wrote into the folder it was started in"


def test_the_tutorials_program_prints_what_the_tutorial_shows(installed: Installed) -> None:
    command = _command("python tasks.py")
    result = _run(command.line, installed.todo, installed.env())
    assert result.returncode == 0, _explain(result)
    uuid = re.compile(r"UUID\('[0-9a-f-]{36}'\)")
    assert uuid.sub("UUID(...)", result.stdout).splitlines() == [uuid.sub("UUID(...)", s) for s in command.output]


def test_the_tutorials_tests_pass(installed: Installed) -> None:
    command = _command("pytest -q")
    result = _run(command.line + " -p no:cacheprovider", installed.todo, installed.env())
    assert result.returncode == 0, _explain(result)
    timing = re.compile(r" in [\d.]+s$")
    assert [timing.sub("", s) for s in result.stdout.splitlines()] == [timing.sub("", s) for s in command.output]


def test_mypy_with_the_plugin_on_the_tutorials_files(installed: Installed) -> None:
    """The clean run says what the tutorial says; then the two mistakes of section 7, made
    in a copy, give exactly the errors the tutorial quotes."""
    clean = _command("mypy tasks.py test_tasks.py")
    result = _run(clean.line, installed.todo, installed.env())
    assert (result.returncode, result.stdout.splitlines()) == (0, clean.output), _explain(result)

    broken = installed.tmp / "broken"
    shutil.copytree(installed.todo, broken, ignore=shutil.ignore_patterns(".venv", "*.sqlite3"))
    source = (broken / "tasks.py").read_text(encoding="utf-8")
    mistakes = {'c.steps["task"].id': 'c.steps["tsak"].id', '"completed"].version': '"completed"].verison'}
    for right, wrong in mistakes.items():
        assert source.count(right) == 1, right
        source = source.replace(right, wrong)
    (broken / "tasks.py").write_text(source, encoding="utf-8")
    command = _command("mypy tasks.py")
    result = _run(command.line, broken, installed.env())
    assert (result.returncode, result.stdout.splitlines()) == (1, command.output), _explain(result)


def test_the_cli_on_the_tutorials_module(installed: Installed) -> None:
    """ "Where next" names ``kumiko-typed check tasks:make_app`` and ``graph``: both work on it."""
    for command in ("kumiko-typed check tasks:make_app", "kumiko-typed graph tasks:make_app"):
        result = _run(command, installed.todo, installed.env())
        assert result.returncode == 0, _explain(result)
    titles = [line for line in result.stdout.splitlines() if line.startswith("todo:")]
    assert titles == ["todo:task:add", "todo:task:complete", "todo:task:list"]  # "its three pipelines"


PLUGIN_DOC = ROOT / "docs" / "plugin.md"
_REVEALED = re.compile(r'# (Revealed type is ".*")$')


def _tour() -> str:
    (tour,) = [b.code for b in parse(PLUGIN_DOC) if b.named == "plugin_tour.py"]
    return tour


@pytest.mark.parametrize(("lang", "config"), [("ini", "mypy.ini"), ("toml", "pyproject.toml")])
def test_each_documented_mypy_configuration_loads_the_installed_plugin(
    installed: Installed, lang: str, config: str
) -> None:
    """docs/plugin.md's set-up blocks, each alone in a project folder, make the venv's mypy
    load the installed plugin: the tour's notes are exactly the ones its comments show."""
    project = installed.tmp / f"config-{lang}"
    project.mkdir()
    (block,) = [b.code for b in parse(PLUGIN_DOC) if b.lang == lang]
    (project / config).write_text(block, encoding="utf-8")
    tour = _tour()
    (project / "plugin_tour.py").write_text(tour, encoding="utf-8")
    wanted = [
        f"plugin_tour.py:{number}: note: {match[1]}"
        for number, line in enumerate(tour.splitlines(), start=1)
        if (match := _REVEALED.search(line))
    ]
    result = _run("mypy plugin_tour.py", project, installed.env())
    assert result.returncode == 0, _explain(result)
    assert result.stdout.splitlines() == [*wanted, "Success: no issues found in 1 source file"], _explain(result)


def test_a_mypy_of_another_environment_stops_as_the_plugin_page_shows(
    installed: Installed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """docs/plugin.md quotes what a mypy installed without kumiko-typed (pipx's, pre-commit's)
    says of the tutorial's project: that output, exactly, from such a mypy."""
    (command,) = [
        c
        for b in parse(PLUGIN_DOC)
        if b.lang == "console"
        for c in _console(b.code)
        if any("Error importing plugin" in line for line in c.output)
    ]
    tmp = tmp_path_factory.mktemp("mypy-alone")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (mypy,) = project["optional-dependencies"]["mypy"]
    result = _run(f"set -e\npython3 -m venv .venv\n.venv/bin/pip install --quiet '{mypy}'\n", tmp, _env(tmp))
    assert result.returncode == 0, _explain(result)
    result = _run(command.line, installed.todo, _env(tmp, tmp / ".venv"))
    # The error on stderr (written first), the summary on stdout.
    shown = result.stderr.splitlines() + result.stdout.splitlines()
    assert (result.returncode, shown) == (2, command.output), _explain(result)


def test_pyright_reads_the_installed_package_without_the_plugin(installed: Installed) -> None:
    """pyright (this repository's, pointed at the venv's interpreter) in strict mode on the
    tour: no error or warning, and the keys exact through the installed facades (DESIGN §4.8)."""
    project = installed.tmp / "pyright"
    project.mkdir()
    (project / "plugin_tour.py").write_text(_tour(), encoding="utf-8")
    (project / "pyrightconfig.json").write_text('{"typeCheckingMode": "strict"}', encoding="utf-8")
    python = installed.venv / "bin" / "python"
    command = f"{sys.executable} -m pyright --outputjson --pythonpath {python} plugin_tour.py"
    result = _run(command, project, installed.env())
    report = json.loads(result.stdout)
    # No error, and no warning either (reportMissingModuleSource: a package pyright found as stubs only).
    problems = [d["message"] for d in report["generalDiagnostics"] if d["severity"] != "information"]
    assert report["summary"]["filesAnalyzed"] == 1 and not problems, _explain(result)
    revealed = [d["message"] for d in report["generalDiagnostics"] if d["severity"] == "information"]
    assert 'Type of "quote" is "WriteHandler[Order, Decimal]"' in revealed, revealed


#: A user's module with a workflow, for the commands the tutorial's module has nothing for.
SHOP = """\
import attrs

from kumiko_typed import App, Feature, manual


@attrs.frozen
class Order:
    sku: str


shop = Feature("shop")
follow = shop.workflow(
    "follow",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order).wait("PT0S", name="pause").compute("sku", lambda c: c.payload.sku),
)


def make_app(database_url: str = "sqlite:///shop.sqlite3") -> App:
    app = App([shop], database_url=database_url)
    app.create_all()
    return app
"""
START = """\
import uuid
import shop
from kumiko_typed import User
app = shop.make_app()
print(app.start_workflow(shop.follow, shop.Order("tea"), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))
"""


BROKEN = """\
from sqlalchemy.orm import Mapped, mapped_column
from kumiko_typed import Entity
class Thing(Entity):
    __tablename__ = "thing"
    name: Mapped["Nope"] = mapped_column()
"""


def test_the_workflow_commands_on_a_users_module(installed: Installed) -> None:
    """A run suspended by the user's code is resumed by ``kumiko-typed worker``, listed by
    ``runs``, and ``check --against`` finds nothing to strand; bad input is a usage error
    or a one-line error, never a traceback, and a module that raises while loading is shown
    by its own lines, none of the venv's; ``--version`` is the distribution's."""
    project = installed.tmp / "shop"
    project.mkdir()
    (project / "shop.py").write_text(SHOP, encoding="utf-8")
    started = _run(f"python -c '{START}'", project, installed.env())
    assert started.returncode == 0, _explain(started)
    run_id = started.stdout.strip()
    url = f"sqlite:///{project / 'shop.sqlite3'}"
    commands = {
        "kumiko-typed worker shop:make_app --once": (0, "started=0 resumed=1 sent=0 retried=0 dead=0"),
        "kumiko-typed runs shop:make_app --status completed": (0, run_id),
        f"kumiko-typed check shop:make_app --against {url}": (0, "every running and suspended run resumes"),
        "kumiko-typed outbox shop:make_app": (0, "(none)"),
        "kumiko-typed --version": (0, "kumiko-typed, version 0.1.0"),
        "kumiko-typed worker shop:make_app --poll-interval nan": (2, "Invalid value for '--poll-interval'"),
        "kumiko-typed runs cancel shop:make_app 42": (2, "'42' is not a valid UUID"),
        "kumiko-typed check shop:nothing": (1, "module 'shop' has no attribute 'nothing'"),
        "kumiko-typed graph shop:make_app --handler nope": (1, "known: shop:follow"),
        # Raised inside SQLAlchemy, called by kumiko-typed: the user's line, not the venv's.
        "kumiko-typed check broken:app": (1, f"{project / 'broken.py'}:3: class Thing(Entity):"),
    }
    (project / "broken.py").write_text(BROKEN, encoding="utf-8")
    for command, (code, shown) in commands.items():
        result = _run(command, project, installed.env())
        assert result.returncode == code and shown in result.stdout + result.stderr, _explain(result)
        assert "Traceback" not in result.stderr and "site-packages" not in result.stderr, _explain(result)


#: A user's test of both databases, in a project that installed pytest but not the testing extra.
BOTH_DATABASES = """\
from kumiko_typed import Feature


def test_boots(kumiko_app):
    assert kumiko_app([Feature("shop")]).outbox() == []
"""
EXTRAS = {
    "postgres": 'pip install "kumiko-typed[postgres]"',
    "asgi": 'pip install "kumiko-typed[asgi]"',
    "testing": 'pip install "kumiko-typed[testing]"',
}


def test_without_its_extra_each_optional_part_names_the_install(installed: Installed) -> None:
    """The tutorial's venv has neither psycopg nor Starlette.  A PostgreSQL URL (App, command
    line), the ASGI adapter and the kit's PostgreSQL fixtures each said ``No module named
    ...`` from deep inside, with a traceback; now each names the extra to install."""
    project = installed.tmp / "extras"
    project.mkdir()
    env = {k: v for k, v in installed.env().items() if k != "CI"}
    app = 'from kumiko_typed import App; App([], database_url="postgresql://shop:hunter2@db/shop")'
    result = _run(f"python -c '{app}'", project, env)
    assert (
        result.returncode == 1
        and f"database_url: the database driver psycopg is not installed: {EXTRAS['postgres']}" in result.stderr
    ), _explain(result)
    url = "postgresql+psycopg://shop:hunter2@db/shop"
    result = _run(f"kumiko-typed check kumiko_typed._demo_app.app:make_app --database-url {url}", project, env)
    assert result.returncode == 2 and EXTRAS["postgres"] in result.stderr, _explain(result)
    assert "Traceback" not in result.stderr and "hunter2" not in result.stderr, _explain(result)
    result = _run("python -c 'import kumiko_typed.contrib.asgi'", project, env)
    assert result.returncode == 1 and EXTRAS["asgi"] in result.stderr, _explain(result)

    (project / "test_both.py").write_text(BOTH_DATABASES, encoding="utf-8")
    result = _run("pytest -q -rs -p no:cacheprovider", project, env)
    assert result.returncode == 0 and "1 passed, 1 skipped" in result.stdout, _explain(result)
    assert f"psycopg, the PostgreSQL driver, is not installed: {EXTRAS['testing']}" in result.stdout, _explain(result)
    result = _run("pytest -q -p no:cacheprovider", project, {**env, "CI": "true"})  # never green by skipping
    assert result.returncode == 1 and "1 passed, 1 error" in result.stdout, _explain(result)
    assert (
        f"PostgresUnavailable: psycopg, the PostgreSQL driver, is not installed: {EXTRAS['testing']}" in result.stdout
    )


def _lowest_declared() -> list[str]:
    """pyproject's dependencies, each pinned to its lower bound (``attrs>=25.4`` -> ``attrs==25.4``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = []
    for line in project["dependencies"]:
        requirement = Requirement(line)
        (lowest,) = [s.version for s in requirement.specifier if s.operator == ">="]
        pins.append(f"{requirement.name}=={lowest}")
    return pins


def test_the_declared_lower_bounds_install_together_and_run_the_demo(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The wheel in a fresh venv with every dependency at the lowest release pyproject allows:
    pip finds them consistent, and the demo (structuring, the engine, workflows, the outbox,
    the command line) runs.  With cattrs>=24.1 declared, such a venv failed at
    ``import kumiko_typed`` (cattrs.cols had no homogenous_tuple_structure_factory)."""
    tmp = tmp_path_factory.mktemp("lowest")
    pins = " ".join(f"'{p}'" for p in _lowest_declared())
    script = f"set -e\npython3 -m venv .venv\n.venv/bin/pip install --quiet {pins} '{wheel}'\n.venv/bin/pip check\n"
    result = _run(script, tmp, _env(tmp))
    assert result.returncode == 0, _explain(result)
    empty = tmp / "empty"
    empty.mkdir()
    result = _run("kumiko-typed demo", empty, _env(tmp, tmp / ".venv"))
    assert result.returncode == 0 and "delivered to the maildir" in result.stdout, _explain(result)


# The same package with no package index: the wheel a working clone builds (hatchling from
# the dev extra, no build isolation), installed by itself into a venv that finds its
# dependencies, mypy among them, in this venv's site-packages, appended after its own by a
# .pth line.  That folder's own .pth files (this venv's editable install of the clone) are not
# run for an appended folder, so ``kumiko_typed`` is the wheel's (checked below).

#: Untracked files in a working clone's package folders, which the wheel shipped as its own.
PACKAGE_STRAYS = (
    "src/kumiko_typed/.env",
    "src/kumiko_typed/notes.txt",
    "src/kumiko_typed/_steps/TODO",
    "examples/inventory/.env",
    "examples/inventory/handlers.py.orig",
    "mypy_plugin/kumiko_typed_mypy/.plugin.py.swp",
)
#: Where the wheel puts each tracked folder (pyproject's wheel ``sources``).
SHIPPED_AS = {
    "src/kumiko_typed/": "kumiko_typed/",
    "mypy_plugin/kumiko_typed_mypy/": "kumiko_typed_mypy/",
    "examples/inventory/": "kumiko_typed/_demo_app/",
}
#: Packages of the dev and optional extras, none of which ``import kumiko_typed`` may need
#: (OpenTelemetry's API, the otel extra, is imported when installed: that is what turns spans on).
NOT_AT_IMPORT = {
    "pytest", "_pytest", "psycopg", "mypy", "starlette", "uvicorn", "alembic",
    "hypothesis", "jsonschema", "aiosmtpd", "dbos", "kumiko_typed_mypy", "examples", "tests",
}  # fmt: skip
IMPORTS = f"""\
import json, sys
import kumiko_typed, kumiko_typed_mypy
missing = [n for n in kumiko_typed.__all__ if getattr(kumiko_typed, n, None) is None]
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({sorted(NOT_AT_IMPORT - {"kumiko_typed_mypy"})!r}))
print(json.dumps([kumiko_typed.__file__, kumiko_typed_mypy.__file__, kumiko_typed.__version__, missing, loaded]))
"""


@dataclass(frozen=True)
class Offline:
    tmp: Path
    wheel: Path
    venv: Path

    def env(self) -> dict[str, str]:
        return _env(self.tmp, self.venv)

    def site(self) -> Path:
        (site,) = (self.venv / "lib").glob("python3.*/site-packages")
        return site


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> Offline:
    tmp = tmp_path_factory.mktemp("offline")
    clone = _working_clone(tmp / "clone", PACKAGE_STRAYS)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build = [*pip, "wheel", "--quiet", "--no-deps", "--no-index", "--no-build-isolation", str(clone), "-w", str(tmp)]
    result = subprocess.run(build, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = tmp.glob("*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    install = [*pip, "--python", str(venv / "bin" / "python"), "install", "--quiet", "--no-deps", "--no-index"]
    result = subprocess.run([*install, str(built)], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    installed = Offline(tmp, built, venv)
    (installed.site() / "zz_suite_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return installed


def test_a_working_clones_wheel_ships_its_tracked_modules_only(offline: Offline) -> None:
    """Built where a developer left a .env, notes and editor files in the package folders
    (the tutorial builds the wheel in the clone), the wheel shipped each of them inside
    ``kumiko_typed``; now it holds the tracked modules and markers, and nothing else."""
    expected = {
        shipped + name.removeprefix(folder)
        for name in _tracked()
        for folder, shipped in SHIPPED_AS.items()
        if name.startswith(folder)
    }
    names = {n for n in zipfile.ZipFile(offline.wheel).namelist() if ".dist-info/" not in n}
    assert names == expected, names ^ expected


def test_the_installed_package_imports_its_public_names_and_no_dev_package(offline: Offline) -> None:
    (offline.tmp / "imports.py").write_text(IMPORTS, encoding="utf-8")
    result = _run("python imports.py", offline.tmp, offline.env())
    assert result.returncode == 0, _explain(result)
    library, plugin, version, missing, loaded = json.loads(result.stdout)
    assert Path(library).is_relative_to(offline.site()) and Path(plugin).is_relative_to(offline.site())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert (version, missing, loaded) == (project["version"], [], [])


def _requirement(line: str) -> tuple[str, SpecifierSet, frozenset[str]]:
    requirement = Requirement(line)
    return canonicalize_name(requirement.name), requirement.specifier, frozenset(requirement.extras)


def test_the_installed_metadata_is_pyprojects(offline: Offline) -> None:
    """Name, version, licence, Python, dependencies and the entry points, as pyproject says;
    every extra the docs tell a user to install exists; the PEP 561 classifier."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (info,) = offline.site().glob("kumiko_typed-*.dist-info")
    meta = email.message_from_bytes((info / "METADATA").read_bytes())
    assert (meta["Name"], meta["Version"], meta["License-Expression"], meta["Requires-Python"]) == (
        project["name"],
        project["version"],
        project["license"],
        project["requires-python"],
    )
    required = {_requirement(r) for r in meta.get_all("Requires-Dist") if "extra ==" not in r}
    assert required == {_requirement(r) for r in project["dependencies"]}
    assert set(meta.get_all("Provides-Extra")) == set(project["optional-dependencies"])
    docs = " ".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    named = set(re.findall(r"kumiko-typed\[(\w+)\]", docs)) | set(re.findall(r"\.whl\[(\w+)\]", docs))
    assert named and named <= set(meta.get_all("Provides-Extra")), named
    assert "Typing :: Typed" in meta.get_all("Classifier", [])
    entry_points = (info / "entry_points.txt").read_text(encoding="utf-8")
    assert "kumiko-typed = kumiko_typed._cli:main" in entry_points
    assert "kumiko_typed.testing.plugin = kumiko_typed.testing.plugin" in entry_points
    assert (info / "licenses" / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()


#: Run by the venv's Python: every command and sub-command of the installed command line,
#: walked from its group, given ``--help`` and then an option it does not have.
WALK = """\
import json
import click
from click.testing import CliRunner
from kumiko_typed._cli import main

seen = {}
todo = [((), main)]
while todo:
    path, command = todo.pop()
    todo += [((*path, name), sub) for name, sub in getattr(command, "commands", {}).items()]
    for argument in ("--help", "--no-such-option"):
        result = CliRunner().invoke(main, [*path, argument], prog_name="kumiko-typed")
        seen[" ".join((*path, argument))] = [result.exit_code, result.output, repr(result.exception)]
print(json.dumps(seen))
"""


def test_every_installed_command_answers_help_and_refuses_a_bad_option(offline: Offline) -> None:
    """The venv's ``kumiko-typed`` script and ``python -m kumiko_typed`` say the version; an
    unknown option is a usage error (exit 2, a line on stderr, no traceback); each command
    and sub-command of the installed command line shows its help and refuses such an option."""
    empty = offline.tmp / "empty"
    empty.mkdir()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    result = _run("kumiko-typed --version && python -m kumiko_typed --version", empty, offline.env())
    assert result.stdout.splitlines() == [f"kumiko-typed, version {version}"] * 2, _explain(result)
    result = _run("kumiko-typed runs cancel --no-such-option", empty, offline.env())
    assert result.returncode == 2 and "Error: No such option" in result.stderr, _explain(result)
    assert "Traceback" not in result.stderr and not result.stdout, _explain(result)

    (offline.tmp / "walk.py").write_text(WALK, encoding="utf-8")
    result = _run(f"python {offline.tmp / 'walk.py'}", empty, offline.env())
    assert result.returncode == 0, _explain(result)
    seen: dict[str, list[Any]] = json.loads(result.stdout)
    for invocation, (code, output, exception) in seen.items():
        if invocation.endswith("--help"):
            assert (code, output.startswith("Usage: kumiko-typed")) == (0, True), (invocation, output)
        else:
            assert (code, "Error: No such option" in output) == (2, True), (invocation, output, exception)
    walked = {invocation.removesuffix(" --help") for invocation in seen if invocation.endswith(" --help")}
    assert {"check", "demo", "graph", "worker", "runs", "outbox", "runs cancel", "keys purge"} <= walked, walked
    assert not list(empty.iterdir())


def test_the_installed_plugin_says_what_the_repositorys_says(offline: Offline) -> None:
    """mypy, configured as the README says, on case files of the suite (``kumiko-*`` errors,
    mypy's key errors, the revealed types): the same lines from the installed package as
    from the clone's source, and the installed one is what mypy read."""
    cases = offline.tmp / "cases"
    shutil.copytree(ROOT / "typecheck_tests" / "cases", cases, ignore=shutil.ignore_patterns("__pycache__"))
    files = "errors_rules.py errors_types.py errors_editor_keys.py ok_steps.py"
    mypy = f"-m mypy --config-file mypy.ini --no-incremental -v {files}"
    ours = _run(f"{sys.executable} {mypy}", cases, _env(offline.tmp))
    theirs = _run(f"python {mypy}", cases, offline.env())
    assert "kumiko-duplicate-step" in theirs.stdout and theirs.stdout == ours.stdout, _explain(theirs)
    assert f"Parsing {offline.site() / 'kumiko_typed' / '__init__.py'} (kumiko_typed)" in theirs.stderr
    assert f"Parsing {ROOT / 'src' / 'kumiko_typed' / '__init__.py'} (kumiko_typed)" in ours.stderr
