"""Cost of exact step keys in pyright (DESIGN §4.8): today's facades vs the key lists.

Run:  python bench/pyright_keys.py [--quick] [--rounds N] [--pipelines N] [--branches] [--nested N] [--keep]

A temporary project holds one generated file of ``--pipelines`` pipelines (default 200),
each 10 ``compute`` steps that read the previous step's key, and a ``return_`` (the
pipelines of bench/mypy_plugin.py); with ``--branches``, each pipeline is ``BRANCHES``:
branches with both arms, with one, nested three deep, and a loop; ``--nested N`` checks
N such pipelines after the linear ones and records them beside (``branches``).  It is
checked by ``pyright`` twice per round, in alternating order, with two configurations
that differ only in one setting:

* ``today``: ``defineConstant = {"MYPY": true}``.  pyright then takes the ``if MYPY``
  branches of the facades, i.e. exactly mypy's view: the markers, every key ``Any`` (what
  every editor saw before the key lists);
* ``keys``: the default, the generated ``Keys[...]`` list and its ``__getitem__``
  overloads (``POSITIONS`` of them in ``scripts/generate_builders.py``).

A sanity check first proves the two differ as intended: under ``keys`` a probe's key is
``int`` and a wrong key an error; under ``today`` it is ``Any`` and no error.

Printed per configuration: pyright's wall seconds and its own "Check" phase (``--stats``:
the evaluation of the generated file, where the key lists cost; parsing and binding the
libraries is the same in both), and the median per-round ratio keys / today of each; goal
<= 2 for the check phase.

The second part times the first completion in an editor: ``pyright-langserver --stdio`` on
a file of 20 such pipelines, from ``didOpen`` to the answer of a completion request after
``c.steps["`` in the last step of the last pipeline, both configurations alternating, a
fresh server each time, two ways:

* warm (the goal figure, <= 2 s): what a user with a running editor sees.  The server has
  already analysed ``WARM``, a small file that imports the library and builds a pipeline
  (its diagnostics published and a completion in it answered) before the 20-pipeline file
  is opened;
* cold (context): the 20-pipeline file is the first thing the server opens, so the answer
  also waits for SQLAlchemy and the library to be analysed.

The third part counts how often pyright evaluates a step's lambda (``evaluations``):
``EVAL_PIPELINES`` one-step pipelines whose lambda is ``HEAVY`` (100 terms of arithmetic on
the payload, no key read, so its cost is the same under both configurations) against the
same pipelines with a one-term lambda; the difference of the two check times is the cost
of evaluating the heavy lambdas, and its ratio keys / today is the ratio of the number of
times pyright evaluates each (docs/plugin.md, "Where the linear cost goes").

Nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _pipelines import STEPS, chain
from _report import add_json_option, load_average, load_note, write_json

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from typecheck_tests._lsp import pyright_langserver  # noqa: E402 - the repository root is on the path now

TARGET = 2.0
COMPLETION_TARGET_S = 2.0
CONFIGS = {"today": {"defineConstant": {"MYPY": True}}, "keys": {}}
#: ``--branches``: a pipeline of branches (both arms, one arm, nested three deep) and a loop,
#: each step reading keys of the ones before.
BRANCHES = """\
    .compute("qty", lambda c: c.payload.quantity * 2)
    .branch(
        when=lambda c: c.steps["qty"] > 10,
        on_true=lambda b: b.compute("price", lambda c: c.payload.unit_price * 0.9),
        on_false=lambda b: b.compute("price", lambda c: c.payload.unit_price),
    )
    .branch(
        when=lambda c: c.steps["price"] > 100,
        on_true=lambda b: b.compute("label", lambda c: c.payload.sku.upper()).branch(
            when=lambda c: c.steps["qty"] > 5,
            on_true=lambda b: b.compute("bulk", lambda c: True).branch(
                when=lambda c: c.steps["bulk"], on_true=lambda b: b.compute("tier", lambda c: "gold")
            ),
        ),
    )
    .for_each("ch", over=lambda c: c.payload.sku, do=lambda b: b.compute("last", lambda c: c.scope["ch"]))
    .compute("summary", lambda c: (c.steps["price"], c.steps["label"], c.steps["tier"], c.steps["last"]))
    .return_(lambda c: ok(c.steps["summary"]))"""
#: ``evaluations``: the heavy lambda and how many one-step pipelines carry it.
HEAVY = "lambda c: " + " + ".join(["(c.payload.quantity * 2 - 1)"] * 100)
EVAL_PIPELINES = 60
HEADER = '''"""Generated: {n} pipelines of 10 steps."""

from __future__ import annotations

import attrs

from kumiko_typed import Feature, ok


@attrs.frozen
class Payload:
    sku: str
    quantity: int
    unit_price: float


feature = Feature("bench")
'''
PROBE = """
probe = (
    feature.pipeline(Payload)
    .compute("qty", lambda c: c.payload.quantity * 2)
    .compute("seen", lambda c: reveal_type(c.steps["qty"]))
    .compute("wrong", lambda c: c.steps["qtyy"])
)
"""
#: The file a warm server has analysed before the timed one: it imports the library and
#: asks for a key, so the builders' signatures and the key lists are evaluated.
WARM = """\
from __future__ import annotations

