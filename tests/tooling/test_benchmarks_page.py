"""docs/benchmarks.md is rendered from the benches' own output (bench/results/*.json) by
scripts/render_benchmarks.py: the committed page is fresh, every figure on it comes from a
results file, and what each bench writes today is what the renderer reads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "render_benchmarks.py"
RESULTS = ROOT / "bench" / "results"
BENCHES = (
    "interpreter",
    "mypy_plugin",
    "pyright_keys",
    "handler",
    "write_scaling",
    "outbox",
    "workflows",
    "due_runs",
    "foreach_state",
    "event_feed",
)


def _render(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_committed_page_is_fresh() -> None:
    proc = _render("--check")
    assert proc.returncode == 0, proc.stderr


def test_a_changed_figure_makes_the_page_stale_and_rendering_shows_it(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    page = tmp_path / "benchmarks.md"
    assert _render("--results", str(results), "--output", str(page)).returncode == 0
    assert page.read_text() == (ROOT / "docs" / "benchmarks.md").read_text()

    record = json.loads((results / "interpreter.json").read_text())
    record["figures"]["worst_lambdas_ratio"] = 9.87
    (results / "interpreter.json").write_text(json.dumps(record))
    stale = _render("--check", "--results", str(results), "--output", str(page))
    assert stale.returncode == 1
    assert "stale" in stale.stderr
    assert _render("--results", str(results), "--output", str(page)).returncode == 0
    text = page.read_text()
    assert "**9.87**" in text
    assert "**not met**; worst **9.87**" in text  # 9.87 > the 1.15 goal: the verdict follows the figure


def test_a_missing_results_file_names_the_command_that_makes_it(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    (results / "outbox.json").unlink()
    proc = _render("--results", str(results), "--output", str(tmp_path / "page.md"))
    assert proc.returncode != 0
    assert "python bench/outbox.py --json" in proc.stderr


def _bench(name: str, out: Path, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{name}.py"), "--quick", *extra, "--json", str(out / f"{name}.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record: dict[str, Any] = json.loads((out / f"{name}.json").read_text())
    assert record["bench"] == name
    assert record["command"] == f"python bench/{name}.py --quick" + "".join(f" {e}" for e in extra)
    return record


@pytest.mark.slow
@pytest.mark.postgres
def test_what_the_benches_write_today_renders(tmp_path: Path) -> None:
    """A smoke run of every bench, rendered: the page cannot drift from the benches."""
    out = tmp_path / "results"
    # DBOS is no dependency of the project, and the resume-scaling part starts 7 more
    # processes (the committed workflows record has both; the tests above render it)
    extra = {"workflows": ["--no-dbos", "--no-scaling"]}
    records = {name: _bench(name, out, *extra.get(name, [])) for name in BENCHES}
    page = tmp_path / "benchmarks.md"
    proc = _render("--results", str(out), "--output", str(page))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    for name in BENCHES:
        assert f"## `bench/{name}.py`" in text
        assert f"with `python bench/{name}.py --quick" in text
    assert f"worst **{records['interpreter']['figures']['worst_lambdas_ratio']:.2f}**" in text
    for database in ("sqlite", "postgres"):
        assert f"**{records['handler']['figures'][database]['core_ratio']:.2f}**" in text
    four = records["write_scaling"]["figures"]["postgres"]["scaling"]["kumiko"]["4"]["median"]
    assert f"({four:.2f}×)" in text
    assert f"**{records['outbox']['figures']['scaling']['4']['median']:.2f}×**" in text
    assert "DBOS was not measured (not installed, or `--no-dbos`): kumiko-typed alone." in text
    due = records["due_runs"]["figures"]
    assert due["runs"] == 2000 and set(due["databases"]) == {"sqlite", "postgresql"}
    assert f"SQLite stranded {due['databases']['sqlite']['stranded']['now_ms']:.2f} ms a pass" in text
    feed = records["event_feed"]["figures"]
    assert feed["events"] == 400 and set(feed["databases"]) == {"sqlite", "postgresql"}
    assert f"kumiko / by hand {feed['databases']['sqlite']['other keys']['ratio']:.2f}" in text
