"""The refusal of a value that only an event loop could use: a resolver, ``return_``,
a projector or an upcaster that gave an awaitable (a coroutine, an ``asyncio.Future``
or ``Task``, any object with ``__await__``, a ``types.coroutine`` generator) or an async
generator.  Steps run synchronously inside the transaction, so such a value would be
stored or used as the step's value while the work it stands for never runs.

Boot refuses an ``async def`` given as a resolver; a plain function (a lambda) calling
one, or handing on a future, only shows at run time, where every resolver's value passes
:func:`checked`.  A plain generator is a synchronous iterator (``over=lambda c: (x for x
in ...)`` is how a loop reads items lazily), not a mistake: it passes.

Whether a value is one is a property of its type (``await`` looks ``__await__`` up on
the type), except for a generator (a flag of its code): a value of a type seen to be no
awaitable passes with one set lookup (:data:`PLAIN`); a fused ``compute`` (the hot path,
``_steps._block``) tests first by identity against the type its line last let through, what
it paid when only coroutines were refused.
"""

from __future__ import annotations

import contextlib
import inspect
from types import AsyncGeneratorType, CoroutineType, GeneratorType
from typing import Any, Final, TypeVar
from uuid import UUID

from ._errors import StepRefused

__all__ = ["PLAIN", "awaited", "checked", "discard", "is_awaitable"]

T = TypeVar("T")

#: Types whose values are no awaitable and no async generator, as :func:`checked` finds
#: them (the common ones from the start).  Bounded (:data:`_PLAIN_MAX`): a program that
#: makes classes per call does not grow it forever; a type left out is checked in full.
PLAIN: Final[set[type[Any]]] = {type(None), bool, int, float, str, bytes, dict, list, tuple, set, frozenset, UUID}
_PLAIN_MAX: Final = 4096


def checked(value: T, argument: str) -> T:
    """``value``, or the refusal of an awaitable or async generator given as
    ``argument`` (``fn=``, ``the projector ...``).  Callers test :data:`PLAIN` first."""
    if is_awaitable(value):
        raise awaited(value, argument)
    kind = type(value)
    if kind is not GeneratorType and len(PLAIN) < _PLAIN_MAX:  # a generator's flag is its own
        PLAIN.add(kind)
    return value


def is_awaitable(value: object) -> bool:
    """Whether ``value`` is an awaitable (``inspect.isawaitable``: a coroutine, a
    ``types.coroutine`` generator, anything with ``__await__``) or an async generator."""
    return inspect.isawaitable(value) or type(value) is AsyncGeneratorType


def awaited(value: object, argument: str) -> StepRefused:
    """The refusal of an awaitable (or async generator) ``argument`` returned.  The object
    is closed or cancelled (:func:`discard`), so Python does not warn later that a
    coroutine was never awaited; the step fails, and the run rolls back."""
    discard(value)
    return StepRefused(
        f"{argument} returned {_what(value)}: steps run synchronously inside the transaction; call the async "
        "function outside the pipeline or make it synchronous"
    )


def _what(value: object) -> str:
    kind = type(value)
    if kind is CoroutineType:
        return "a coroutine"
    if kind is AsyncGeneratorType:
        return "an async generator"
    if kind is GeneratorType:
        return "a generator-based coroutine (types.coroutine)"
    return f"an awaitable ({kind.__qualname__})"  # a class's name: the program's, never data


def discard(value: object) -> None:
    """Let go of an awaitable nothing will await: a coroutine is closed (else Python warns
    it was never awaited), a future cancelled (what its loop reads as given up).  An async
    generator, or a generator-based coroutine, never started holds nothing to close; any
    other awaitable's ``__await__`` was never called."""
    kind = type(value)
    if kind is CoroutineType or kind is GeneratorType:
        value.close()  # type: ignore[attr-defined]
    elif getattr(kind, "_asyncio_future_blocking", None) is not None:  # asyncio.isfuture's test
        # A future of a closed loop cannot schedule its callbacks: what is refused is the
        # step, not this cancellation.
        with contextlib.suppress(RuntimeError):
            value.cancel()  # type: ignore[attr-defined]