import attrs

from kumiko_typed import Feature, ok


@attrs.frozen
class Payload:
    sku: str


warm = (
    Feature("warm")
    .pipeline(Payload)
    .compute("sku", lambda c: c.payload.sku)
    .compute("size", lambda c: len(c.steps["sku"]))
    .return_(lambda c: ok(c.steps["size"]))
)
"""
_CHECK = re.compile(r"^Check:\s+([\d.]+)sec", re.MULTILINE)
_REVEALED = re.compile(r' - information: Type of .* is "(.*)"$', re.MULTILINE)
_ERROR = re.compile(r" - error: ", re.MULTILINE)


def source(pipelines: int, branches: bool = False) -> str:
    lines = [HEADER.format(n=pipelines)]
    for p in range(pipelines):
        lines += [f"pipeline{p} = (", "    feature.pipeline(Payload)"]
        lines += [BRANCHES] if branches else chain()
        lines += [")", ""]
    return "\n".join(lines)


def one_step(resolver: str) -> str:
    """``EVAL_PIPELINES`` pipelines of one ``compute`` step with ``resolver`` and a ``return_``."""
    lines = [HEADER.format(n=EVAL_PIPELINES)]
    for p in range(EVAL_PIPELINES):
        lines += [f"pipeline{p} = (", "    feature.pipeline(Payload)", f'    .compute("qty", {resolver})']
        lines += ["    .return_(lambda c: ok(1))", ")", ""]
    return "\n".join(lines)


def project(root: Path, name: str, text: str) -> Path:
    """One directory per configuration, each with its ``pyrightconfig.json`` and the file."""
    for config, settings in CONFIGS.items():
        folder = root / name / config
        folder.mkdir(parents=True)
        (folder / "pyrightconfig.json").write_text(json.dumps({**settings, "typeCheckingMode": "basic"}))
        (folder / "pipelines.py").write_text(text)
    return root / name


def pyright(folder: Path) -> tuple[float, float, str]:
    """Wall seconds, pyright's own Check seconds and its printed diagnostics for one run."""
    cmd = [sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "-p", str(folder), "--stats"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=folder)
    wall = time.perf_counter() - start
    match = _CHECK.search(proc.stdout)
    if match is None:
        raise SystemExit(f"pyright printed no Check time:\n{proc.stdout}\n{proc.stderr}")
    return wall, float(match[1]), proc.stdout


def sanity(root: Path) -> bool:
    base = project(root, "sanity", source(1) + PROBE)
    want = {"keys": ("int", True), "today": ("Any", False)}
    for config, (revealed, flagged) in want.items():
        _, _, printed = pyright(base / config)
        shown = _REVEALED.findall(printed)
        wrong = _ERROR.findall(printed)
        print(f"  sanity {config}: probe key {shown}, {len(wrong)} error(s)")
        if shown != [revealed] or bool(wrong) != flagged:
            return False
    return True


def _last_key_read(path: Path) -> tuple[int, int]:
    """The (line, column) just after the last ``c.steps["`` of ``path``."""
    text = path.read_text()
    line = text.count("\n", 0, text.rindex('c.steps["'))
    return line, text.splitlines()[line].rindex('c.steps["') + len('c.steps["')


