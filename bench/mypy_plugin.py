"""Cost of the mypy plugin: a cold mypy run of a generated project, with vs. without it.

Run:  python bench/mypy_plugin.py [--quick] [--rounds N] [--modules N] [--keep]

A temporary project is generated: ``--modules`` modules (default 30), each one
``Feature`` with 10 payload classes and 10 write handlers whose pipelines have 10
``compute`` steps (each reads the previous step's key; the types change along the
chain: int, float, str, bool, dict, tuple) and a ``return_`` — 300 pipelines and
3,000 steps by default — plus a module that builds the ``App``.

Each round runs ``python -m mypy`` (strict) on it twice, once with a config that
loads the plugin (``plugins = kumiko_typed_mypy``) and once with the same config
without it, in alternating order, each run COLD: a fresh, empty ``--cache-dir``,
so the standard library, SQLAlchemy, attrs and kumiko-typed are analysed every
time as on a first CI run.  Both runs must exit 0.

Before timing, a sanity check runs both configs on one extra module that reveals a
step's type and reads a key no step produced: with the plugin the type must be
exact (``float``) and the wrong key an error; without it, ``Any`` and no error.
That proves the plugin is really loaded in one case and absent in the other.

Printed: the median wall seconds of each and the median of the per-round ratios
with / without (the headline figure).  Also printed, to tell the costs apart:

* the child's CPU seconds (user + sys) and their ratio;
* mypy's own per-module processing time (``--timing-stats``), summed over the
  generated project's modules and over everything else (stdlib, SQLAlchemy, attrs,
  kumiko-typed...).  Only the project's modules use the builders, so that is where
  the plugin's cost shows; the rest is the fixed cost of any cold run, and it
  dilutes the headline ratio.  A fixed cost that differs between the two configs
  would show up in the second sum.

A second part measures nesting: for each depth 1-8, one module whose pipeline nests a
``branch`` inside the ``on_true`` arm of the one before (each arm starts with a
``compute``; the else-arm adds a key too).  Each depth is checked with and without the
plugin, alternating, with the library cache WARM (a cache primed once per config with
the libraries, copied fresh for every run), so the figure is the module's own check
cost, not the analysis of SQLAlchemy.  Printed per depth: the wall ratio, and the
ratio of mypy's own time for that module (``--timing-stats``); goal <= 2 at every depth.

Nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _pipelines import STEPS, chain
from _report import add_json_option, load_average, load_note, write_json

TARGET = 1.15
NESTING_TARGET = 2.0
DEPTHS = range(1, 9)
CONFIGS = ("with_plugin.ini", "without_plugin.ini")
PROJECT = "benchapp"
PIPELINES_PER_MODULE = 10


CONFIG = """\
[mypy]
strict = True
python_version = 3.11
{plugins}
"""


def module_source(m: int) -> str:
    lines = [
        f'"""Generated: feature m{m:02d} with {PIPELINES_PER_MODULE} handlers."""',
        "",
        "from __future__ import annotations",
        "",
        "import attrs",
        "",
        "from kumiko_typed import Feature, ok",
        "",
        f'feature = Feature("m{m:02d}")',
        "",
    ]
    for p in range(PIPELINES_PER_MODULE):
        lines += [
            "",
            "@attrs.frozen",
            f"class Payload{p}:",
            "    sku: str",
            "    quantity: int",
            "    unit_price: float",
            "",
            "",
            f"pipeline{p} = (",
            f"    feature.pipeline(Payload{p})",
            *chain(),
            ")",
            f'handler{p} = feature.write_handler("handler-{p}", pipeline{p}, roles=["clerk"])',
            "",
        ]
    return "\n".join(lines)


def generate(root: Path, modules: int) -> None:
    pkg = root / "benchapp"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for m in range(modules):
        (pkg / f"m{m:02d}.py").write_text(module_source(m))
    imports = "\n".join(f"from . import m{m:02d}" for m in range(modules))
    features = ", ".join(f"m{m:02d}.feature" for m in range(modules))
    (pkg / "main.py").write_text(
        f'"""Generated: the App of all features."""\n\nfrom kumiko_typed import App\n\n{imports}\n\n\n'
        f"def make_app() -> App:\n"
        f'    return App([{features}], database_url="sqlite://")\n'
    )
    (root / "with_plugin.ini").write_text(CONFIG.format(plugins="plugins = kumiko_typed_mypy"))
    (root / "without_plugin.ini").write_text(CONFIG.format(plugins=""))


SANITY = '''\
"""Sanity check: exact types with the plugin, Any without."""

from __future__ import annotations

from typing import Any

from kumiko_typed import ok

from .m00 import Payload0, feature


def show(value: Any) -> None:
    reveal_type(value)


checked = (
    feature.pipeline(Payload0)
    .compute("qty", lambda c: c.payload.quantity * 2)
    .compute("gross", lambda c: c.steps["qty"] * c.payload.unit_price)
    .compute("probe", lambda c: reveal_type(c.steps["gross"]))
    .compute("wrong", lambda c: c.steps["grosss"])
    .return_(lambda c: ok(c.steps["qty"]))
)
'''


def nested_source(depth: int) -> str:
    """A pipeline with ``depth`` branches, each inside the ``on_true`` arm of the one before."""

    def arm(level: int) -> str:
        if level == 0:
            return 'b.compute("leaf", lambda c: c.steps["base"] + 1)'
        return (
            f'b.compute("k{level}", lambda c: {level}).branch(when=lambda c: c.steps["k{level}"] > 0, '
            f"on_true=lambda b: {arm(level - 1)}, "
            f'on_false=lambda b: b.compute("e{level}", lambda c: str(c.steps["k{level}"])))'
        )

    return (
        '"""Generated: nested branches."""\n\nfrom __future__ import annotations\n\nimport attrs\n\n'
        "from kumiko_typed import Feature, ok\n\n\n@attrs.frozen\nclass Payload:\n    n: int\n\n\n"
        'feature = Feature("nested")\n'
        "nested = (\n    feature.pipeline(Payload)\n"
        '    .compute("base", lambda c: c.payload.n)\n'
        f"    .branch(when=lambda c: True, on_true=lambda b: {arm(depth)})\n"
        '    .return_(lambda c: ok(c.steps["base"]))\n)\n'
    )


PRIME = "import attrs\nimport sqlalchemy\nimport sqlalchemy.orm\n\nimport kumiko_typed\n"


class Timing:
    """One mypy run: wall and CPU seconds, and mypy's own seconds per module group."""

    def __init__(self, wall: float, cpu: float, project: float, rest: float) -> None:
        self.wall = wall
        self.cpu = cpu
        self.project = project  # modules of the generated project
        self.rest = rest  # everything else: stdlib, SQLAlchemy, attrs, kumiko-typed...

    def get(self, attr: str) -> float:
        return float(getattr(self, attr))


