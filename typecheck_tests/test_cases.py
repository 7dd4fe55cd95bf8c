"""What mypy with the plugin says about user code: exact revealed types and error codes
at exact lines; and that mypy without the plugin and pyright raise no false errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._mypy import CASES, EXAMPLES, Finding, expected, mypy, parse, pyright

CASE_FILES = sorted(p for p in CASES.glob("*.py") if not p.name.startswith("_"))
POSITIVE = [p for p in CASE_FILES if p.name.startswith("ok_")]
EXAMPLE_FILES = sorted(EXAMPLES.rglob("*.py"))


@pytest.fixture(scope="session")
def plugin_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[set[Finding], str]:
    cache = tmp_path_factory.mktemp("mypy-cache")
    result = mypy(*(p.name for p in CASE_FILES), cwd=CASES, config=CASES / "mypy.ini", cache_dir=cache)
    found, _ = parse(result.stdout)
    return found, result.stdout + result.stderr


def test_cases_exist() -> None:
    assert len(POSITIVE) >= 2
    assert {p.name for p in CASE_FILES} >= {"errors_rules.py", "errors_types.py"}


@pytest.mark.parametrize("case", CASE_FILES, ids=lambda p: p.name)
def test_mypy_with_plugin(case: Path, plugin_run: tuple[set[Finding], str]) -> None:
    found, output = plugin_run
    want = expected(case)
    assert want, f"{case.name} states no expectation"
    got = {f for f in found if f.file == case.name}
    missing = sorted(want - got)
    unexpected = sorted(got - want)
    assert not missing and not unexpected, f"missing: {missing}\nunexpected: {unexpected}\n\n{output}"


def test_every_kumiko_code_is_exercised() -> None:
    from kumiko_typed import _rules

    stated = {f.value for p in CASE_FILES for f in expected(p) if f.kind == "E"}
    # kumiko-unanalyzable guards against plugin failures; user code reaches it only by
    # building pipelines outside the builders, which tests/test_plugin_edges covers.
    assert set(_rules.ERROR_CODES) - {_rules.CODE_UNANALYZABLE} <= stated


def test_mypy_without_plugin_positive(tmp_path: Path) -> None:
    """Graceful degradation: no plugin, no false errors (DESIGN §4.2)."""
    files = [p.name for p in POSITIVE]
    result = mypy(*files, cwd=CASES, config=None, cache_dir=tmp_path)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 0 and not errors, result.stdout + result.stderr


@pytest.mark.skipif(not EXAMPLE_FILES, reason="no examples yet")
def test_examples_with_plugin(tmp_path: Path) -> None:
    result = mypy(*map(str, EXAMPLE_FILES), cwd=EXAMPLES.parent, config=CASES / "mypy.ini", cache_dir=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_pyright_positive_and_examples() -> None:
    data = pyright(*POSITIVE, *EXAMPLE_FILES)
    summary = data["summary"]
    diagnostics = data["generalDiagnostics"]
    assert isinstance(summary, dict) and isinstance(diagnostics, list)
    errors = [d for d in diagnostics if d.get("severity") == "error"]
    assert summary["filesAnalyzed"] >= len(POSITIVE) + len(EXAMPLE_FILES)
    assert summary["errorCount"] == 0 and not errors, errors
