"""The committed ``_builders.py`` is what ``scripts/generate_builders.py`` writes (DESIGN §4.4),
formatted by ``ruff format``; ``--check`` shows what is stale as a unified diff."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path("scripts") / "generate_builders.py"
PACKAGE = Path("src") / "kumiko_typed"


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=root, capture_output=True, text=True, timeout=120, check=False
    )


def _copy_tree(dest: Path) -> Path:
    """The generator's inputs (with the rule table's loader and the ruff settings) and
    output, with the repository's relative layout."""
    shutil.copytree(ROOT / "scripts", dest / "scripts")
    shutil.copytree(ROOT / "mypy_plugin", dest / "mypy_plugin", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    (dest / PACKAGE).mkdir(parents=True)
    for name in ("_rules.py", "_builders.py"):
        shutil.copy2(ROOT / PACKAGE / name, dest / PACKAGE / name)
    return dest / PACKAGE / "_builders.py"


def test_committed_builders_are_fresh() -> None:
    proc = _run(ROOT, "--check")
    assert proc.returncode == 0, proc.stderr


def test_check_fails_on_a_stale_file_and_regenerating_fixes_it(tmp_path: Path) -> None:
    target = _copy_tree(tmp_path)
    original = target.read_text()

    # The untouched copy is fresh: the check really compares against the copy's own file.
    assert _run(tmp_path, "--check").returncode == 0

    target.write_text(original.replace("class SubPipeline(", "class SubPipelineX(", 1))
    proc = _run(tmp_path, "--check")
    assert proc.returncode == 1
    assert "stale" in proc.stderr
    assert target.read_text() != original  # --check does not write

    # Even a one-character change (a trailing newline) is stale.
    target.write_text(original + "\n")
    assert _run(tmp_path, "--check").returncode == 1

    # Regenerating restores the committed text exactly.
    assert _run(tmp_path).returncode == 0
    assert target.read_text() == original
    assert _run(tmp_path, "--check").returncode == 0


def test_check_follows_the_rule_table(tmp_path: Path) -> None:
    """A change of the rule table makes the committed facades stale."""
    target = _copy_tree(tmp_path)
    rules = tmp_path / PACKAGE / "_rules.py"
    text = rules.read_text()
    changed = text.replace('"Compute a value from the context."', '"Compute any value from the context."', 1)
    assert changed != text
    rules.write_text(changed)
    assert _run(tmp_path, "--check").returncode == 1
    assert _run(tmp_path).returncode == 0
    assert "Compute any value from the context." in target.read_text()
    assert _run(tmp_path, "--check").returncode == 0


def test_committed_builders_are_ruff_formatted() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", str(PACKAGE / "_builders.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_prints_a_unified_diff_of_the_stale_lines(tmp_path: Path) -> None:
    target = _copy_tree(tmp_path)
    original = target.read_text()
    target.write_text(original.replace("class SubPipeline(", "class SubPipelineX(", 1))
    proc = _run(tmp_path, "--check")
    assert proc.returncode == 1
    name = "src/kumiko_typed/_builders.py"
    lines = proc.stdout.splitlines()
    assert lines[:2] == [f"--- {name} (committed)", f"+++ {name} (generated)"], proc.stdout
    changed = [line for line in lines[2:] if line.startswith(("-", "+"))]
    assert changed == [
        "-class SubPipelineX(BuilderCore, Generic[P, S, Sc, C]):",
        "+class SubPipeline(BuilderCore, Generic[P, S, Sc, C]):",
    ], proc.stdout
    assert sum(line.startswith("@@") for line in lines) == 1

    # A formatting-only change is stale too: the generator's output is the formatted text.
    target.write_text(original.replace("__slots__ = ()", "__slots__ = ( )", 1))
    proc = _run(tmp_path, "--check")
    assert proc.returncode == 1
    assert "-    __slots__ = ( )\n+    __slots__ = ()" in proc.stdout
