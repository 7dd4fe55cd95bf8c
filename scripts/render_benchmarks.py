"""Render docs/benchmarks.md from the benches' recorded figures (bench/results/*.json).

    python scripts/render_benchmarks.py                 # re-render from the recorded figures
    python scripts/render_benchmarks.py --run           # run every bench (minutes), then render
    python scripts/render_benchmarks.py --run handler   # re-measure one bench, then render
    python scripts/render_benchmarks.py --check         # exit 1 if the page is stale

Each bench writes its figures with ``--json`` (see bench/_report.py).  The prose here says
what a bench runs; every number on the page comes from a results file, so a figure can
only change by measuring again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
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

Record = Mapping[str, Any]


# --- formatting ---------------------------------------------------------------------------


def _ratio(figures: Mapping[str, Any], key: str = "ratio") -> str:
    low, high = figures.get(f"{key}_min"), figures.get(f"{key}_max")
    spread = f" ({low:.2f}–{high:.2f})" if low is not None and high is not None else ""
    return f"**{figures[key]:.2f}**{spread}"


def _met(value: float, target: float, *, at_most: bool) -> str:
    ok = value <= target if at_most else value >= target
    return "met" if ok else "**not met**"


def _conditions(record: Record) -> str:
    load = record["load_average"]
    versions = ", ".join(f"{name} {version}" for name, version in sorted(record["versions"].items()))
    machine = record["machine"]
    return (
        f"Taken {record['taken']} with `{record['command']}` on {machine['cpus']} CPUs "
        f"({machine['system']} {machine['arch']}), load average {load['before']} before and "
        f"{load['after']} after; {versions}."
    )


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --- one section per bench ----------------------------------------------------------------


def _interpreter(record: Record) -> tuple[str, str]:
    f = record["figures"]
    goal = f["goal"]
    rows = []
    for n, d in sorted(f["steps"].items(), key=lambda item: int(item[0])):
        rows.append(
            [
                n,
                f"{d['plain_us']:.2f} µs",
                f"{d['lambdas_us']:.2f} µs",
                f"{d['interpreter_us']:.2f} µs",
                f"{d['dispatch_us']:.1f} µs",
                _ratio(d, "lambdas_ratio"),
                f"{d['plain_ratio']:.2f}",
            ]
        )
    table = _table(
        [
            "steps",
            "plain function",
            "lambdas over a dict",
            "interpreter",
            "dispatch",
            "interpreter / lambdas",
            "interpreter / plain",
        ],
        rows,
    )
    worst = f["worst_lambdas_ratio"]
    overhead = ""
    if "per_step_over_lambdas_us" in f:
        overhead = f"""

Fitted over the step counts: the interpreter adds **{f["per_step_over_lambdas_us"]:.2f} µs per step** and
{f["fixed_over_lambdas_us"]:.2f} µs per call over the same lambdas ({f["per_step_over_plain_us"]:.2f} µs per step and
{f["fixed_over_plain_us"]:.2f} µs per call over the plain function). `dispatch` costs
**{f["dispatch_fixed_over_plain_us"]:.1f} µs per call** over the plain function (issue 13 asks for ≤ 25 µs).

