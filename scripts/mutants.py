"""``./dev mutants [MODULE...]``: mutation testing of the guarantee modules with mutmut.

For each module, one mutmut run (``scripts/_mutmut_run.py``) in a fresh ``mutants/``:
mutmut copies the package, rewrites the module so every function can switch to any of its
mutants, runs the module's test files once to record which tests call which function,
then runs each mutant against only the tests that call its function, two at a time
(tests marked slow are left out, hypothesis runs with a fixed seed).  One
throw-away PostgreSQL server serves every run (``KUMIKO_TEST_POSTGRES_URL``): each test
makes its own database on it, so no mutant pays for a server start.

It prints each survivor's diff and, at the end, mutants / killed / survived per module.
docs/testing.md keeps the figures of the last run and why each survivor may stay.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from kumiko_typed.testing.postgres import start_test_postgres

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "src/kumiko_typed"

_OUTBOX_TESTS = [
    "tests/outbox/test_outbox.py",
    "tests/outbox/test_guarantees_outbox.py",
    "tests/outbox/test_poison_rows.py",
    "tests/outbox/test_notify.py",
    "tests/outbox/test_delivery_concurrency.py",
]
_STRUCTURING_TESTS = [
    "tests/pipeline/test_validation.py",
    "tests/pipeline/test_untrusted_input.py",
    "tests/pipeline/test_guarantees_structuring.py",
    "tests/pipeline/test_dispatch.py",
    "tests/pipeline/test_failure_messages.py",
]
_TENANCY_TESTS = [
    "tests/pipeline/test_tenancy.py",
    "tests/pipeline/test_guarantees_tenancy.py",
    "tests/storage/test_storage_steps.py",
]
_WORKFLOW_TESTS = [
    "tests/workflows/test_workflows.py",
    "tests/workflows/test_guarantees_workflows.py",
    "tests/workflows/test_workflow_feed.py",
    "tests/workflows/test_workflow_isolation.py",
    "tests/workflows/test_workflow_waits.py",
    "tests/workflows/test_workflow_scenario.py",
    "tests/workflows/test_run_storage.py",
]

# The guarantee modules (issue 20) and the checks added since (names, private addresses,
# webhook signatures, cron time zones), by path under src/kumiko_typed, and the test files
# whose runs map their functions to tests.
MODULES: dict[str, list[str]] = {
    "_delivery": _OUTBOX_TESTS,
    "_mail": _OUTBOX_TESTS,
    "_outbox": [*_OUTBOX_TESTS, "tests/outbox/test_worker_outages.py", "tests/outbox/test_worker_sides.py"],
    "_structuring": _STRUCTURING_TESTS,
    "_access": _TENANCY_TESTS,
    "_steps/reads": _TENANCY_TESTS,
    "_steps/aggregates": [
        *_TENANCY_TESTS,
        "tests/storage/test_write_path.py",
        "tests/storage/test_rollback_matrix.py",
        "tests/pipeline/test_idempotency.py",
    ],
    "_boot": ["tests/pipeline/test_boot.py", "tests/storage/test_boot_storage.py"],
    "_workflow_engine": _WORKFLOW_TESTS,
    "_workflow_feed": _WORKFLOW_TESTS,
    "_registered_names": ["tests/pipeline/test_registered_names.py"],
    "_private_addresses": ["tests/outbox/test_webhook_private_addresses.py"],
    "_webhook_signature": ["tests/outbox/test_webhook_signatures.py"],
    "_triggers": [
        "tests/workflows/test_cron_timezones.py",
        "tests/workflows/test_cron_backfill.py",
        "tests/workflows/test_cron_catch_up.py",
    ],
}


def module_key(arg: str) -> str:
    """``delivery``, ``_delivery``, ``kumiko_typed._steps.reads`` or a path: the MODULES key."""
    key = arg.removeprefix(f"{PACKAGE}/").removesuffix(".py").removeprefix("kumiko_typed.").replace(".", "/")
    if key not in MODULES and f"_{key}" in MODULES:
        key = f"_{key}"
    if key not in MODULES:
        raise SystemExit(f"unknown module {arg!r}; the guarantee modules are: {', '.join(MODULES)}")
    return key


def run_module(key: str, env: dict[str, str]) -> Counter[str]:
    source = f"{PACKAGE}/{key}.py"
    if not (ROOT / source).is_file():
        raise SystemExit(f"{source} does not exist: update MODULES in {Path(__file__).name}")
    shutil.rmtree(ROOT / "mutants", ignore_errors=True)  # a run's stats and verdicts are its own
    print(f"=== {source}  (tests: {' '.join(MODULES[key])})", flush=True)
    command = [sys.executable, "scripts/_mutmut_run.py", source, *MODULES[key]]
    done = subprocess.run(command, cwd=ROOT, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"mutmut failed on {source} (exit {done.returncode})")
    verdicts: dict[str, str] = json.loads((ROOT / "mutants/verdicts.json").read_text())
    return Counter(verdicts.values())


def main(args: list[str]) -> None:
    keys = [module_key(arg) for arg in args] or list(MODULES)
    server = start_test_postgres()
    if server is None:
        raise SystemExit("mutation runs need PostgreSQL: install postgresql-15 or set KUMIKO_TEST_POSTGRES_URL")
    env = {**os.environ, "KUMIKO_TEST_POSTGRES_URL": server.url, "KUMIKO_REQUIRE_POSTGRES": "1"}
    rows = []
    try:
        for key in keys:
            started = time.monotonic()
            counts = run_module(key, env)
            rows.append((key, counts, time.monotonic() - started))
    finally:
        server.stop()
    print(f"\n{'module':<20}{'mutants':>8}{'killed':>8}{'survived':>9}{'other':>7}{'kill ratio':>11}{'minutes':>9}")
    for key, counts, seconds in rows:
        total, killed, survived = sum(counts.values()), counts["killed"], counts["survived"]
        ratio = f"{killed / total:.1%}" if total else "-"
        other = total - killed - survived
        print(f"{key:<20}{total:>8}{killed:>8}{survived:>9}{other:>7}{ratio:>11}{seconds / 60:>9.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