def first_completion(folder: Path, *, warm: bool) -> float:
    """Seconds from didOpen of the 20-pipeline file to the completion answer after its last
    ``c.steps["``; ``warm``: the server has analysed ``WARM`` first."""
    path = folder / "pipelines.py"
    with pyright_langserver(folder, timeout=300) as server:
        if warm:
            primer = folder / "warm.py"
            uri = server.open(primer)
            server.wait_for("textDocument/publishDiagnostics", uri)
            server.complete(uri, *_last_key_read(primer))
        start = time.perf_counter()
        items = server.complete(server.open(path), *_last_key_read(path))
        seconds = time.perf_counter() - start
    offered = sorted(i["label"] for i in items if i["label"].startswith('"'))
    expected_keys = folder.name == "keys"
    if bool(offered) != expected_keys:
        raise SystemExit(f"{folder.name}: completion offered {offered}")
    return seconds


Runs = dict[str, list[tuple[float, float]]]


def check_rounds(base: Path, rounds: int) -> Runs | None:
    """(wall, check) seconds per configuration and round, alternating; None if pyright
    reported an error (the figures would not be of correct code)."""
    runs: Runs = {c: [] for c in CONFIGS}
    for r in range(rounds):
        for config in list(CONFIGS) if r % 2 == 0 else list(CONFIGS)[::-1]:
            wall, check, printed = pyright(base / config)
            if _ERROR.search(printed):
                print(f"pyright found errors under {config}:\n{printed}", file=sys.stderr)
                return None
            runs[config].append((wall, check))
        (kw, kc), (tw, tc) = runs["keys"][-1], runs["today"][-1]
        print(f"  round {r + 1}/{rounds}: check keys {kc:.2f} s, today {tc:.2f} s; wall {kw:.2f} / {tw:.2f} s")
    return runs


def evaluations(root: Path, rounds: int) -> dict[str, float] | None:
    """The heavy lambdas' cost (heavy minus light check seconds) per configuration, medians
    over ``rounds`` alternating rounds, and its per-round ratio keys / today."""
    heavy = check_rounds(project(root, "heavy", one_step(HEAVY)), rounds)
    light = check_rounds(project(root, "light", one_step("lambda c: 1")), rounds)
    if heavy is None or light is None:
        return None
    cost = {c: [h[1] - lt[1] for h, lt in zip(heavy[c], light[c], strict=True)] for c in CONFIGS}
    ratios = [k / t for k, t in zip(cost["keys"], cost["today"], strict=True)]
    figures = {
        "keys_s": statistics.median(cost["keys"]),
        "today_s": statistics.median(cost["today"]),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "pipelines": EVAL_PIPELINES,
    }
    print(
        f"heavy lambdas ({EVAL_PIPELINES}): keys {figures['keys_s']:.2f} s, today {figures['today_s']:.2f} s; "
        f"ratio (evaluations keys / today) median {figures['ratio']:.2f}"
    )
    return figures