def mypy(
    root: Path, config: str, target: str, warm: Path | None = None, own: str = PROJECT
) -> tuple[Timing, subprocess.CompletedProcess[str]]:
    """One run with a fresh cache directory, removed afterwards: empty (cold), or a copy
    of ``warm`` (the libraries already analysed)."""
    cache = Path(tempfile.mkdtemp(prefix="mypy-cache-", dir=root))
    if warm is not None:
        shutil.copytree(warm, cache, dirs_exist_ok=True)
    stats = cache / "timing-stats.txt"
    cmd = [sys.executable, "-m", "mypy", "--config-file", config, "--cache-dir", str(cache)]
    cmd += ["--timing-stats", str(stats), target]
    env = {**os.environ, "MYPY_FORCE_COLOR": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    project = rest = 0.0
    if stats.exists():  # lines: "<module> <microseconds>"
        for line in stats.read_text().splitlines():
            module, _, micros = line.partition(" ")
            if micros.strip().isdigit():
                if module == own or module.startswith(own + "."):
                    project += int(micros) / 1e6
                else:
                    rest += int(micros) / 1e6
    shutil.rmtree(cache, ignore_errors=True)
    return Timing(wall, cpu, project, rest), proc


def sanity(root: Path) -> bool:
    (root / "benchapp" / "sanity.py").write_text(SANITY)
    try:
        _, with_p = mypy(root, CONFIGS[0], "benchapp/sanity.py")
        _, without_p = mypy(root, CONFIGS[1], "benchapp/sanity.py")
    finally:
        (root / "benchapp" / "sanity.py").unlink()
    good = True

    def expect(what: str, ok: bool, proc: subprocess.CompletedProcess[str]) -> None:
        nonlocal good
        print(f"  sanity: {what}: {'yes' if ok else 'NO'}")
        if not ok:
            good = False
            print(proc.stdout + proc.stderr, file=sys.stderr)

    out = with_p.stdout
    expect(
        'with the plugin, c.steps["gross"] is revealed as float',
        'Revealed type is "float"' in out or 'Revealed type is "builtins.float"' in out,
        with_p,
    )
    # mypy reports an unknown key of an anonymous TypedDict under [misc], not [typeddict-item].
    expect(
        'with the plugin, reading the unknown key "grosss" is an error listing the valid keys',
        with_p.returncode == 1 and '"grosss" is not a valid TypedDict key; expected one of ("qty", "gross"' in out,
        with_p,
    )
    out = without_p.stdout
    expect(
        "without the plugin, the same read is Any and nothing is an error",
        without_p.returncode == 0 and 'Revealed type is "Any"' in out and "error:" not in out,
        without_p,
    )
    return good


def prime(root: Path, config: str) -> Path:
    """A cache in which the libraries are already analysed, for warm runs."""
    (root / "prime.py").write_text(PRIME)
    cache = root / f"warm-{Path(config).stem}"
    cmd = [sys.executable, "-m", "mypy", "--config-file", config, "--cache-dir", str(cache), "prime.py"]
    subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=True)
    return cache


