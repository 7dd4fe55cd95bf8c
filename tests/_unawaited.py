"""A guard for tests of refused awaitables: nothing a step was given may be left for
Python to warn about later (a coroutine never awaited, an unclosed resource)."""

from __future__ import annotations

import gc
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def no_unawaited_coroutine() -> Iterator[None]:
    """Warnings as errors, and no RuntimeWarning of a coroutine never awaited: Python
    warns when such a coroutine is finalised, where a warning turned error can only reach
    ``sys.unraisablehook``, so that hook collects what it is given."""
    unraisable: list[Any] = []
    hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert [u.exc_value for u in unraisable] == []
