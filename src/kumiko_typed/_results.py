"""Handler results: ``Ok[D]`` carries data, ``Failure`` carries a code the caller can act on.

A ``Failure`` is a value, not an exception: returning one rolls the handler's
transaction back while the caller still gets a structured answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Generic, Literal, TypeVar

import attrs

D = TypeVar("D", covariant=True)
T = TypeVar("T")

__all__ = ["HTTP_STATUS", "Details", "Failure", "FailureCode", "Ok", "WriteResult", "fail", "ok"]

#: Every failure code the framework itself produces (an application may add its own).
FailureCode = Literal[
    "validation_error",
    "unauthenticated",
    "access_denied",
    "not_found",
    "version_conflict",
    "unique_violation",
    "idempotency_conflict",
    "unprocessable",
    "unstorable_state",
    "stranded",
    "cancelled",
    "status_conflict",
    "internal_error",
    "unavailable",
]

#: The framework's failure codes and the HTTP status a web layer should answer with.
HTTP_STATUS: Final[Mapping[FailureCode, int]] = {
    "validation_error": 400,
    # A request without a user (the HTTP adapter's user dependency found none).
    "unauthenticated": 401,
    "access_denied": 403,
    "not_found": 404,
    "version_conflict": 409,
    "unique_violation": 409,
    # An idempotency key used again with another payload.
    "idempotency_conflict": 409,
    "unprocessable": 422,
    # A workflow run whose state or payload cannot be stored (a run's ``error``).
    "unstorable_state": 422,
    # A suspended run the deployed definition of its workflow cannot resume (a run's
    # ``error`` while it stays suspended, intact; docs/workflows.md).
    "stranded": 409,
    # A run stopped by ``app.cancel_run`` (a run's ``error``, with the reason).
    "cancelled": 409,
    # A run or outbox row not in the status an operation needs: the result of a run that
    # has not completed, cancelling a finished run, requeueing a row that is not dead.
    "status_conflict": 409,
    "internal_error": 500,
    "unavailable": 503,
}


#: The same, looked up by any text (an application's own code is no ``FailureCode``).
_STATUS_OF: Final[Mapping[str, int]] = {code: status for code, status in HTTP_STATUS.items()}

Details = Sequence[Mapping[str, object]] | Mapping[str, object] | None


@attrs.frozen
class Ok(Generic[D]):
    """A successful result; ``data`` is what the handler's ``return_`` produced."""

    data: D


@attrs.frozen
class Failure:
    """A failed result.  ``code`` is one of :data:`HTTP_STATUS`'s keys or your own."""

    code: str
    message: str
    details: Details = None

    @property
    def http_status(self) -> int:
        """The HTTP status for ``code``; an application-specific code maps to 422."""
        return _STATUS_OF.get(self.code, 422)


WriteResult = Ok[T] | Failure


def ok(data: T) -> Ok[T]:
    """Wrap ``data`` in an :class:`Ok`."""
    return Ok(data)


def fail(code: str, message: str, details: Details = None) -> Failure:
    """Build a :class:`Failure`; returning it from a step rolls the transaction back."""
    return Failure(code, message, details)


def wrong_id(field: str, value: object) -> Failure:
    """A public call's id argument that is no UUID (typed, but text from a URL gets through
    a caller without a type checker): a ``validation_error`` naming the argument and the
    type given, never the value, which is the caller's arbitrary text."""
    message = f"{field} must be a UUID, not {type(value).__name__}"
    return fail("validation_error", message, [{"path": field, "message": message}])
