"""The plugin package itself: what loading it imports, how it reads the rule table, and
how its modules depend on each other (DESIGN §2, §2.1)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from ._mypy import ROOT, mypy

PLUGIN = ROOT / "mypy_plugin" / "kumiko_typed_mypy"

LOAD = """\
import json, sys
from mypy.options import Options
import kumiko_typed_mypy

plugin = kumiko_typed_mypy.plugin("2.4.1")(Options())
hooked = plugin.get_method_hook("kumiko_typed._builders.Pipeline.compute") is not None
print(json.dumps({"hooked": hooked, "modules": sorted(sys.modules)}))
"""


def test_loading_the_plugin_imports_neither_kumiko_typed_nor_sqlalchemy(tmp_path: Path) -> None:
    """As mypy does: import the entry point, call ``plugin(version)``, make the plugin."""
    proc = subprocess.run(
        [sys.executable, "-c", LOAD], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    modules: list[str] = loaded["modules"]
    assert loaded["hooked"]
    # The rule table was read, by path, under the plugin's own name.
    assert "kumiko_typed_mypy._rule_table" in modules
    assert "kumiko_typed_mypy._plugin" in modules
    heavy = [m for m in modules if m.split(".")[0] in {"kumiko_typed", "sqlalchemy"}]
    assert heavy == []


SNIPPET = """\
from kumiko_typed_mypy._rules import rules

reveal_type(rules.RULES_BY_KIND["compute"].tier)
reveal_type(rules.msg_tier)
rules.STEP_RULEZ
"""


def test_a_misspelt_rule_table_read_fails_mypy_strict(tmp_path: Path) -> None:
    """The plugin's view of the table is typed by the table's own definitions, not ``Any``."""
    (tmp_path / "reads.py").write_text(SNIPPET)
    (tmp_path / "mypy.ini").write_text("[mypy]\nstrict = true\n")
    result = mypy("reads.py", cwd=tmp_path, config=tmp_path / "mypy.ini", cache_dir=tmp_path / ".cache")
    lines = [line for line in result.stdout.splitlines() if line.startswith("reads.py:")]
    assert lines == [
        'reads.py:3: note: Revealed type is "Literal[1] | Literal[2] | Literal[3]"',
        'reads.py:4: note: Revealed type is "def (kind: str, method: str, declared: frozenset[str] | set[str]) -> str"',
        'reads.py:5: error: Module has no attribute "STEP_RULEZ"; maybe "STEP_RULES"?  [attr-defined]',
    ], result.stdout + result.stderr


def _relative_imports(path: Path) -> list[str]:
    """The package-relative modules ``path`` imports from, e.g. ``.._typeops.keys`` or ``.bodies``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = "." * node.level + (node.module or "")
            found += [base] if node.module else [f"{base}{alias.name}" for alias in node.names]
    return found


def test_features_import_shared_helpers_not_each_other() -> None:
    """dry-python/returns' habit: a feature depends on ``_typeops`` and the tables only."""
    tables = {".._errors", ".._names", ".._rules"}
    features = sorted((PLUGIN / "_features").glob("*.py"))
    assert len(features) >= 10
    wrong = {
        path.name: bad
        for path in features
        if (bad := [m for m in _relative_imports(path) if m not in tables and not m.startswith(".._typeops.")])
    }
    assert wrong == {}
    helpers = sorted((PLUGIN / "_typeops").glob("*.py"))
    assert [p.name for p in helpers if any("_features" in m for m in _relative_imports(p))] == []
