"""The package's names as checkers see them, whatever the run time imports when: a
``__getattr__`` they saw would make any name valid (it is hidden from them), and
``import *`` gives exactly ``__all__`` (a literal list, the only kind mypy reads)."""

from __future__ import annotations

import kumiko_typed
import kumiko_typed.testing
from kumiko_typed import *  # pyright: ignore[reportWildcardImportFromLibrary]  (strict mode refuses it)
from kumiko_typed import Nope  # E: attr-defined # PE: reportAttributeAccessIssue
from kumiko_typed.testing import FakeClok  # E: attr-defined # PE: reportAttributeAccessIssue

reveal_type(fail("not_found", "no such order"))  # R: kumiko_typed._results.Failure # PR: Failure
reveal_type(kumiko_typed.__version__)  # R: str # PR: str
reveal_type(ok(1))  # R: kumiko_typed._results.Ok[int] # PR: Ok[int]
reveal_type(kumiko_typed.Feature("shop"))  # R: kumiko_typed._feature.Feature[Never] # PR: Feature[Never]
reveal_type(kumiko_typed.testing.FakeClock().now)  # R: datetime.datetime # PR: datetime
reveal_type(kumiko_typed.__all__)  # R: list[str] # PR: list[str]
kumiko_typed.Nope  # E: attr-defined # PE: reportAttributeAccessIssue
kumiko_typed.testing.Nope  # E: attr-defined # PE: reportAttributeAccessIssue


def started(app: App, clock: kumiko_typed.testing.FakeClock) -> None:
    reveal_type(app)  # R: kumiko_typed._app.App # PR: App
    reveal_type(clock)  # R: kumiko_typed.testing._clock.FakeClock # PR: FakeClock