def nesting(root: Path, rounds: int) -> dict[str, dict[str, float]] | None:
    """Per depth: the median wall ratio and own-module ratio with/without, warm cache."""
    warm = {config: prime(root, config) for config in CONFIGS}
    results: dict[str, dict[str, float]] = {}
    print(f"nesting: branch inside branch, depth {DEPTHS[0]}-{DEPTHS[-1]}, warm library cache, {rounds} rounds")
    for depth in DEPTHS:
        module = f"nested{depth}"
        (root / f"{module}.py").write_text(nested_source(depth))
        runs: dict[str, list[Timing]] = {c: [] for c in CONFIGS}
        for r in range(rounds):
            for config in CONFIGS if r % 2 == 0 else CONFIGS[::-1]:
                timing, proc = mypy(root, config, f"{module}.py", warm=warm[config], own=module)
                if proc.returncode != 0:
                    print(f"mypy {config} on depth {depth} exited {proc.returncode}:\n{proc.stdout}", file=sys.stderr)
                    return None
                runs[config].append(timing)
        pairs = list(zip(runs[CONFIGS[0]], runs[CONFIGS[1]], strict=True))
        wall = statistics.median(a.wall / b.wall for a, b in pairs)
        own = statistics.median(a.project / b.project for a, b in pairs if b.project > 0)
        with_s = statistics.median(t.wall for t in runs[CONFIGS[0]])
        without_s = statistics.median(t.wall for t in runs[CONFIGS[1]])
        print(
            f"  depth {depth}: with {with_s:.2f} s, without {without_s:.2f} s, wall ratio {wall:.2f}, "
            f"module's own check ratio {own:.2f} (target <= {NESTING_TARGET})"
        )
        results[str(depth)] = {"ratio": wall, "own_ratio": own, "with_s": with_s, "without_s": without_s}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (1 round, 3 modules)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--modules", type=int, default=None, help="modules of 10 pipelines each")
    parser.add_argument("--keep", action="store_true", help="keep the generated project and print its path")
    parser.add_argument("--nesting-rounds", type=int, default=None, help="rounds per depth of the nesting part")
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    rounds = args.rounds or (1 if args.quick else 5)
    modules = args.modules or (3 if args.quick else 30)

    root = Path(tempfile.mkdtemp(prefix="kumiko-mypy-bench-"))
    try:
        generate(root, modules)
        from mypy.version import __version__ as mypy_version

        print("bench/mypy_plugin.py — cold mypy --strict, with vs without the kumiko_typed_mypy plugin")
        print(
            f"python {platform.python_version()}, mypy {mypy_version}, {os.cpu_count()} CPUs; project: "
            f"{modules} modules x {PIPELINES_PER_MODULE} pipelines x {len(STEPS)} compute steps + return_ "
            f"({modules * PIPELINES_PER_MODULE} pipelines); {rounds} rounds, alternating, fresh cache each run"
        )
        print(f"{load_note()} before")
        if not sanity(root):
            print("sanity check FAILED: the figures would not mean anything", file=sys.stderr)
            return 2

        runs: dict[str, list[Timing]] = {c: [] for c in CONFIGS}
        for r in range(rounds):
            order = CONFIGS if r % 2 == 0 else CONFIGS[::-1]
            for config in order:
                timing, proc = mypy(root, config, PROJECT)
                if proc.returncode != 0:
                    print(f"mypy {config} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}", file=sys.stderr)
                    return 2
                runs[config].append(timing)
            w, wo = runs[CONFIGS[0]][-1], runs[CONFIGS[1]][-1]
            print(
                f"  round {r + 1}/{rounds}: with {w.wall:.2f} s, without {wo.wall:.2f} s, "
                f"ratio {w.wall / wo.wall:.3f}; project modules {w.project:.2f} / {wo.project:.2f} s  (both exit 0)"
            )

        def per_round(attr: str) -> list[float]:
            pairs = zip(runs[CONFIGS[0]], runs[CONFIGS[1]], strict=True)
            return [a.get(attr) / b.get(attr) for a, b in pairs]

        def med(config: str, attr: str) -> float:
            return statistics.median(t.get(attr) for t in runs[config])

        print(f"{load_note()} after")
        for label, config in (("with plugin", CONFIGS[0]), ("without plugin", CONFIGS[1])):
            walls = [t.wall for t in runs[config]]
            print(
                f"{label:15} wall median {med(config, 'wall'):6.2f} s (min {min(walls):.2f}, max {max(walls):.2f})"
                f"  cpu {med(config, 'cpu'):6.2f} s  [mypy: project modules {med(config, 'project'):5.2f} s, "
                f"other modules {med(config, 'rest'):5.2f} s]"
            )
        for label, attr in (
            ("ratio with/without, wall", "wall"),
            ("ratio with/without, cpu", "cpu"),
            ("ratio, project modules only", "project"),
            ("ratio, other modules", "rest"),
        ):
            ratios = per_round(attr)
            target = f"; target <= {TARGET}" if attr == "wall" else ""
            print(
                f"{label:28} median {statistics.median(ratios):.3f}  (min {min(ratios):.3f}, max {max(ratios):.3f}"
                f"{target})"
            )
        own_ratio = statistics.median(per_round("project"))
        nested = nesting(root, args.nesting_rounds or (1 if args.quick else 3))
        if nested is None:
            return 2
        print(f"{load_note()} after nesting")
        figures = {
            "own_ratio": own_ratio,
            "nesting": nested,
            "nesting_target": NESTING_TARGET,
            "rounds": rounds,
            "pipelines": modules * PIPELINES_PER_MODULE,
            "with_s": med(CONFIGS[0], "wall"),
            "without_s": med(CONFIGS[1], "wall"),
            "ratio": statistics.median(per_round("wall")),
            "ratio_min": min(per_round("wall")),
            "ratio_max": max(per_round("wall")),
            "cpu_ratio": statistics.median(per_round("cpu")),
            "target": TARGET,
        }
        write_json(args.json, "mypy_plugin", figures, load_before=load_before)
        if args.keep:
            print(f"project kept in {root}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
