"""The transactional outbox, worker side: workers claim due rows, deliver, and record
the outcome.  The steps that insert the rows are in :mod:`kumiko_typed._steps.outbox`.

A worker delivers the rows of a batch concurrently, at most ``delivery_concurrency``
(an App setting) at a time: deliveries wait on their peers, not on this machine.

Claiming: on PostgreSQL a worker locks a small batch with ``FOR UPDATE SKIP LOCKED``
and keeps the lock while delivering, so any number of workers on any number of
hosts share the table, and a worker that dies releases its batch at once (its
transaction rolls back) for another to redo — with the same idempotency keys.
SQLite has one writer at a time, so a worker must not hold it during HTTP calls: it
claims a batch by moving the rows' next attempt a lease ahead (``CLAIM_LEASE``), in one
short transaction, then delivers each row outside any transaction and records each
outcome in a short transaction of its own.  Another worker's pass skips leased rows; a
worker that dies leaves its batch to be redone when the lease runs out.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import attrs
from sqlalchemy import Engine, Row, bindparam, select, update
from sqlalchemy.orm import Session, sessionmaker

from ._delivery import SecretBook, SecretResolver, deliver_webhook
from ._errors import DeliveryError
from ._mail import MailMessage, MailTransport
from ._observe import failed, span
from ._outbox_types import OutboxItem, RetryPolicy, target_of
from ._poison import storable_text
from ._tables import outbox

if TYPE_CHECKING:
    import httpx

__all__ = [
    "BATCH",
    "CLAIM_LEASE",
    "Deliverer",
    "PassCounts",
    "claim_size",
    "deliver_due",
    "item_of",
    "items",
    "mail_message",
]

logger = logging.getLogger("kumiko_typed")

BATCH = 10
#: Rows claimed per delivery slot: a batch's last wave and the claim of the next leave
#: slots idle, so a batch several waves long keeps the pool busy most of the time.
ROWS_PER_SLOT = 5
#: How long a SQLite worker's claim keeps other workers off a batch: far more than
#: delivering it takes (each row at most the HTTP client's 10 s timeout, several at once).
CLAIM_LEASE = timedelta(minutes=5)


@attrs.define
class PassCounts:
    sent: int = 0
    retried: int = 0
    dead: int = 0


class Deliverer:
    """Delivers rows; knows the transports, the HTTP client, the secrets, and how many
    deliveries of one batch may be under way at once (``concurrency``)."""

    def __init__(
        self, mail: MailTransport, http: Callable[[], httpx.Client], secrets: SecretResolver, concurrency: int = 1
    ) -> None:
        self.mail = mail
        self.http = http
        self.secrets = SecretBook(secrets)
        self.concurrency = concurrency

    def deliver(self, row: Row[Any]) -> None:
        if row.kind == "webhook":
            deliver_webhook(row.id, row.message, self.http(), self.secrets)
        elif row.kind == "mail":
            self.mail.send(mail_message(row.id, row.message), self.secrets)
        else:
            raise DeliveryError(f"unknown outbox kind {row.kind!r}", permanent=True)


def mail_message(item_id: uuid.UUID, message: Mapping[str, Any]) -> MailMessage:
    """The typed mail a transport gets, from the row ``send_mail`` stored."""
    sender = message.get("sender")
    return MailMessage(
        id=item_id,
        to=tuple(str(t) for t in message["to"]),
        subject=str(message["subject"]),
        body=str(message["body"]),
        sender=None if sender is None else str(sender),
    )


def _outcome(row: Row[Any], error: DeliveryError | None, now: datetime) -> dict[str, Any]:
    attempts = row.attempts + 1
    if error is None:
        return {"status": "sent", "attempts": attempts, "sent_at": now, "next_attempt_at": None, "last_error": None}
    text = storable_text(str(error))
    if error.permanent or attempts >= row.max_attempts:
        return {"status": "dead", "attempts": attempts, "next_attempt_at": None, "last_error": text}
    policy = RetryPolicy(row.max_attempts, row.backoff, timedelta(seconds=row.base_delay_seconds))
    return {"attempts": attempts, "next_attempt_at": now + policy.delay(attempts), "last_error": text}


def _settled(row: Row[Any], error: DeliveryError | None, now: datetime) -> dict[str, Any]:
    """The outcome of one attempt.  One that cannot be worked out (a retry scheduled past
    the end of the calendar, a damaged row) sets the row aside as ``dead`` with the
    reason, instead of stopping the pass for every other row; its text is storable."""
    try:
        return _outcome(row, error, now)
    except Exception as exc:
        logger.error("outbox row %s: its next attempt cannot be scheduled; set aside as dead", row.id, exc_info=exc)
        attempt = "" if error is None else f"{error}; "
        reason = f"{attempt}the next attempt cannot be scheduled: {type(exc).__name__}: {exc}"
        return {
            "status": "dead",
            "attempts": row.attempts + 1,
            "next_attempt_at": None,
            "last_error": storable_text(reason),
        }


def _attempt(deliverer: Deliverer, row: Row[Any]) -> DeliveryError | None:
    """Deliver ``row``; the error to store, with every secret value redacted from it."""
    with span("kumiko.delivery") as current:
        if current is not None:
            current.set_attributes(
                {"kumiko.outbox.id": str(row.id), "kumiko.outbox.kind": row.kind, "kumiko.tenant": str(row.tenant_id)}
            )
        try:
            deliverer.deliver(row)
        except DeliveryError as exc:
            error = DeliveryError(deliverer.secrets.redact(str(exc)), permanent=exc.permanent)
        except Exception as exc:  # a transport bug must not kill the worker; record it
            error = DeliveryError(deliverer.secrets.redact(f"{type(exc).__name__}: {exc}"))
        else:
            return None
        failed(current, str(error))
        return error


def _attempts(
    deliverer: Deliverer, rows: Sequence[Row[Any]], pool: ThreadPoolExecutor | None
) -> Iterator[tuple[Row[Any], DeliveryError | None]]:
    """Deliver ``rows``, at most ``deliverer.concurrency`` at a time (``pool``, if the
    concurrency is above 1): each row with its outcome, as the deliveries finish.  The
    work is waiting on peers (HTTP, SMTP), so a few threads let one worker keep several
    deliveries in flight."""
    if pool is None or len(rows) == 1:
        yield from ((row, _attempt(deliverer, row)) for row in rows)
        return
    futures = {pool.submit(_attempt, deliverer, row): row for row in rows}
    for future in as_completed(futures):
        yield futures[future], future.result()  # _attempt turns every error into its value


def _count(counts: PassCounts, row: Row[Any], change: Mapping[str, Any]) -> None:
    status = change.get("status")
    if status == "sent":
        counts.sent += 1
    elif status == "dead":
        counts.dead += 1
        logger.warning(
            "outbox row %s (%s) is dead after %s attempt(s): %s",
            row.id,
            row.kind,
            change["attempts"],
            change["last_error"],
            extra={"kumiko_outbox_id": str(row.id), "kumiko_kind": row.kind, "kumiko_attempts": change["attempts"]},
        )
    else:
        counts.retried += 1


def claim_size(concurrency: int) -> int:
    """The rows one claim takes: ``ROWS_PER_SLOT`` per delivery slot, at least ``BATCH``.
    A worker that dies leaves at most that many rows to be delivered again."""
    return max(BATCH, ROWS_PER_SLOT * concurrency)


def _due(now: datetime) -> Any:
    return (
        select(outbox)
        .where(outbox.c.status == "pending", outbox.c.next_attempt_at <= now)
        .order_by(outbox.c.next_attempt_at, outbox.c.created_at)
    )


#: The rows of a batch delivered on their first try or a later one, marked at once: the
#: same columns ``_outcome`` gives a success (the rows are locked, so ``attempts + 1``
#: is the count it would compute).
_MARK_SENT: Final = (
    update(outbox)
    .where(outbox.c.id.in_(bindparam("ids", expanding=True)))
    .values(
        status="sent", attempts=outbox.c.attempts + 1, sent_at=bindparam("now"), next_attempt_at=None, last_error=None
    )
)
_SET_OUTCOME: Final = update(outbox).where(outbox.c.id == bindparam("b_id"))


def deliver_due(engine: Engine, deliverer: Deliverer, clock: Callable[[], datetime]) -> PassCounts:
    """One pass: deliver every row due now (rows rescheduled into the future wait).

    The pass's delivery threads (if its concurrency is above 1) serve all its batches; a
    worker talks to the database through Core connections, no ORM session."""
    counts = PassCounts()
    width = deliverer.concurrency
    pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix="kumiko-delivery") if width > 1 else None
    try:
        batch = _deliver_postgres if engine.dialect.name == "postgresql" else _deliver_sqlite
        while batch(engine, deliverer, clock, pool, counts):
            pass
    finally:
        if pool is not None:
            pool.shutdown()
    return counts


def _deliver_postgres(
    engine: Engine,
    deliverer: Deliverer,
    clock: Callable[[], datetime],
    pool: ThreadPoolExecutor | None,
    counts: PassCounts,
) -> bool:
    """Claim a batch, deliver it and record the outcomes, in one transaction: the rows stay
    locked (SKIP LOCKED) until their outcomes commit.  The rows sent are marked by one
    statement; each failure gets its own.  ``False``: nothing was due."""
    with engine.begin() as conn:
        claim = _due(clock()).limit(claim_size(deliverer.concurrency))
        rows = conn.execute(claim.with_for_update(skip_locked=True)).all()
        sent: list[Any] = []
        for row, error in _attempts(deliverer, rows, pool):
            if error is None:
                sent.append(row.id)
                continue
            change = _settled(row, error, clock())
            conn.execute(_SET_OUTCOME, {"b_id": row.id, **change})
            _count(counts, row, change)
        if sent:
            conn.execute(_MARK_SENT, {"ids": sent, "now": clock()})
            counts.sent += len(sent)
    return bool(rows)


def _deliver_sqlite(
    engine: Engine,
    deliverer: Deliverer,
    clock: Callable[[], datetime],
    pool: ThreadPoolExecutor | None,
    counts: PassCounts,
) -> bool:
    """Claim a batch by moving its next attempt a lease ahead (one short transaction),
    then deliver outside the write lock and record each outcome alone, as it comes: a
    worker that dies re-delivers, after the lease, only what it had not recorded."""
    now = clock()
    with engine.begin() as conn:
        rows = conn.execute(_due(now).limit(claim_size(deliverer.concurrency))).all()
        if not rows:
            return False
        ids = [row.id for row in rows]
        conn.execute(update(outbox).where(outbox.c.id.in_(ids)).values(next_attempt_at=now + CLAIM_LEASE))
    for row, error in _attempts(deliverer, rows, pool):
        change = _settled(row, error, clock())
        with engine.begin() as conn:
            conn.execute(_SET_OUTCOME, {"b_id": row.id, **change})
        _count(counts, row, change)
    return True


def items(sessions: sessionmaker[Session]) -> list[OutboxItem]:
    with sessions() as session:
        rows = session.execute(select(outbox).order_by(outbox.c.created_at, outbox.c.id)).all()
    return [item_of(r) for r in rows]


def item_of(r: Row[Any]) -> OutboxItem:
    """The public view of one outbox row."""
    return OutboxItem(r.id, r.kind, r.status, r.attempts, r.last_error, r.next_attempt_at, target_of(r.kind, r.message))
