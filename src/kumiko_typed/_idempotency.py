"""Idempotency keys: a repeated dispatch returns the first one's result without running.

A keyed dispatch first *claims* its key — one upsert that inserts the key, or takes over
an expired one, and returns nothing when a live key exists.  The claim is the first
statement of the transaction, before the pipeline's first read: a concurrent
dispatch with the same key waits on the claimed row (PostgreSQL's unique index; SQLite's
``BEGIN IMMEDIATE`` serializes writers anyway) and then finds the committed result.  The
result is written to the claimed row in the handler's own transaction, so a result is
stored exactly when the handler's writes commit.

Stored: ``Ok`` results and the handler's business Failures (its writes rolled back, the
key kept).  Never stored: ``internal_error``, ``unavailable`` and ``version_conflict`` — the
transaction rolls back with the claim, and a retry with the same key runs again.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Engine, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from ._limits import json_problems
from ._results import Failure, Ok, fail
from ._retention import cutoff, delete_in_batches, purge_statement
from ._serialization import Codec, StateError
from ._tables import idempotency_keys as keys

__all__ = ["MAX_KEY_LENGTH", "NOT_STORED", "Keyed", "fingerprint", "key_problem", "purge_expired"]

#: Failures that say nothing about the request itself: a retry may well succeed.  A
#: ``version_conflict`` is a lost race (the aggregate moved on since it was read): stored,
#: it answered every repeat of the key with the conflict, so the retry it asks for could
#: never go through under the key that makes retrying safe.
NOT_STORED: Final = frozenset({"internal_error", "unavailable", "version_conflict"})
MAX_KEY_LENGTH: Final = 255

_T = keys.c
_ROW: Final = (
    _T.tenant_id == bindparam("b_tenant"),
    _T.handler == bindparam("b_handler"),
    _T.key == bindparam("b_key"),
)
_READ: Final = select(_T.fingerprint, _T.result).where(*_ROW)
_RECORD: Final = update(keys).where(*_ROW).values(result=bindparam("b_result"))
# A key holding what this release never stores, claimed again: the claim's row lock is held.
_RECLAIM: Final = (
    update(keys).where(*_ROW).values(fingerprint=bindparam("b_fingerprint"), result=None, created_at=bindparam("b_now"))
)
# Keys claimed at or before the cutoff have expired: a claim takes them over, a purge deletes them.
_PURGE: Final = purge_statement(keys, _T.created_at <= bindparam("b_cutoff"))


def purge_expired(engine: Engine, before: datetime, batch: int) -> int:
    """Delete the keys claimed at or before ``before``, ``batch`` rows per transaction.

    Safe beside dispatches: a key taken over meanwhile has a new ``created_at``, which the
    delete's own condition sees again (PostgreSQL re-checks an updated row; SQLite runs
    one writer at a time), so a live key is never deleted."""
    return delete_in_batches(engine, _PURGE, {"b_cutoff": before}, batch)


def _claim_statement(dialect: Any) -> Any:
    """Insert the key, or take over an expired one; returns a row only if claimed."""
    stmt = dialect.insert(keys)
    return stmt.on_conflict_do_update(
        index_elements=[_T.tenant_id, _T.handler, _T.key],
        set_={"fingerprint": stmt.excluded.fingerprint, "result": None, "created_at": stmt.excluded.created_at},
        where=_T.created_at <= bindparam("b_cutoff"),
    ).returning(_T.key)


_CLAIM: Final = {"postgresql": _claim_statement(postgresql), "sqlite": _claim_statement(sqlite)}


def key_problem(key: object) -> str | None:
    """Why ``key`` cannot be an idempotency key (any printable string of 1 to 255 characters)."""
    if not isinstance(key, str):
        return "an idempotency key must be a string"
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        return f"an idempotency key must be 1 to {MAX_KEY_LENGTH} printable characters"
    return None


def fingerprint(codec: Codec, payload: object) -> str:
    """The payload's hash; raises ``StateError`` for a payload the codec cannot encode."""
    try:
        encoded = json.dumps(codec.encode(payload, ordered=False), sort_keys=True, separators=(",", ":"))
    except ValueError as exc:  # an integer with more digits than Python writes
        raise StateError(str(exc)) from None
    return hashlib.sha256(encoded.encode()).hexdigest()


def _not_stored(result: object) -> bool:
    """Whether ``result`` is a Failure this release does not store (an earlier one did)."""
    failure = result.get("failure") if isinstance(result, dict) else None
    return isinstance(failure, list) and bool(failure) and failure[0] in NOT_STORED


class Keyed:
    """One keyed dispatch: the row's parameters, claimed and recorded in one session."""

    def __init__(self, codec: Codec, tenant: object, handler: str, key: str, payload_hash: str) -> None:
        self.codec = codec
        self.row = {"b_tenant": tenant, "b_handler": handler, "b_key": key}
        self.handler = handler
        self.payload_hash = payload_hash

    def claim(self, session: Session, now: datetime, retention: timedelta) -> Ok[object] | Failure | None:
        """Claim the key (``None``: run the handler) or answer with what it stored."""
        params = {
            "tenant_id": self.row["b_tenant"],
            "handler": self.handler,
            "key": self.row["b_key"],
            "fingerprint": self.payload_hash,
            "result": None,
            "created_at": now,
            "b_cutoff": cutoff(now, retention),
        }
        claim = _CLAIM[session.get_bind().dialect.name]
        if session.execute(claim, params).first() is not None:
            return None
        stored = session.execute(_READ, self.row).one()
        if _not_stored(stored.result):
            # An earlier release stored a version_conflict: the repeat it asks for runs, as
            # under this one, whatever version it now carries.  The claim statement locked
            # the row (PostgreSQL's ON CONFLICT, SQLite's write lock), so one repeat runs.
            session.execute(_RECLAIM, {**self.row, "b_fingerprint": self.payload_hash, "b_now": now})
            return None
        if stored.fingerprint != self.payload_hash:
            return fail(
                "idempotency_conflict",
                f"idempotency key {self.row['b_key']!r} of handler {self.handler} was used with another payload",
                {"handler": self.handler, "key": self.row["b_key"]},
            )
        return self._decode(stored.result)

    def record(self, session: Session, result: Ok[object] | Failure) -> None:
        """Store ``result`` on the claimed row; raises ``StateError`` if it cannot be encoded,
        or holds text or a number that either database's JSON refuses (a NUL, a lone
        surrogate): SQLite would store it and PostgreSQL not, so neither does."""
        if isinstance(result, Ok):
            value: dict[str, Any] = {"ok": self.codec.encode(result.data)}
        else:
            value = {"failure": [result.code, result.message, self.codec.encode(result.details)]}
        for _, problem, _ in json_problems(value, max_depth=None):  # its path would quote data
            raise StateError(f"a value in it {problem}")
        session.execute(_RECORD, {**self.row, "b_result": value})

    def _decode(self, stored: dict[str, Any]) -> Ok[object] | Failure:
        try:
            if "ok" in stored:
                return Ok(self.codec.decode(stored["ok"]))
            code, message, details = stored["failure"]
            return Failure(code, message, self.codec.decode(details))
        except (StateError, LookupError, TypeError, ValueError) as exc:  # a class since unregistered
            return fail(
                "unstorable_state",
                f"the stored result of idempotency key {self.row['b_key']!r} of handler {self.handler} "
                f"cannot be read: {exc}",
            )
