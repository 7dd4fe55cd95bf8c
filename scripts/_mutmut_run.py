"""One module's mutation run inside mutmut's own process (started by ``scripts/mutants.py``).

mutmut 3 reads its settings from ``[tool.mutmut]``, one set for the whole project; a run
here needs its own per module (which file to mutate, which test files to collect the
per-function test map from), so this sets mutmut's configuration object before its
``run`` starts.  It must not import kumiko_typed: the tests have to import the mutated
copy under ``mutants/src`` that mutmut puts first on ``sys.path``.

    python scripts/_mutmut_run.py SOURCE_FILE TEST_FILE...

After the run it prints each surviving mutant's diff and writes the verdicts to
``mutants/verdicts.json`` ({mutant name: status}).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import mutmut.__main__ as mutmut_main
from mutmut import configuration
from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code

PACKAGE = Path("src/kumiko_typed")
WORKERS = 2  # the machine's cores


def configure(source: str, tests: list[str]) -> None:
    configuration._config = dataclasses.replace(
        configuration.config(),
        source_paths=[PACKAGE],
        resolved_mutated_source_paths=[Path.cwd().resolve() / "mutants" / PACKAGE],
        only_mutate=[source],
        do_not_mutate=[],
        pytest_add_cli_args_test_selection=tests,
        # Each mutant reruns its tests: the slow ones (fuzzing for minutes) stay out, and
        # hypothesis draws the same examples every time, so a verdict does not depend on luck.
        pytest_add_cli_args=["-p", "no:cacheprovider", "-m", "not slow", "--hypothesis-seed=0"],
        use_git_change_detection=False,
    )


def report(source: str) -> None:
    data = SourceFileMutationData(path=Path(source))
    data.load()
    verdicts = {name: status_by_exit_code[code] for name, code in sorted(data.exit_code_by_key.items())}
    Path("mutants/verdicts.json").write_text(json.dumps(verdicts, indent=1, ensure_ascii=False))
    for name, status in verdicts.items():
        if status != "killed":
            print(f"\n# {name}: {status}")
            print(get_diff_for_mutant(name, path=Path(source)))


def main() -> None:
    source, *tests = sys.argv[1:]
    configure(source, tests)
    mutmut_main._run((), WORKERS)  # a failed clean run or stats collection exits non-zero
    report(source)


if __name__ == "__main__":
    main()
