"""Traces of what the framework does, through OpenTelemetry's API when it is installed
(the ``otel`` extra): a span per dispatch, ``call_feature``, workflow segment and outbox
delivery, and — while that span is recorded — one per step, with its kind, name, path,
handler and tenant; a Failure sets the span's status to an error with its code.

Without ``opentelemetry-api``, or with it but no SDK configured (its spans then record
nothing), the runtime takes its untraced path: no span objects per step, no cost beyond
one check per program run.  Only the API is used, never the SDK: the application decides
where spans go.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ._errors import StepCrash, Suspend
from ._results import Failure

if TYPE_CHECKING:
    from ._interpreter import Run
    from ._steps import Result, Resume, Step

try:
    from opentelemetry import trace as _otel
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # the otel extra is not installed
    _otel = None  # type: ignore[assignment]

__all__ = ["Trace", "failed", "outcome", "span", "tracing"]

_NAME = "kumiko_typed"
#: The API's providers while no SDK is set up (the proxy delegates once one is set).
_NO_SDK: tuple[type[Any], ...] = () if _otel is None else (_otel.ProxyTracerProvider, _otel.NoOpTracerProvider)


#: The SDK's tracer once a provider is configured (the API lets one be set only once).
_configured: list[Any] = []


#: The variable naming a provider for the API to load (``get_tracer_provider``), as
#: ``os.environ`` keeps it: testing the environment itself encodes the name on every call.
_PROVIDER_VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"
_ENVIRON: Any = getattr(os.environ, "_data", os.environ)
_ENVIRON_KEY: Any = os.environ.encodekey(_PROVIDER_VARIABLE) if _ENVIRON is not os.environ else _PROVIDER_VARIABLE


def _tracer() -> Any:
    """The tracer, or ``None`` while no SDK provider is configured: the API's own
    providers hand out spans that record nothing, and making one (with its context
    switch) was a fifth of a dispatch that sends no SQL.

    Until a provider is set (``set_tracer_provider``) or named in the environment, the
    API answers its proxy: that is told without calling it, which tests the environment
    (a microsecond per run)."""
    if _configured:
        return _configured[0]
    if _otel is None or (getattr(_otel, "_TRACER_PROVIDER", True) is None and _ENVIRON_KEY not in _ENVIRON):
        return None
    provider = _otel.get_tracer_provider()
    if isinstance(provider, _NO_SDK):
        return None
    _configured.append(provider.get_tracer(_NAME))
    return _configured[0]


def tracing() -> bool:
    """Whether spans are recorded at all (else a program run skips :func:`span`)."""
    return _tracer() is not None


def _fail(current: Any, outcome: object) -> None:
    if isinstance(outcome, Failure):
        current.set_status(Status(StatusCode.ERROR, outcome.code))
        current.set_attribute("kumiko.failure.code", outcome.code)


@contextlib.contextmanager
def span(name: str) -> Iterator[Any]:
    """A span around one unit of work: ``None`` inside when nothing records spans, so
    the caller builds its attributes (``set_attributes``) only for a span that keeps
    them; the caller hands its outcome to :func:`outcome`."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    with (
        tracer.start_as_current_span(name, record_exception=False, set_status_on_exception=False) as current,
        _raised(current),
    ):
        yield current if current.is_recording() else None


@contextlib.contextmanager
def _raised(current: Any) -> Iterator[None]:
    """An exception through ``current`` sets its status to an error named by the
    exception's class (a step's crash: by its cause's), as the Failure's message names
    it.  Not the SDK's own recording: an exception's text (a database error quotes the
    SQL and its parameters, the payload's values) would go to the tracing backend; the
    Failure's error id names it in the log.  A run suspending is no error."""
    try:
        yield
    except Suspend:
        raise
    except Exception as exc:
        cause = exc.cause if isinstance(exc, StepCrash) else exc
        current.set_status(Status(StatusCode.ERROR, type(cause).__name__))
        raise


def failed(current: Any, reason: str) -> None:
    """Mark ``current`` (from :func:`span`) as failed for ``reason``."""
    if current is not None:
        current.set_status(Status(StatusCode.ERROR, reason))


def outcome(current: Any, result: object) -> None:
    """Mark ``current`` (from :func:`span`) with a Failure's code as its error status."""
    if current is not None:
        _fail(current, result)


class Trace:
    """Per-step spans of one recorded program run: the attributes every step span
    carries, and the path of the block being run (``3/on_true/``)."""

    __slots__ = ("attributes", "prefix")

    def __init__(self, attributes: Mapping[str, str]) -> None:
        self.attributes = dict(attributes)
        self.prefix = ""

    def _span(self, step: Step, index: int) -> Any:
        attributes = {
            **self.attributes,
            "kumiko.step.kind": step.kind,
            "kumiko.step.path": f"{self.prefix}{index}",
        }
        if step.step_name is not None:
            attributes["kumiko.step.name"] = step.step_name
        return _tracer().start_as_current_span(
            step.describe(), attributes=attributes, record_exception=False, set_status_on_exception=False
        )

    def step(self, step: Step, index: int, run: Run, at: Resume | None = None) -> Result:
        """``step.execute(run)`` in a span; the steps of its sub-pipelines get paths
        below it.  ``at``: a resumed run goes on inside the step (``step.resume``), in
        the same span and under the same path as a fresh run."""
        outer = self.prefix
        with self._span(step, index) as current, _raised(current):
            self.prefix = f"{outer}{index}/"
            try:
                result = step.execute(run) if at is None else step.resume(run, at)
            finally:
                self.prefix = outer
            _fail(current, result)
            return result

    def enter(self, label: str) -> str:
        """Enter a sub-pipeline (``on_true``, ``do/#2``): the path to restore after it."""
        outer = self.prefix
        self.prefix = f"{outer}{label}/"
        return outer
