"""What every bench records besides its printout: ``--json PATH`` writes the figures with
the conditions they were taken under, and ``scripts/render_benchmarks.py`` turns the
files in ``bench/results/`` into ``docs/benchmarks.md``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
#: Imported module -> its distribution, for the versions a record names.
_MEASURED = {"kumiko_typed": "kumiko-typed", "sqlalchemy": "SQLAlchemy", "mypy.version": "mypy", "dbos": "dbos"}


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"also write the figures to PATH (the docs are rendered from {RESULTS.name}/<bench>.json)",
    )


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def load_note() -> str:
    """The 1-minute load average, for the printout: a busy machine makes every figure noisier."""
    load = load_average()
    return f"load average {load:.2f} on {os.cpu_count()} CPUs" if load is not None else "load average unknown"


def write_json(path: Path | None, bench: str, figures: dict[str, Any], *, load_before: float | None) -> None:
    """Write ``figures`` with the machine, the versions and the command line to ``path``."""
    if path is None:
        return
    versions: dict[str, str] = {"Python": f"{platform.python_implementation()} {platform.python_version()}"}
    for module, distribution in _MEASURED.items():
        if module in sys.modules:  # what this bench used
            with contextlib.suppress(metadata.PackageNotFoundError):
                versions[distribution] = metadata.version(distribution)
    record = {
        "bench": bench,
        "taken": datetime.now(UTC).date().isoformat(),
        "command": " ".join(["python", f"bench/{bench}.py", *_arguments_but_json()]),
        "machine": {"cpus": os.cpu_count(), "arch": platform.machine(), "system": platform.system()},
        "load_average": {"before": load_before, "after": load_average()},
        "versions": versions,
        "figures": figures,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"figures written to {path}")


def _arguments_but_json() -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in sys.argv[1:]:
        if skip:
            skip = False
        elif arg == "--json":
            skip = True
        elif not arg.startswith("--json="):
            kept.append(arg)
    return kept


def alternated(
    sides: Mapping[str, Callable[[], object]], rounds: int, candidate: str, baseline: str
) -> tuple[dict[str, list[float]], list[float]]:
    """Each side timed once per round, which goes first rotating: the seconds of each side
    per round, and the per-round ratios ``candidate`` / ``baseline``."""
    times: dict[str, list[float]] = {side: [] for side in sides}
    ratios: list[float] = []
    for round_ in range(rounds):
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for side in order:
            start = time.perf_counter()
            sides[side]()
            times[side].append(time.perf_counter() - start)
        ratios.append(times[candidate][-1] / times[baseline][-1])
    return times, ratios