What is left is the fixed part, and it is the shape of the call rather than one slow piece
(2026-12-05, 3 steps, counted in CPU instructions per call with callgrind: the shared
machine's load moves CPU-time ratios by ±0.05 between runs, not instruction counts). The
lambdas run 11,870 instructions and 114 bytecodes, the interpreter side 15,420 (1.30) and
209. Of the 3,550 more: about 1,480 are the two Python calls the lambdas do not make
(`start_run` and `run_block`, besides the segment's generated function); 900 the read-only
view of the values (a `MappingProxyType` per run, the one read-only mapping CPython has);
820 `run_block`'s own work around the segment (its loop, crash guard, trace check, resume
check and the span path of a traced sub-pipeline); 200 the `Run` and its eleven slots over
the lambdas' context; 150 the rest of `start_run`. Cut down, the ratio would be: `run_block`
only calling its segment 1.23, `start_run` only storing the slots besides 1.22, without the
read-only view besides 1.14, the whole run written out in one function (view included)
1.09; at 10 steps, in the same instructions, 1.11 today (the table's times: higher), then
1.08, 1.07, 1.01 and 1.00. So the goal at 3 steps needs fewer Python calls per run, not a
cheaper `start_run`: even a writable `c.steps` (a weaker guarantee) would meet it only with
`run_block` reduced to a bare call, which the one loop that runs handlers and workflow
segments alike is not. The table's run is on the good side of the load's noise: the same
code run four times on 2026-12-05 (load 1.5–2) gave 1.34–1.41 at 3 steps and 1.13–1.17 at 10.

Counted again on 2026-12-07 (callgrind over 4,000 calls of each side after a warm-up, the
coroutine refusal of every `compute` result included; another driver than the counts
above, so its lambdas' figure differs from theirs), instructions a call, the lambdas then
the interpreter: 12,690 and 15,250 at 3 steps (**1.20**), 22,570 and 25,680 at 10 (1.14),
84,520 and 90,280 at 50 (1.07). Two cuts of the fixed part, measured the same way:
the span path moved out of `run_block` to the branch, loop and retry that run a traced
sub-pipeline saves 121 (0.8 %); a handler's run leaving its `_workflow` slot unset (read as
`None`) 97 (0.6 %); each under the 1 % a change must earn here, so both were left out.
Measured alone, a `MappingProxyType` made and freed costs 660 instructions, a Python call of
`run_block`'s shape 410 and each slot a run stores 58. No cheaper read-only view exists in
CPython, and making it on the first read of `c.steps` would need a `__getattr__` on the
run, which leaves every attribute read of every resolver unspecialised on 3.11.

Then a block became one generated function (`Block.run`: its computes and `return_` in line,
any other step its `execute`, the crash guard mapping the failing line to its step), which a
dispatch calls instead of `run_block`; only a traced run and a resumed workflow run are
walked step by step. Counted on 2026-12-07 with callgrind (the difference of 20,000 and
2,000 calls of one side in a process, after a warm-up, `PYTHONHASHSEED=0`; the table above
is older and measured the code before), instructions a call, the lambdas then the
interpreter: at 3 steps 11,850 and 16,140 before (1.36), 11,790 and 14,930 after
(**1.27**); at 10 steps 21,780 and 26,540 before (1.22), 21,780 and 25,380 after (1.17).
What is left at 3 steps (3,140): the `MappingProxyType` (660), `start_run` (a Python call
the lambdas make too, for their context's `__init__`, but with eleven slots and a frame of
14 locals against two), the block's own call, which the lambdas' loop does not make, and
`Run()` and `MappingProxyType(values)`, which CPython 3.11 calls through its generic path (no
specialisation for a class without a vectorcall). In wall time, the code before and after
run one after the other twice on 2026-12-07 at a load of 2.2–2.6 (this bench, medians of 25
rounds): 1.45 and 1.45 before, 1.33 and 1.33 after at 3 steps; 1.27 and 1.27 before, 1.19 and
1.20 after at 10. The table is this code's, taken the same hour: the machine gave higher ratios
that day than on 2026-12-05, when the code before measured 1.31."""
    body = f"""\
**What it runs.** N `compute` steps (3, 10 and 50; each reads the payload or the step before)
and a `return_` calling `ok({{...}})`, four ways: a *plain function* with the N assignments
written out; the *same lambdas over a dict* (a small slotted context, a loop storing each
result under its key: the interpreter minus the interpreter); the *interpreter*
(`start_run` + the block's `run` on the built pipeline: everything a dispatch does per call but
the role check, the payload check and the transaction); and `App.dispatch` of the same
pipeline on an in-memory SQLite App. Nothing is persisted. All must return the same `Ok`
before timing; each round times {f["iterations"]:,} calls of each side ({f["iterations"] // 10:,} of dispatch),
the order rotating, with the garbage collector off; {f["rounds"]} rounds. Goal: interpreter /
lambdas ≤ {goal} at every N ({_met(worst, goal, at_most=True)}; worst **{worst:.2f}**).

{table}{overhead}

{_conditions(record)}
"""
    return f"{worst:.2f}", body


def _mypy_plugin(record: Record) -> tuple[str, str]:
    f = record["figures"]
    table = _table(
        ["with the plugin", "without", "median wall ratio", "CPU ratio", "target"],
        [
            [
                f"{f['with_s']:.2f} s",
                f"{f['without_s']:.2f} s",
                _ratio(f),
                f"{f['cpu_ratio']:.2f}",
                f"≤ {f['target']} ({_met(f['ratio'], f['target'], at_most=True)})",
            ]
        ],
    )
    body = f"""\
**What it runs.** A generated project of {f["pipelines"]} write handlers, each a pipeline of
10 `compute` steps and a `return_` whose types change along the chain, checked by a **cold**
`mypy --strict` (fresh cache: the stdlib, SQLAlchemy, attrs and kumiko-typed are analysed
every time, as on a first CI run) with and without `plugins = kumiko_typed_mypy`, alternating,
{f["rounds"]} rounds. Every run must exit 0, and a sanity run first checks that the plugin
really makes `c.steps["gross"]` a `float` and an unknown key an error (without it: `Any`).

{table}

The plugin's cost is mypy inferring precise types: the chained calls carry a growing
`TypedDict` and every lambda is checked against it instead of `Any`. Its own hooks are a
few hundredths of a second of the run (profiled with cProfile); a cold run's fixed part
(the libraries) dilutes the rest.{_own_and_nesting(f)}

{_conditions(record)}
"""
    return f"{f['ratio']:.2f}", body


def _pyright_branches(f: Mapping[str, Any]) -> list[list[str]]:
    """The check-phase row of a ``--branches`` run, when the record carries one."""
    b = f.get("branches")
    if b is None:
        return []
    label = f"check phase, {b['pipelines']} pipelines of nested branches (`--nested`, {b['rounds']} round(s))"
    return [[label, f"{b['keys_check_s']:.2f} s", f"{b['today_check_s']:.2f} s", _ratio(b), "—"]]


def _pyright_cold(f: Mapping[str, Any]) -> list[list[str]]:
    """The cold first completion (context for the warm one), when the record carries it."""
    if "cold_completion_keys_s" not in f:
        return []
    keys, today = f["cold_completion_keys_s"], f["cold_completion_today_s"]
    return [["first completion, cold server (context)", f"{keys:.2f} s", f"{today:.2f} s", "—", "—"]]


def _pyright_evaluations(f: Mapping[str, Any]) -> list[list[str]]:
    """How many times pyright evaluates a step's lambda, key lists against today, when the
    record carries the heavy/light measurement."""
    e = f.get("evaluations")
    if e is None:
        return []
    label = f"a step's lambda evaluated, {e['pipelines']} heavy lambdas (check seconds, heavy − light)"
    return [[label, f"{e['keys_s']:.2f} s", f"{e['today_s']:.2f} s", _ratio(e), "—"]]


def _pyright_evaluations_note(f: Mapping[str, Any]) -> str:
    if "evaluations" not in f:
        return ""
    return """
The heavy-lambda row is the floor under the check-phase ratio. pyright solves a call's type
variables from its arguments in two speculative passes and then a final one when two
arguments carry type variables, and in one speculative pass and the final one when one does
(its `validateArgTypes`). Today only the lambda's return type is solved; with key lists the
key's literal name is too, so every step's lambda, and every key read and operation inside
it, is evaluated three times instead of two (docs/plugin.md, "Where the linear cost goes").
"""


def _pyright_keys(record: Record) -> tuple[str, str]:
    f = record["figures"]
    table = _table(
        ["", "key lists", "today (`MYPY` defined)", "median ratio", "target"],
        [
            [
                "check phase",
                f"{f['keys_check_s']:.2f} s",
                f"{f['today_check_s']:.2f} s",
                _ratio(f),
                f"≤ {f['target']} ({_met(f['ratio'], f['target'], at_most=True)})",
            ],
            ["wall", f"{f['keys_wall_s']:.2f} s", f"{f['today_wall_s']:.2f} s", f"{f['wall_ratio']:.2f}", "—"],
            *_pyright_branches(f),
            *_pyright_evaluations(f),
            [
                "first completion, 20 pipelines, warm server",
                f"{f['completion_keys_s']:.2f} s",
                f"{f['completion_today_s']:.2f} s",
                "—",
                f"≤ {f['completion_target_s']} s "
                f"({_met(f['completion_keys_s'], f['completion_target_s'], at_most=True)})",
            ],
            *_pyright_cold(f),
        ],
    )
    body = f"""\
**What it runs.** One generated file of {f["pipelines"]} pipelines of 10 `compute` steps and a
`return_`, checked by `pyright` with the exact key lists of the generated builders (docs/plugin.md,
"In your editor") and with today's view, the markers that make every key `Any` (the same
files with `defineConstant = {{"MYPY": true}}`), alternating, {f["rounds"]} rounds. The check
phase is pyright's own "Check" time (`--stats`); parsing and binding the libraries is the
same in both. A sanity run first checks that a key is `int` and a wrong key an error with the
key lists, and `Any` and no error without. The first completion is timed from `didOpen` to the
answer after `c.steps["` in the last step of a 20-pipeline file, a fresh `pyright-langserver`
each time: warm, as in a running editor (the server has already analysed a small file that
imports the library), and cold (the file is the first it opens, so it also analyses SQLAlchemy
and the library first).

{table}

The cost is pyright solving each step's self type (a variadic list) and trying the
`__getitem__` overloads of each key read; 12 positions were measured about 20% cheaper than
16 on the same file, while 8 positions, trying the newest key first, or one `compute`
overload instead of two measured within noise of 12 (pyright's CPU time, alternated). A
`branch` or `for_each` tries its arm-shape overloads in order (`scripts/_arm_keys.py`), and
each that does not fit re-evaluates the arms' lambdas; a branch nested in an arm is
re-evaluated for each outer attempt, so nesting multiplies. Nested branches therefore try
only the shapes of at most one key per arm and an arm holding keys pyright cannot name is taken by the first overload
(`--nested` pipelines nest three deep).
{_pyright_evaluations_note(f)}
{_conditions(record)}
"""
    return f"{f['ratio']:.2f}", body


def _own_and_nesting(f: Mapping[str, Any]) -> str:
    if "nesting" not in f:
        return ""
    rows = [
        [depth, f"{d['with_s']:.2f} s", f"{d['without_s']:.2f} s", f"{d['ratio']:.2f}", f"{d['own_ratio']:.2f}"]
        for depth, d in sorted(f["nesting"].items(), key=lambda item: int(item[0]))
    ]
    worst = max(d["own_ratio"] for d in f["nesting"].values())
    table = _table(["depth", "with the plugin", "without", "wall ratio", "module's own check ratio"], rows)
    return f"""

Counting only mypy's own time for the project's modules (`--timing-stats`), the plugin costs
**{f["own_ratio"]:.2f}×** plain mypy.

**Nesting.** One module whose pipeline nests a `branch` inside the `on_true` arm of the one
before, depth 1–8, checked with a warm library cache (primed once per configuration, copied
fresh for every run), alternating. With the plugin every arm is checked once per check of its
enclosing call; before, a callback generic in its result made mypy check it three times per
level (3^depth), and plain mypy still checks it about twice per level. Goal: ≤ {f["nesting_target"]} at every depth
({_met(worst, f["nesting_target"], at_most=True)}; worst {worst:.2f}).

{table}"""


_DATABASES = (
    ("sqlite", "SQLite (file, WAL, synchronous=FULL)"),
    ("postgres", "PostgreSQL 15 (loopback, no fsync)"),
)


def _handler(record: Record) -> tuple[str, str]:
    f = record["figures"]
    rows = []
    worst_core = worst_raw = 0.0
    for key, label in _DATABASES:
        if key not in f:
            rows.append([label, "not measured", "", "", "", "", "", ""])
            continue
        d = f[key]
        worst_core = max(worst_core, d["core_ratio"], d["core_cpu_ratio"])
        worst_raw = max(worst_raw, d["raw_ratio"], d["raw_cpu_ratio"])
        rows.append(
            [
                label,
                f"{d['kumiko_us'] / 1000:.2f} ms",
                f"{d['core_us'] / 1000:.2f} ms",
                f"{d['raw_us'] / 1000:.2f} ms",
                f"{_ratio(d, 'core_ratio')} / {d['core_cpu_ratio']:.2f}",
                f"{_ratio(d, 'raw_ratio')} / {d['raw_cpu_ratio']:.2f}",
                f"{d['orm_ratio']:.2f} / {d['orm_cpu_ratio']:.2f}",
            ]
        )
    table = _table(
        [
            "database",
            "kumiko",
            "Core",
            "raw driver",
            "kumiko / Core (wall / CPU)",
            "kumiko / raw (wall / CPU)",
            "kumiko / ORM (context)",
        ],
        rows,
    )
    body = f"""\
**What it runs.** A `get_one → compute → update` handler (bench/_counter.py) dispatched
through the App, against the same write by hand in **SQLAlchemy Core** (statements built once,
one connection-level transaction) and with the **raw driver** (sqlite3 / psycopg 3, one
connection). The hand-written SQL is the minimal competent one: `SELECT count, version … WHERE
id AND tenant_id`, `INSERT` of the event, `UPDATE … SET count, version, updated_at WHERE id AND
version` with a rowcount check (0 rows: rollback, `version_conflict`), `COMMIT`; no other lock.
Every side persists per call one `counter.updated` event row and the counter's new count,
version and updated_at; a check first compares all sides' results and stored rows. The ORM
column is the old baseline (the same write through an ORM `Session`), kept as context. Each
round times {f["calls"]} calls of each side, the order rotating, {f["rounds"]} rounds; CPU is the bench
process's own. SQLite: a temporary file, WAL, synchronous=FULL, `BEGIN IMMEDIATE` on every
side. PostgreSQL: the throw-away server, which runs without fsync (and without
synchronous_commit).

{table}

Goals: kumiko / Core ≤ {f["goal_core"]} on wall and CPU on both databases —
{_met(worst_core, f["goal_core"], at_most=True)} (worst {worst_core:.2f}); kumiko / raw ≤ {f["goal_raw"]} —
{_met(worst_raw, f["goal_raw"], at_most=True)} (worst {worst_raw:.2f}).

**Where the difference goes.** Timing SQLAlchemy's own calls inside both sides (SQLite with
synchronous=OFF, so that no disk wait hides anything): the transaction and the three statements
cost kumiko about a tenth more than Core, mostly because `get_one` loads the whole entity (six
columns, two UUIDs and two times to convert, against Core's two integers) and the `UPDATE` binds
the tenant too. The rest is the framework's own work per call around them: the role and payload
checks, the run and its context, the tenant filter's checks, the loaded entity put into the
session's identity map and taken out again, the version and column checks, the event payload
and the `Saved` value — a set of small costs, none above a few percent of a call. The raw
driver's goal is out of reach while the statements go through SQLAlchemy: Core alone costs
2–3 times the raw driver's CPU for the same statements.

On 2026-12-04 those small costs were cut (the tracing check without an environment lookup per
run, the entity's state without `inspect()`, a column's label made only for a problem, JSON
scalars by exact type, per-entity write data built once, the row's values zipped without a
second length check). Full runs of the code before and after, one after the other at the same
load: at a load of 3, kumiko / Core CPU went from 1.36 to 1.21 on SQLite and from 1.31 to 1.22
on PostgreSQL (wall 1.28 → 1.15 and 1.27 → 1.17); at a load of 9, where the wall figures are
mostly waiting, from 1.31–1.36 to 1.22–1.30 and from 1.32–1.33 to 1.25–1.29.

On 2026-12-05 a write's own rows on SQLite (the event's INSERT, the row's INSERT or UPDATE)
were sent to the driver's cursor where no listener, echo or option would see the difference
([design decisions](design-decisions.md)). In CPU instructions per call (callgrind,
synchronous=OFF, so only the process's own work): kumiko 1,378,000 → 1,188,000, against
Core's 1,093,000 and the raw driver's 213,000. Runs of the code before and after, alternated
at a load of 5–9: kumiko / Core CPU 1.20–1.24 before and 1.14–1.19 after (that code also
ran a block as one generated function, 2 % of the instructions, not adopted); kumiko / raw
CPU 2.42–2.81 before and 2.50–2.95 after, which that load's noise does not tell apart (the
raw side's own CPU moved from 160 to 280 µs between runs). The table above is a run at a
load of 1.2 (41 rounds × 60 calls); a second right after it with 200 calls a side (load 0.9
before, 1.9 after) gave kumiko / raw CPU 2.48 on SQLite and 2.43 on PostgreSQL (wall 2.01
and 1.71) and kumiko / Core CPU 1.11 and 1.20: the raw goal is met on a quiet machine, with
little to spare on CPU.

{_conditions(record)}
"""
    return f"{worst_core:.2f}", body


def _write_scaling(record: Record) -> tuple[str, str]:
    f = record["figures"]
    if "postgres" not in f:
        return "—", f"PostgreSQL was not available: nothing measured.\n\n{_conditions(record)}\n"
    d = f["postgres"]
    rates, scaling, vs_core = d["writes_per_s"], d["scaling"], d["vs_core"]
    rows = []
    for n in ("1", "2", "4"):
        k_scale = "—" if n == "1" else f"{scaling['kumiko'][n]['median']:.2f}×"
        c_scale = "—" if n == "1" else f"{scaling['core'][n]['median']:.2f}×"
        ratio = vs_core[n]
        rows.append(
            [
                n,
                f"{rates['kumiko' + n]:.0f}",
                k_scale,
                f"{rates['core' + n]:.0f}",
                c_scale,
                f"**{ratio['median']:.2f}** ({ratio['min']:.2f}–{ratio['max']:.2f})",
            ]
        )
    table = _table(["writers", "kumiko writes/s", "kumiko vs 1", "Core writes/s", "Core vs 1", "kumiko / Core"], rows)
    four, at4 = scaling["kumiko"]["4"]["median"], vs_core["4"]["median"]
    rt = d["round_trip_ms"]
    body = f"""\
**What it runs.** 1, 2 and 4 writer processes, each bumping its own aggregate with the
`get_one → compute → update` write of bench/handler.py, kumiko-typed against SQLAlchemy Core
with optimistic locking (`UPDATE … WHERE id AND version`, rowcount checked, no other lock).
Each write persists one event row and the counter row. All traffic goes through a loopback
TCP proxy (bench/_latency_proxy.py, 127.0.0.1 only) that delivers every chunk
{f["delay_ms"]} ms later in each direction: a `SELECT 1` took {rt["direct"]:.2f} ms direct and
{rt["proxied"]:.2f} ms through it. The figure is all writes / (start signal to the last writer
done), {f["calls"]} writes per process, configurations rotating, {f["rounds"]} rounds; ratios are
medians of per-round ratios. PostgreSQL is the throw-away server, which runs without fsync.

{table}

Goals: kumiko 4 writers ≥ {f["goal_scaling"]}× one writer — {_met(four, f["goal_scaling"], at_most=False)}
({four:.2f}×); kumiko ≥ {f["goal_vs_core"]}× Core at 4 writers — {_met(at4, f["goal_vs_core"], at_most=False)}
({at4:.2f}).

{_conditions(record)}
"""
    return f"{four:.2f}× (4 vs 1)", body


def _outbox_label(key: str) -> str:
    """``pg4_pool1`` -> "PostgreSQL, 4 worker processes, 1 delivery at a time"."""
    db, _, pool = key.partition("_pool")
    workers = int(db.removeprefix("pg").removeprefix("sqlite"))
    name = "PostgreSQL" if db.startswith("pg") else "SQLite"
    processes = f"{workers} worker process{'es' if workers > 1 else ''}"
    return f"{name}, {processes}, " + (f"{pool} delivery at a time" if pool else "default pool (4 at a time)")


def _outbox(record: Record) -> tuple[str, str]:
    f = record["figures"]
    cores = record["machine"]["cpus"]
    rows = []
    for key, rate in f["rows_per_s"].items():
        cpu = f["cpu_ms_per_row"][key]
        total = sum(cpu.values())
        sides = " + ".join(f"{cpu[side]:.2f}" for side in ("workers", "receiver", "postgres") if side in cpu)
        rows.append([_outbox_label(key), f"{rate:.0f} rows/s", f"{sides} = {total:.2f}", f"{1000 * cores / total:.0f}"])
    summary = "—"
    verdict = "PostgreSQL was not available: no scaling figure."
    scaling = f.get("scaling") or {}
    if "4" in scaling:
        for name, figures in (("default pool", scaling), ("1 delivery at a time", scaling["pool1"])):
            for n in ("2", "4"):
                s = figures[n]
                rows.append(
                    [f"**{n} workers vs 1, {name}**", f"**{s['median']:.2f}×** ({s['min']:.2f}–{s['max']:.2f})", "", ""]
                )
        four, alone = scaling["4"]["median"], scaling["pool1"]["4"]["median"]
        summary = f"{four:.2f}× (4 vs 1); {alone:.2f}× one delivery at a time"
        verdict = (
            f"Goal: 4 workers ≥ {f['goal']}× one — with the default pool {_met(four, f['goal'], at_most=False)} "
            f"({four:.2f}×); by processes alone (1 delivery at a time) {_met(alone, f['goal'], at_most=False)} "
            f"({alone:.2f}×)."
        )
    header = [
        "configuration",
        "delivered",
        "CPU ms per row: workers + receiver + PostgreSQL",
        f"at most, rows/s on {cores} cores",
    ]
    body = f"""\
**What it runs.** {f["rows"]:,} webhook rows enqueued, then delivered by worker processes to
an HTTP receiver on 127.0.0.1 that answers 200 after {f["delay_ms"]:g} ms (asyncio, keep-alive, in the
bench process: infrastructure, not a measured side); each run on a fresh database, every
configuration once per round with the order rotating, {f["rounds"]} rounds, medians. Each worker
process runs with the App's default pool (4 deliveries in flight) or with
`delivery_concurrency=1` (the ratios then measure scaling by processes alone). Persisted per
row: the outbox row marked sent (status, attempts, sent_at; on both databases one UPDATE for a
batch's sent rows). PostgreSQL is the throw-away server, which runs without fsync; SQLite a
file in WAL with synchronous=FULL. The clock starts once every worker process has started up
(connected, and made the App's HTTP client, which builds a TLS context): a process pays that
once, and in a drain of under a second 4 processes' start-up on 2 cores weighed as delivery.

CPU per delivered row is counted by side from the start signal (the workers' own count, the
bench process for the receiver, the server's processes from /proc); "at most" is what the
machine's cores allow at that CPU per row, whatever the number of workers.

{_table(header, rows)}

{verdict} The work is waiting on the receiver, so more workers overlap the waits until the
CPU per row fills the cores: 4 workers with the default pool are there, so their figure moves
with whatever else runs on the machine (the load averages below; the machine is shared).
A delivery answered without a body (`Content-Length: 0`, as here) keeps its HTTP connection
for the next one; answered with a body, which is never read, the connection is dropped and the
next delivery to that receiver opens a new one.

{_conditions(record)}
"""
    return summary, body


_COMPARISONS = (
    ("kumiko step10 / dbos ten", "10 steps, each durable; DBOS: `@DBOS.step`", "goal_steps"),
    ("kumiko ten / dbos-plain ten", "10 steps; DBOS: plain functions", "goal_plain"),
    ("kumiko ten / dbos ten", "10 steps; DBOS: `@DBOS.step` (context)", None),
    ("kumiko wait0 / dbos wait0", "one 0-second wait (context)", None),
)


def _workflows(record: Record) -> tuple[str, str]:
    f = record["figures"]
    rows = []
    verdicts = []
    measured = [(key, label) for key, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")) if key in f]
    for key, label, goal_key in _COMPARISONS:
        mine, other = key.split(" / ")
        for db, db_label in measured:
            rates, ratios = f[db]["runs_per_s"], f[db]["ratios"]
            ratio = ratios.get(key)
            if ratio is None:
                cells = ["not measured", "—"]
            else:
                cells = [f"{rates[other]:.0f}", f"**{ratio['median']:.2f}** ({ratio['min']:.2f}–{ratio['max']:.2f})"]
                if goal_key is not None and db == "postgres":
                    goal = f[goal_key]
                    verdicts.append(f"{label}: ≥ {goal}× on PostgreSQL — {_met(ratio['median'], goal, at_most=False)}")
            rows.append([label, db_label, f"{rates[mine]:.0f}", *cells])
    if not any(f[db]["ratios"] for db, _ in measured):
        verdict = "DBOS was not measured (not installed, or `--no-dbos`): kumiko-typed alone."
        headline = "—"
    else:
        verdict = "Goals: " + "; ".join(verdicts) + "." if verdicts else "PostgreSQL was not measured."
        pg = f.get("postgres", {}).get("ratios", {})
        headline = f"{pg['kumiko step10 / dbos ten']['median']:.2f}" if "kumiko step10 / dbos ten" in pg else "—"
    runs = f[measured[0][0]] if measured else {"rounds": "?", "runs": "?"}
    table = _table(["workload", "database", "kumiko-typed, runs/s", "DBOS, runs/s", "median ratio"], rows)
    body = f"""\
**What it runs.** Start → completion, kumiko-typed against DBOS Transact doing the same work
in the same process (DBOS is installed for the bench only: `pip install -e '.[bench]'`),
{runs["rounds"]} rounds × {runs["runs"]} runs per side, the side order rotating:

- 10 compute steps. kumiko-typed runs them in the start's one transaction and inserts the run
  row once. DBOS: a `@DBOS.workflow` calling 10 plain functions (it records the workflow,
  no step), and, as context, 10 `@DBOS.step` functions (it records each step's output).
- 10 compute steps, each durable before the next: kumiko-typed with a 0-second `wait` between
  consecutive steps (each suspension commits the step values; worker passes resume the runs),
  against DBOS's `@DBOS.step` version.
- A 0-second durable wait, then one step (context).

Each side has its own database: on SQLite a file each, both in WAL with synchronous=FULL
(DBOS's file is switched to WAL before DBOS opens it); on PostgreSQL two databases on the
throw-away server, which runs without fsync.

A worker pass resumes up to 10 due runs per transaction; the UPDATE that stores each run's
durable step is held and the batch's are sent together before its COMMIT (one
`executemany`, one round trip), in the same transaction as before. Sent one by one, that
round trip and SQLAlchemy's work per statement were half of a durable step's wall time:
on 2026-12-05, at a load of 1.3, `step10` on PostgreSQL went from 191 to 333 runs/s
(ratio 4.71 → 7.12; SQLite 4.84 → 5.86), and the bench process's CPU per run from
3.6–4.0 ms to 2.3–2.4 ms.

A `ten` start writes one row, its run's INSERT with the final state. On PostgreSQL psycopg
sent a BEGIN before it and a COMMIT after it, each a round trip of its own. That INSERT,
when the steps sent nothing, is now sent alone in autocommit (`_lone_statement`; one
statement is as atomic): one round trip instead of three. Its instructions (callgrind,
the bench process) barely moved, 1.40 M → 1.38 M per start: what went is the two round
trips (system calls, waiting for the server, the server's work for them). On 2026-12-05,
alternated with the code before in one harness beside the same row written by hand with
SQLAlchemy Core (`engine.begin()`, one INSERT): at a load of 7, a start took 2.65–3.35 ms
before and 1.51–1.71 ms after, 2.06–2.32× the hand-written INSERT's time before and
0.96–1.56× after (CPU of the bench process: 1.83–2.27× → 1.24–1.60×); at a load of 1.5 a
prototype of the same path took a start from 570–650 µs to 440 µs. SQLite is unchanged
(1.52× → 1.50× the hand-written CPU): its BEGIN IMMEDIATE and COMMIT are no round trips,
its time is the fsync of the commit. The bench's own ratio could not be re-measured with
it that day at the shared machine's loads of 5–40. On 2026-12-05, at a load of 0.2–0.7,
`ten` / DBOS plain was 2.94 (2.07–3.39) on PostgreSQL and 3.10 on SQLite, `step10` / DBOS
steps 6.70 and 5.17; a run just before it, at 0.1–1.1, gave `ten` / DBOS plain 3.07 on SQLite
and 2.62 on PostgreSQL, and `step10` / DBOS steps 4.94 and 4.96: the ratios move by more than
the goals' margins from run to run, DBOS's side as much as ours. On 2026-12-06, with no
change to a start's path, two runs at loads of 6–14 and 7–11 (other work on the 2 CPUs;
every absolute figure a third to a tenth of the table's) gave `ten` / DBOS plain 3.14 and
4.61 on PostgreSQL, `step10` / DBOS steps 6.48 and 5.08; the table below is a later run that
day, started at a load of 0.7 that rose to 5 as other work began. Run one after the other
without DBOS (3 rounds each, load under 1), this code and the code of the session before
(f6cd87e) on PostgreSQL: `ten` 1,813 against 1,195 runs/s, `step10` 245 against 201,
`wait0` 1,044 against 788.

Where a `ten` start's 1.38 M instructions go now (PostgreSQL, callgrind, per start; the
hand-written Core INSERT above takes 0.62 M): SQLAlchemy's Session around the segment —
made, begun, committed, closed, with the pool's checkout and checkin — 0.42 M; the
INSERT through SQLAlchemy (the App's engine with its listeners, the JSON and time types)
and psycopg, about 0.65 M; encoding the payload, the 10 values and the result for the
state and checking them storable, 0.20 M; the run's context and the 10 compute steps,
0.10 M. Left alone: the Session (steps get `c.db`; a start that needs none could skip it
only through a second transaction runner), and the four indexes of
`kumiko_workflow_runs` that the INSERT updates on the server (listing, due runs, trigger
keys).

{table}

{verdict}{_resume_scaling(f)}

{_conditions(record)}
"""
    return headline, body


def _scaling_table(d: Mapping[str, Any]) -> str:
    cpu = d.get("cpu_ms_per_run", {})  # recorded since the bench counts CPU by side

    def cpu_cell(n: str) -> list[str]:
        if not cpu:
            return []
        sides = cpu[n]  # in the header's order: the results file sorts its keys
        shown = [sides[side] for side in ("workers", "receiver", "postgres") if side in sides]
        return [" + ".join(f"{v:.2f}" for v in shown) + f" = {sum(shown):.2f}"]

    rows = [[n, f"{rate:.1f}", *cpu_cell(n)] for n, rate in d["runs_per_s"].items()]
    for n in ("2", "4"):
        s = d[f"scaling_{n}"]
        rows.append(
            [f"**{n} vs 1**", f"**{s['median']:.2f}×** ({s['min']:.2f}–{s['max']:.2f})", *([""] if cpu else [])]
        )
    header = ["worker processes", "runs/s", *(["CPU ms per run: workers + receiver + PostgreSQL"] if cpu else [])]
    return _table(header, rows)


def _resume_scaling(f: Mapping[str, Any]) -> str:
    if "resume_scaling" not in f:
        return ""
    d = f["resume_scaling"]
    four = d["scaling_4"]["median"]
    return f"""

**Resume scaling** (PostgreSQL). {d["runs"]} runs whose first segment ends at a 0-second wait and
whose second POSTs to a receiver on 127.0.0.1 that answers after {d["delay_ms"]:g} ms, resumed by 1, 2
and 4 worker processes; runs / (start signal to the last worker done), configurations
rotating, {d["rounds"]} round(s). Each worker process warms up before the start signal (a
pass on the empty database, one run of its own resumed: its statements compiled, its first
segment run), alike in every configuration, and ends at the first pass that finds no run
left to claim (what is left, other workers hold and complete). Persisted per run: the run
row, updated to completed. Goal: 4
workers ≥ {f["goal_scaling"]}× one — {_met(four, f["goal_scaling"], at_most=False)}.

{_scaling_table(d)}{_slow_peer(f)}

{_RESUME_PROSE}"""


def _slow_peer(f: Mapping[str, Any]) -> str:
    if "resume_scaling_slow" not in f:
        return ""
    d = f["resume_scaling_slow"]
    return f"""

The same workers with a slow peer: {d["runs"]} runs, the receiver answering after {d["delay_ms"]:g} ms,
{d["rounds"]} round(s) (no goal; it measures what the cut claims below are for).

{_scaling_table(d)}"""


_RESUME_PROSE = """\
Where the time of a resumed run goes (2026-12-06, 150 runs, measured inside the workers and
with `pg_stat_statements`, at loads of 2–3 from other work on the machine). Not in the
claim: PostgreSQL executed all the statements of the 150 resumes in 12.7 ms with 1 worker
and 14.3 ms with 4; a claim of 10 among 150 due runs is an index scan of
`kumiko_workflow_runs_due`, an incremental sort and the row locks, 0.15 ms, 19 buffers read
per claim with 1 worker and 30–38 with 4 (the rows other workers hold, stepped over); SKIP
LOCKED never waits. Statements per resumed run: 0.27 with 1 worker (a claim and one
`executemany` of the UPDATEs per batch of 10, and the passes around them), 0.42–0.47 per
worker with 4: each worker's own first and last passes, about 8 statements each. The
library's own wall time per run is about 0.6 ms of 6.2: 0.2–0.3 ms from one POST to the
next, 3–4 ms per batch (claim, UPDATEs, COMMIT). The rest is the POST: 5.5–6.2 ms with 1
worker, 7–8.4 ms with 4 (the receiver is one asyncio thread of the bench process; the
workers, PostgreSQL and it share the 2 CPUs). And the tail: 15 batches of 10 go 4/4/4/3 at
best (3.75× at most), and a worker slowed by the machine keeps the 10 runs it claimed; in
one round the workers were done at 375, 386, 467 and 549 ms of a 549 ms window.

The growth of PostgreSQL's CPU per run with the number of workers (0.13 → 0.47 ms in the
table of 2026-12-05) was the meter's: a worker that is done closes its connections, and
the postmaster, reaping the backend, adds all of its life to its children's time —
connecting and the worker's warm-up before the window too, 10–20 ms each, once per worker
that finishes before the last. `bench/_cpu.py` now takes that part off.

Cut claims. A transaction claimed its 10 runs in one statement and kept them locked while
it worked them one after the other: another worker's claim skips them, so a worker held
runs it had not started while others found nothing to do. Now a worker whose recent
segments take more than 10 ms claims as many as its segments run in 100 ms, and claims on
after them in the same transaction up to the 10 (`_claim_size`; PostgreSQL only, the due
order and the keyset paging unchanged; test_claim_size.py). Each further claim is a
statement, 1–2 ms of wall at loads of 6–10: cut finer, it cost more than it won. With the
5 ms receiver (6–8 ms a segment), alternated with the code before: claims covering 10 ms of
segments (1–2 runs) took 1 worker from 110–115 to 96–99 runs/s, covering 30 ms (5 runs)
from 137–141 to 118–140; covering 50 ms (7–8 runs), 4 workers vs 1 went 1.83, 2.06, 2.54 →
1.89, 1.93, 2.22 and the workers' CPU per run with 4 from 1.46–1.80 to 2.19–2.34 ms (loads
of 5–12). So with the 5 ms receiver (6–8 ms a
segment) a batch is claimed at once while the machine keeps its segments under 10 ms, and
that table measures the code as before (at loads of 12 its segments took longer, and the
claims of 4 workers were cut: 10, 6, 4, 9, 1, 6). The slow peer's is what changed:
alternated with the code before (3 rounds, loads of 9–12), 4 workers vs 1 went 2.15, 2.51,
2.17 → 2.58, 2.97, 2.20; the 4 workers resumed 14–17 runs each, where before two resumed
10 and two 20 (their first batch, then one more batch each for the first two done); 1
worker claims 26 times for 60 runs instead of 8, its CPU per run 1.35–1.54 → 1.82–1.96 ms
at those loads, beside a 50 ms peer.

The tables above are one run of this code at the load in the line below: the ratios, the
1 worker's runs/s and the CPU per run all move with the machine's load — at loads of 6–13,
every side gets less of the 2 CPUs, and a worker waits for a CPU after each POST."""


_DUE_DATABASES = (("sqlite", "SQLite"), ("postgresql", "PostgreSQL 15"))
_DUE_KINDS = (
    ("stranded", "beside due runs of a workflow the App does not register"),
    ("backlog", "beside a due backlog of its own workflows"),
)


def _due_runs(record: Record) -> tuple[str, str]:
    f = record["figures"]
    rows = []
    for db, db_label in _DUE_DATABASES:
        for kind, label in _DUE_KINDS:
            d = f["databases"].get(db, {}).get(kind)
            if d is None:
                rows.append([db_label, label, "not measured", "", ""])
                continue
            rows.append([db_label, label, f"{d['before_ms']:.2f} ms", f"{d['now_ms']:.2f} ms", _ratio(d)])
    sqlite = f["databases"]["sqlite"]["stranded"]
    headline = f"SQLite stranded {sqlite['now_ms']:.2f} ms a pass (index of before: {sqlite['before_ms']:.1f} ms)"
    table = _table(["database", "the claim's SELECT", "index of before", "index now", "now / before"], rows)
    body = f"""\
**What it runs.** The `SELECT` by which a worker pass claims its due runs (the one it runs
until it finds none, so an idle pass runs it once), on a table of {f["runs"]:,} suspended runs,
60 % of them due: either runs of a workflow the App no longer registers (a removed
workflow's, which no pass resumes or claims) or a backlog of its own two workflows. Each
set-up is made twice: with the index of before, `(status, wake_at)`, and with this
release's for the dialect (SQLite `(status, workflow, wake_at)`; PostgreSQL keeps
`(status, wake_at)`, its planner already skips the other workflows' runs). The two sides
alternate within each of {f["rounds"]} rounds, which goes first rotating; medians, and the median
of the per-round ratios. Nothing is persisted: each side reads the due runs it would resume.
No goal: this is the figure of a fix (SQLite's planner read every due run of the
unregistered workflow at each idle pass), kept so that a change of the index or the claim
shows what it costs.

{table}

{_conditions(record)}
"""
    return headline, body


_FEED_KINDS = (
    ("other keys", "`Paid` events of orders no run waits for"),
    ("unwaited type", "`Shipped` events, a type no run waits for"),
)


def _event_feed(record: Record) -> tuple[str, str]:
    f = record["figures"]
    rows = []
    for db, db_label in _DUE_DATABASES:
        for kind, label in _FEED_KINDS:
            d = f["databases"].get(db, {}).get(kind)
            if d is None:
                rows.append([db_label, label, "not measured", "", "", ""])
                continue
            sides = ("kumiko", "hand", "batched")
            feed = " / ".join(f"{d[f'{side}_ms']:.0f} ms" for side in sides)
            per_event = " / ".join(f"{d[f'{side}_us_per_event']:.0f} µs" for side in sides)
            rows.append([db_label, label, feed, per_event, _ratio(d), _ratio(d, "ratio_batched")])
    sqlite = f["databases"]["sqlite"]["other keys"]
    headline = (
        f"SQLite, events of other keys: kumiko / by hand {sqlite['ratio']:.2f}, "
        f"kumiko / batched {sqlite['ratio_batched']:.2f}"
    )
    columns = [
        "database",
        "events",
        "a feed: kumiko / by hand / batched",
        "per event",
        "kumiko / by hand",
        "kumiko / batched",
    ]
    table = _table(columns, rows)
    body = f"""\
**What it runs.** The workers' event feed over {f["events"]:,} events that wake no run, beside
{f["waiting"]} runs waiting for a `Paid` event of their order: either `Paid` events of other
orders or `Shipped` events, which no run waits for. Each round moves the cursor back and
feeds every event again. *kumiko* is the feed a worker pass runs (`EventFeed.consume`: the
cursor row locked per transaction of 200 events, each event's groups of waits looked up
through the match index once per transaction and its key loaded for each, a probe of the
groups of each window of the transaction's events (32, 32, 64, then the rest; each group's
first armed wait, through the match index: on SQLite a scalar subquery a group, on PostgreSQL
one statement of the groups as arrays), the waits of the groups found read, the cursor moved).
*By hand* is the same rule in Core: its own cursor row (read `FOR UPDATE` on PostgreSQL),
the events after it, for each event of a type some definition waits for one `SELECT` of the
waits of that type, tenant and key, the cursor moved; it knows the waited types from its
definitions, so an event of another type costs it no statement, and it leaves out what
kumiko's feed also guards against (waits of workflows a deploy removed, stranded runs,
PostgreSQL's snapshot rule for concurrent appends). *Batched* is that feed with one `SELECT`
per waited type in a transaction instead of one per event (the armed waits whose tenant and
key are among its events', a tuple `IN` list, matched to the events in Python); it reads
all of a key's waits, where kumiko's probe reads one and its match a page. All persist the
cursor only. The three alternate within each of {f["rounds"]} rounds, which goes first
rotating; medians, and the medians of the per-round ratios. No goal.

Before this bench the feed stepped through the match index for every event, two statements
more per event whatever its type, and built each group's statement afresh: 6.8–25× the
hand-written feed in a smoke run (400 events, load 4), against 1.9–3.6× in a smoke run
after. Then each event of a waited type read its key's waits in a statement of its own: a
feed of 200 events of other keys read the waits in 204 statements (5 with one probe of the
whole batch, which measured 1.11 on SQLite and 0.75 on PostgreSQL at a load of 8; 8 since it
asks a window of events at a time, so that a transaction a fan-out fills loads the keys of
32 events, not 200: the table below), and
kumiko / by hand was 2.49 on SQLite, 2.37 on PostgreSQL (`Paid` events of other orders,
load 7.6–9). Then each event was read whole (its headers, stream and correlation decoded,
and a mapping built per row: two thirds of the time the feed took to read one) and each key
made into JSON twice, once per form a wait may have stored, though most keys have one form.
The feed now reads the columns it uses and makes one text where the forms are one: per
event of a feed of 1,000, in CPU instructions of the feed's process (callgrind, which the
machine's load does not move), `Paid` events of other orders take 336,000 instead of
461,000 on SQLite (-27%) and 506,000 instead of 624,000 on PostgreSQL (-19%), `Shipped`
events 135,000 instead of 209,000 (-35%) and 91,000 instead of 173,000 (-47%), in as many
statements (2026-12-07). Then the probe on PostgreSQL was SQLite's statement: 14 to 57 KB of
SQL with 192 to 768 bound values for the feed of this bench (up to 1,280), past what psycopg
keeps the parse of (4,096 characters, 50 parameters), so psycopg split its text into parts
again at every execution, about a quarter of the feed's time in Python there (PostgreSQL
itself had it prepared: psycopg prepares a statement at its sixth execution on a connection,
whatever its length). It now sends the groups as five arrays to one statement of 556
characters (`unnest(...) WITH ORDINALITY`, each row's first armed wait by a `LATERAL`
subquery: a nested loop over index scans of the match index in its generic plan), which
psycopg keeps and prepares (`pg_prepared_statements`). With it, a UUID field is parsed
without the UUID constructor's checks of which of its five forms it was given (12,200 CPU
instructions a field instead of 14,500), and a load names its event in its error text only
when it fails: a load of a `Paid` event takes 29,800 instructions instead of 34,500, and a
`Paid` event of another order 327,000 instead of 544,000 on PostgreSQL (-40%), 329,000
instead of 335,000 on SQLite (-2%), per event of a feed of 1,000 (callgrind; `Shipped`
events, which are neither probed nor loaded, not measured again). In bench runs alternating
main and the change (rounds of 7 at loads of 7 to 11 on 2 CPUs: noisy), kumiko / batched for
`Paid` events on PostgreSQL was 2.77 and 3.91 before, 2.61 and 2.53 after; the table below
was taken after, at a load of 6.5, and its SQLite and `Shipped` rows, which the change
hardly touches, moved with the machine, not with it. What remains against
*batched*: an event of a waited type loaded into its class to compute its key (cattrs,
upcasters), the probe's bound values on SQLite (five a group), and the ORM session's
execute path.

{table}

{_conditions(record)}
"""
    return headline, body


def _foreach_state(record: Record) -> tuple[str, str]:
    f = record["figures"]
    rows = []
    for db, db_label in _DUE_DATABASES:
        for n, d in sorted(f["databases"].get(db, {}).items(), key=lambda item: int(item[0])):
            sides = [d.get(side) for side in ("before", "now")]
            shown = [
                f"{s['ms']:.1f} ms, {s['bytes']:,} B, {s['read']:,} B; {s['first']:,} B"
                if s is not None
                else "not measured"
                for s in sides
            ]
            rows.append([db_label, f"{int(n):,}", *shown])
    biggest = max(f["databases"]["sqlite"], key=int)
    now = f["databases"]["sqlite"][biggest]["now"]
    headline = (
        f"SQLite, {int(biggest):,} items: {now['ms']:.1f} ms, {now['bytes']:,} bytes sent and"
        f" {now['read']:,} read a segment; {now['first']:,} bytes sent at the first suspension"
    )
    columns = [
        "database",
        "items",
        "before (ms, bytes sent, bytes read; first suspension)",
        "now (ms, bytes sent, bytes read; first suspension)",
    ]
    table = _table(columns, rows)
    body = f"""\
**What it runs.** A workflow whose `compute` builds `n` small dicts (a text, an int, a UUID
each) and a `for_each` over them whose body is a 0-second `wait`: each iteration is a
segment. Per measurement a fresh database (SQLite file in WAL; a database on the tests'
throw-away PostgreSQL server), the run started, two segments untimed, then {f["segments"]}
worker passes (one segment each) timed one by one: the median pass, the median of the
bytes of the parameters of every INSERT and UPDATE a pass sends (JSON as the driver gets
it), and the median of the bytes of the values its SELECTs fetch (JSON as text); after the
semicolon, the bytes the start sends, which stores the run at the loop's first suspension.
"before" is the release of stored form 4 (its source tree, `--before SRC`), "now" this one;
each measurement in its own process, the two alternating in each of {f["rounds"]} rounds,
which goes first rotating; the median over the rounds. No goal: before, the first
suspension stored the items twice, as the value the loop runs over (a part) and as the
loop's pages; now once, as the value's pages, which the loop reads as its items (see
[workflows.md](workflows.md#where-a-run-stops-and-resuming-there), "What a suspension
costs"). A segment reads the page of 64 items its iteration needs, as before (the release
of stored form 2 read the value and the items whole at every segment: 4.0 s and 13.7 MB
read a segment over 50,000 items on SQLite).

{table}

{_conditions(record)}
"""
    return headline, body


SECTIONS: dict[str, tuple[str, str, str, Callable[[Record], tuple[str, str]]]] = {
    # name: (title, measures, target, renderer)
    "interpreter": (
        "the per-call cost of the interpreter",
        "N `compute` + `return_`, interpreter / the same lambdas (worst of 3, 10, 50)",
        "≤ 1.15",
        _interpreter,
    ),
    "mypy_plugin": (
        "what the plugin costs mypy",
        "cold `mypy --strict`, with / without the plugin",
        "≤ 1.15",
        _mypy_plugin,
    ),
    "pyright_keys": (
        "what exact keys cost pyright",
        "pyright check phase, key lists / every key `Any`",
        "≤ 2",
        _pyright_keys,
    ),
    "handler": (
        "a handler against SQLAlchemy Core and the raw driver",
        "get_one → compute → update, kumiko / Core (worst of wall, CPU, databases)",
        "≤ 1.30",
        _handler,
    ),
    "write_scaling": (
        "writers on distinct aggregates",
        "PostgreSQL writes/s through a 1 ms proxy, kumiko 4 writers / 1",
        "≥ 3",
        _write_scaling,
    ),
    "outbox": ("delivery throughput", "webhook rows/s to a 5 ms receiver, 4 workers / 1", "≥ 3", _outbox),
    "workflows": (
        "against DBOS Transact, and resume scaling",
        "runs/s, per-step-durable kumiko / DBOS steps (PostgreSQL)",
        "≥ 5",
        _workflows,
    ),
    "due_runs": (
        "claiming due runs beside runs it does not resume",
        "an idle pass's claim beside many due runs of a removed workflow (ms)",
        "—",
        _due_runs,
    ),
    "foreach_state": (
        "a segment of a suspending for_each, by the loop's length",
        "ms, bytes sent and read per segment, bytes sent at the first suspension, 50,000 items (SQLite)",
        "—",
        _foreach_state,
    ),
    "event_feed": (
        "the workers' event feed, by hand in Core",
        "events that wake no run, kumiko / a Core feed (SQLite)",
        "—",
        _event_feed,
    ),
}


def render(records: Mapping[str, Record]) -> str:
    summary_rows = []
    sections = []
    for name, (title, measures, target, renderer) in SECTIONS.items():
        headline, body = renderer(records[name])
        summary_rows.append([f"`bench/{name}.py`", measures, target, headline])
        sections.append(f"## `bench/{name}.py`: {title}\n\n{body}")
    summary = _table(["bench", "measures", "target", "figure"], summary_rows)
    return f"""\
# Benchmarks

<!-- Generated by scripts/render_benchmarks.py from bench/results/*.json: edit those, not this page. -->

The benches in `bench/` are scripts, not tests: each runs a baseline and a candidate
alternately in one process, prints absolute figures and the **median of the per-round
ratios**, and never passes or fails on time. Every figure below comes from the results file
that `--json` wrote (`bench/results/<bench>.json`), with the conditions it was taken under.
Ratios are steadier than absolute times on a shared machine; compare those, and read each
section's load average (this 2-CPU machine is shared: a load far above 2 makes every figure
noisier). Each bench prints what each side persists and the baseline's SQL; the PostgreSQL
benches run on a throw-away server without fsync (nor full-page writes or synchronous
commit), so their figures leave out the disk.

{summary}

Re-measure and re-render (minutes; PostgreSQL benches start a throw-away server from the
installed PostgreSQL binaries, like the tests):

```console
$ python scripts/render_benchmarks.py --run              # every bench
$ python scripts/render_benchmarks.py --run handler      # one bench
$ python bench/handler.py --quick                        # a smoke run, printed only
```

{chr(10).join(sections)}"""


# --- command line --------------------------------------------------------------------------


def load(results: Path) -> dict[str, Record]:
    records = {}
    for name in BENCHES:
        path = results / f"{name}.json"
        if not path.exists():
            raise SystemExit(f"{path} is missing: run `python bench/{name}.py --json {path}` (or --run {name})")
        records[name] = json.loads(path.read_text())
    return records


#: The options the page's figures are taken with, where a bench's defaults are a quicker run.
RUN_ARGS: Mapping[str, tuple[str, ...]] = {
    "mypy_plugin": ("--rounds", "3"),
    "pyright_keys": ("--rounds", "3", "--pipelines", "200", "--nested", "20"),
}


def run(names: list[str], results: Path) -> None:
    for name in names or list(BENCHES):
        if name not in BENCHES:
            raise SystemExit(f"unknown bench {name!r}; choose from {', '.join(BENCHES)}")
        print(f"--- bench/{name}.py", flush=True)
        command = [sys.executable, str(ROOT / "bench" / f"{name}.py"), *RUN_ARGS.get(name, ())]
        command += ["--json", str(results / f"{name}.json")]
        subprocess.run(command, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--run", nargs="*", metavar="BENCH", default=None, help="measure first (all if none named)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from its rendering")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of <bench>.json files")
    parser.add_argument("--output", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    if args.run is not None:
        run(args.run, args.results)
    page = render(load(args.results))
    if args.check:
        if not args.output.exists() or args.output.read_text() != page:
            print(f"{args.output} is stale: run python scripts/render_benchmarks.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(page)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