def completion_rounds(root: Path, rounds: int, *, branches: bool) -> dict[tuple[str, bool], list[float]]:
    """First-completion seconds per (configuration, warm), alternating configurations."""
    small = project(root, "completion", source(20, branches))
    for config in CONFIGS:
        (small / config / "warm.py").write_text(WARM)
    completions: dict[tuple[str, bool], list[float]] = {(c, w): [] for c in CONFIGS for w in (True, False)}
    for r in range(max(1, rounds // 2)):
        for config in list(CONFIGS) if r % 2 == 0 else list(CONFIGS)[::-1]:
            for warm in (True, False):
                completions[config, warm].append(first_completion(small / config, warm=warm))
        print(
            f"  completion round {r + 1}: warm keys {completions['keys', True][-1]:.2f} s, "
            f"today {completions['today', True][-1]:.2f} s; cold keys {completions['keys', False][-1]:.2f} s, "
            f"today {completions['today', False][-1]:.2f} s"
        )
    return completions


def summary(runs: Runs) -> dict[str, float]:
    """Print and return the medians and the per-round ratios keys / today."""
    check_ratios = [k[1] / t[1] for k, t in zip(runs["keys"], runs["today"], strict=True)]
    wall_ratios = [k[0] / t[0] for k, t in zip(runs["keys"], runs["today"], strict=True)]

    def med(config: str, index: int) -> float:
        return statistics.median(run[index] for run in runs[config])

    for config in CONFIGS:
        print(f"{config:6} check median {med(config, 1):6.2f} s   wall median {med(config, 0):6.2f} s")
    print(
        f"ratio keys/today, check: median {statistics.median(check_ratios):.2f} "
        f"(min {min(check_ratios):.2f}, max {max(check_ratios):.2f}; target <= {TARGET})"
    )
    print(f"ratio keys/today, wall:  median {statistics.median(wall_ratios):.2f}")
    return {
        "keys_check_s": med("keys", 1),
        "today_check_s": med("today", 1),
        "keys_wall_s": med("keys", 0),
        "today_wall_s": med("today", 0),
        "ratio": statistics.median(check_ratios),
        "ratio_min": min(check_ratios),
        "ratio_max": max(check_ratios),
        "wall_ratio": statistics.median(wall_ratios),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (1 round, 20 pipelines)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--pipelines", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the generated project and print its path")
    parser.add_argument("--branches", action="store_true", help="pipelines of branches and a loop (BRANCHES)")
    parser.add_argument(
        "--nested", type=int, default=0, metavar="N", help="also check N pipelines of BRANCHES (recorded as 'branches')"
    )
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    rounds = args.rounds or (1 if args.quick else 5)
    pipelines = args.pipelines or (20 if args.quick else 200)
    from importlib.metadata import version

    root = Path(tempfile.mkdtemp(prefix="kumiko-pyright-bench-"))
    try:
        print("bench/pyright_keys.py — pyright on generated pipelines, today's facades vs exact key lists")
        print(
            f"pyright {version('pyright')}; {pipelines} pipelines x "
            f"{'branches (BRANCHES)' if args.branches else f'{len(STEPS)} compute steps + return_'}; "
            f"{rounds} rounds, alternating"
        )
        print(f"{load_note()} before")
        if not sanity(root):
            print("sanity check FAILED: the figures would not mean anything", file=sys.stderr)
            return 2
        runs = check_rounds(project(root, "check", source(pipelines, args.branches)), rounds)
        if runs is None:
            return 2
        nested = None
        if args.nested:
            print(f"  {args.nested} pipelines of branches (BRANCHES):")
            nested = check_rounds(project(root, "nested", source(args.nested, branches=True)), rounds)
            if nested is None:
                return 2

        print(f"  {EVAL_PIPELINES} one-step pipelines, heavy and light lambda:")
        evaluated = evaluations(root, rounds)
        if evaluated is None:
            return 2

        completions = completion_rounds(root, rounds, branches=args.branches)
        print(f"{load_note()} after")

        figures: dict[str, object] = {**summary(runs)}
        if nested is not None:
            print(f"{args.nested} pipelines of branches:")
            b = summary(nested)
            figures["branches"] = {
                "pipelines": args.nested,
                "rounds": rounds,
                **{k: b[k] for k in ("keys_check_s", "today_check_s", "ratio", "ratio_min", "ratio_max")},
            }
        figures["evaluations"] = evaluated
        completion = {key: statistics.median(times) for key, times in completions.items()}
        print(
            f"first completion, 20 pipelines, warm server: keys {completion['keys', True]:.2f} s, "
            f"today {completion['today', True]:.2f} s (target <= {COMPLETION_TARGET_S} s)"
        )
        print(
            f"first completion, 20 pipelines, cold server: keys {completion['keys', False]:.2f} s, "
            f"today {completion['today', False]:.2f} s (context)"
        )
        figures |= {
            "shape": "branches" if args.branches else "linear",
            "pipelines": pipelines,
            "rounds": rounds,
            "target": TARGET,
            "completion_keys_s": completion["keys", True],
            "completion_today_s": completion["today", True],
            "cold_completion_keys_s": completion["keys", False],
            "cold_completion_today_s": completion["today", False],
            "completion_target_s": COMPLETION_TARGET_S,
        }
        write_json(args.json, "pyright_keys", figures, load_before=load_before)
        if args.keep:
            print(f"project kept in {root}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
