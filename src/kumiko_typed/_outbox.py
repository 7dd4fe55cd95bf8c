"""The transactional outbox, worker side: workers claim due rows, deliver, and record
the outcome.  The steps that insert the rows are in :mod:`kumiko_typed._steps.outbox`.

A worker delivers the rows of a batch concurrently, at most ``delivery_concurrency``
(an App setting) at a time: deliveries wait on their peers, not on this machine.

Claiming, the same on both databases: a worker takes a batch of due rows in one short
transaction (on PostgreSQL with ``FOR UPDATE SKIP LOCKED``, so workers never wait for
each other) and moves their next attempt a lease ahead (``CLAIM_LEASE``): another
worker's pass skips leased rows.  It delivers outside any transaction — no lock and no
open transaction waits on a peer, which on PostgreSQL would hold back the event feed
(it reads only below the oldest running transaction) — and records the outcomes in
short transactions, each only on rows still under this claim's lease.  A worker that
dies leaves its batch to be redone, with the same idempotency keys, when the lease runs
out; a row not started within ``START_WITHIN`` of the claim is handed back instead, so
every delivery starts with at least half the lease ahead of it.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import attrs
from sqlalchemy import Connection, Engine, Row, bindparam, or_, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from ._delivery import RETRY_AFTER_MAX, SecretBook, SecretResolver, deliver_webhook
from ._errors import DeliveryError
from ._mail import MailMessage, MailTransport
from ._observe import failed, span
from ._outbox_types import OutboxItem, RetryPolicy, target_of
from ._pages import checked_cursor, checked_limit
from ._poison import one_line, storable_text
from ._read_only import reading
from ._status_filter import chosen_statuses
from ._tables import outbox

if TYPE_CHECKING:
    import httpx

__all__ = [
    "BATCH",
    "CLAIM_LEASE",
    "ERROR_MAX",
    "RECORD_EVERY",
    "START_WITHIN",
    "WEBHOOK_TIMEOUT",
    "WEBHOOK_TIMEOUT_MAX",
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
#: How long a claim keeps other workers off a batch: far more than delivering a row takes
#: (at most ``webhook_timeout``), and when a worker dies, its batch waits this long.
CLAIM_LEASE = timedelta(minutes=5)
#: A claimed row not started by then is handed back: a delivery starts with at least the
#: other half of the lease ahead of it, so the lease does not run out while it is under way.
START_WITHIN = CLAIM_LEASE / 2
#: The default of ``App(webhook_timeout=...)``: how long one webhook attempt may take in
#: all (connect, send, status line and headers, body).
WEBHOOK_TIMEOUT = timedelta(seconds=30)
#: Its most: a delivery starts with ``START_WITHIN`` of its lease ahead, so one that ends
#: by then leaves a minute and a half to record it before another worker may take the row.
WEBHOOK_TIMEOUT_MAX = timedelta(minutes=1)
#: How long the rows a batch sent may wait to be recorded together (one UPDATE): a worker
#: that dies delivers at most these again, besides the ones in flight.
RECORD_EVERY = timedelta(seconds=1)


@attrs.define
class PassCounts:
    """What one transaction of a pass recorded."""

    sent: int = 0
    retried: int = 0
    dead: int = 0

    def values(self) -> tuple[int, int, int]:
        return self.sent, self.retried, self.dead


class Deliverer:
    """Delivers rows; knows the transports, the HTTP client, the secrets, and how many
    deliveries of one batch may be under way at once (``concurrency``)."""

    def __init__(
        self,
        mail: MailTransport,
        http: Callable[[], httpx.Client],
        secrets: SecretResolver,
        concurrency: int = 1,
        webhook_timeout: timedelta = WEBHOOK_TIMEOUT,
    ) -> None:
        self.mail = mail
        self.http = http
        self.secrets = SecretBook(secrets)
        self.concurrency = concurrency
        self.webhook_timeout = webhook_timeout.total_seconds()
        #: Records of deliveries made that the database refused (full, gone): written
        #: first by the next pass, in order (:func:`_record_owed`).
        self.owed: list[_Write] = []

    def deliver(self, row: Row[Any]) -> None:
        if row.kind == "webhook":
            deliver_webhook(row.id, row.message, self.http(), self.secrets, self.webhook_timeout)
        elif row.kind == "mail":
            self.mail.send(mail_message(row.id, row.message), self.secrets)
        else:
            raise DeliveryError(f"unknown outbox kind {row.kind!r}", permanent=True)


def mail_message(item_id: uuid.UUID, message: Mapping[str, Any]) -> MailMessage:
    """The typed mail a transport gets, from the row ``send_mail`` stored."""
    sender, html, reply_to = message.get("sender"), message.get("html"), message.get("reply_to")
    return MailMessage(
        id=item_id,
        to=tuple(str(t) for t in message["to"]),
        subject=str(message["subject"]),
        body=str(message["body"]),
        sender=None if sender is None else str(sender),
        html=None if html is None else str(html),
        reply_to=None if reply_to is None else str(reply_to),
    )


def _outcome(row: Row[Any], error: DeliveryError | None, now: datetime) -> dict[str, Any]:
    attempts = row.attempts + 1
    if error is None:
        return {"status": "sent", "attempts": attempts, "sent_at": now, "next_attempt_at": None, "last_error": None}
    text = storable_text(str(error))
    if error.permanent or attempts >= row.max_attempts:
        return {"status": "dead", "attempts": attempts, "next_attempt_at": None, "last_error": text}
    policy = RetryPolicy(row.max_attempts, row.backoff, timedelta(seconds=row.base_delay_seconds))
    delay = policy.delay(attempts)
    if error.retry_after is not None:  # what the peer asked for, if longer, at most an hour
        delay = max(delay, min(error.retry_after, RETRY_AFTER_MAX))
    return {"attempts": attempts, "next_attempt_at": now + delay, "last_error": text}


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


#: The most of an attempt's error a row keeps, and its log line and trace show: a peer
#: writes its reason phrase, its ``Location`` and its SMTP replies as long as it likes
#: (a 60 KB reason phrase was stored whole, and logged again when the row died).
ERROR_MAX = 2000


def _shown(text: str) -> str:
    """``text`` as one line of plain text (:func:`one_line`), at most ``ERROR_MAX`` characters."""
    text = one_line(text)
    if len(text) <= ERROR_MAX:
        return text
    return f"{text[:ERROR_MAX]}... ({len(text) - ERROR_MAX} more characters)"


def _attempt(deliverer: Deliverer, row: Row[Any]) -> DeliveryError | None:
    """Deliver ``row``; the error to store, with every secret value redacted from it (before
    it is shown as one line of at most ``ERROR_MAX``: a secret cut in half, or with an
    escaped character, would not be found)."""
    with span("kumiko.delivery") as current:
        if current is not None:
            current.set_attributes(
                {
                    "kumiko.outbox.id": str(row.id),
                    "kumiko.outbox.kind": row.kind,
                    "kumiko.tenant": str(row.tenant_id),
                    # The queueing call's: its dispatch span and events carry the same.
                    "kumiko.correlation_id": str(row.correlation_id),
                }
            )
        try:
            deliverer.deliver(row)
        except DeliveryError as exc:
            text = _shown(deliverer.secrets.redact(str(exc)))
            error = DeliveryError(text, permanent=exc.permanent, retry_after=exc.retry_after)
        except Exception as exc:  # a transport bug must not kill the worker; record it
            error = DeliveryError(_shown(deliverer.secrets.redact(f"{type(exc).__name__}: {exc}")))
        else:
            return None
        failed(current, str(error))
        return error


class _Late(enum.Enum):
    """A row whose delivery would start after ``START_WITHIN``, or once the worker is
    stopping: it is handed back."""

    LATE = "late"


def _attempt_by(deliverer: Deliverer, row: Row[Any], late: Callable[[], bool]) -> DeliveryError | _Late | None:
    return _Late.LATE if late() else _attempt(deliverer, row)


def _attempts(
    deliverer: Deliverer,
    rows: Sequence[Row[Any]],
    pool: ThreadPoolExecutor | None,
    late: Callable[[], bool],
) -> Iterator[tuple[Row[Any], DeliveryError | _Late | None]]:
    """Deliver ``rows``, at most ``deliverer.concurrency`` at a time (``pool``, if the
    concurrency is above 1): each row with its outcome, as the deliveries finish; a row
    whose turn comes when ``late()`` is not delivered (``_Late.LATE``).  The work is
    waiting on peers (HTTP, SMTP), so a few threads let one worker keep several
    deliveries in flight."""
    if pool is None or len(rows) == 1:
        yield from ((row, _attempt_by(deliverer, row, late)) for row in rows)
        return
    futures = {pool.submit(_attempt_by, deliverer, row, late): row for row in rows}
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
        .order_by(outbox.c.next_attempt_at, outbox.c.created_at, outbox.c.id)
    )


_IDS: Final = outbox.c.id.in_(bindparam("ids", expanding=True))
#: A claim: the batch's next attempt moved to the end of its lease.
_LEASE: Final = update(outbox).where(_IDS).values(next_attempt_at=bindparam("lease"))
#: What a claim's outcomes update: its rows still under its lease.  Once a lease ran out,
#: another worker may have claimed a row anew (and recorded it): its outcome stands.
_LEASED: Final = outbox.c.next_attempt_at == bindparam("lease")
#: The rows of a batch delivered on their first try or a later one, marked together: the
#: same columns ``_outcome`` gives a success (no other worker touched a row under this
#: lease, so ``attempts + 1`` is the count it would compute).
_MARK_SENT: Final = (
    update(outbox)
    .where(_IDS, _LEASED)
    .values(
        status="sent", attempts=outbox.c.attempts + 1, sent_at=bindparam("now"), next_attempt_at=None, last_error=None
    )
)
_SET_OUTCOME: Final = update(outbox).where(outbox.c.id == bindparam("b_id"), _LEASED)
#: Rows not started in time, due again when they were claimed: any worker may take them.
_HAND_BACK: Final = update(outbox).where(_IDS, _LEASED).values(next_attempt_at=bindparam("due"))


#: One short transaction that records outcomes of a claim, counting them.
_Write = Callable[[Connection, PassCounts], None]


def _record_owed(engine: Engine, deliverer: Deliverer) -> Iterator[tuple[int, int, int]]:
    """Write the records an earlier pass owes (its database refused them), oldest first,
    each one's counts once it committed; raises, keeping them owed, while the database
    still refuses.  Each is written only on rows still under its claim's lease: one whose
    lease ran out meanwhile was taken again, and is that claim's to record."""
    while deliverer.owed:
        counts = PassCounts()
        with engine.begin() as conn:
            deliverer.owed[0](conn, counts)
        del deliverer.owed[0]
        yield counts.values()


def _write(engine: Engine, deliverer: Deliverer, write: _Write) -> PassCounts:
    """Record outcomes (``write``) in a short transaction and return what it counted, once
    committed; if the database refuses it (out of disk, gone), owe it and raise, failing
    the pass: the messages went out, and rows left under their lease would be sent again
    when it runs out."""
    counts = PassCounts()
    try:
        with engine.begin() as conn:
            write(conn, counts)
    except DBAPIError:
        deliverer.owed.append(write)
        raise
    return counts


def deliver_due(
    engine: Engine, deliverer: Deliverer, clock: Callable[[], datetime], stopping: Callable[[], bool]
) -> Iterator[tuple[int, int, int]]:
    """One pass: deliver every row due now (rows rescheduled into the future wait), or
    until ``stopping()``: then the deliveries in flight end and are recorded, the rest of
    the batch is handed back (due at once, for the next pass or another worker).

    Yields ``(sent, retried, dead)`` of each transaction that recorded outcomes, as it
    commits (for :func:`~._worker_batches.counted`): a pass the database cuts short still
    counts what it recorded before.  The pass's delivery threads (if its concurrency is
    above 1) serve all its batches; a worker talks to the database through Core
    connections, no ORM session."""
    yield from _record_owed(engine, deliverer)
    width = deliverer.concurrency
    pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix="kumiko-delivery") if width > 1 else None
    try:
        while not stopping() and (yield from _deliver_batch(engine, deliverer, clock, pool, stopping)):
            pass
    finally:
        if pool is not None:
            # A pass that failed (its database went away) sends no delivery still queued:
            # it would go out unrecorded, and again after the lease.  Those under way end.
            pool.shutdown(cancel_futures=True)


def _deliver_batch(
    engine: Engine,
    deliverer: Deliverer,
    clock: Callable[[], datetime],
    pool: ThreadPoolExecutor | None,
    stopping: Callable[[], bool],
) -> Generator[tuple[int, int, int], None, bool]:
    """Claim a batch (one short transaction), deliver it outside any transaction, and
    record the outcomes: each failure as it comes, the rows sent together, at most
    ``RECORD_EVERY`` after the last record and at the end, with the rows handed back
    (not started within ``START_WITHIN``, or not before ``stopping()``).  Yields what
    each record counted once it committed; returns ``False`` if nothing was due."""
    claimed = clock()
    lease = claimed + CLAIM_LEASE
    start_by = claimed + START_WITHIN

    def too_late() -> bool:
        return stopping() or clock() > start_by

    with engine.begin() as conn:
        claim = _due(claimed).limit(claim_size(deliverer.concurrency))
        # SKIP LOCKED: a claim under way elsewhere is passed over (SQLite renders no
        # locking clause: it has one writer at a time).
        rows = conn.execute(claim.with_for_update(skip_locked=True)).all()
        if not rows:
            return False
        conn.execute(_LEASE, {"ids": [row.id for row in rows], "lease": lease})
    sent: list[uuid.UUID] = []
    late: list[uuid.UUID] = []
    recorded = claimed
    for row, outcome in _attempts(deliverer, rows, pool, too_late):
        if outcome is _Late.LATE:
            late.append(row.id)
        elif outcome is None:
            sent.append(row.id)
            if clock() - recorded >= RECORD_EVERY:
                recorded = clock()
                yield _write(engine, deliverer, _record(claimed, sent, [], recorded)).values()
                sent = []
        else:
            write = _set_outcome(row, lease, _settled(row, outcome, clock()))
            yield _write(engine, deliverer, write).values()
    if sent or late:
        yield _write(engine, deliverer, _record(claimed, sent, late, clock())).values()
    return True


def _set_outcome(row: Row[Any], lease: datetime, change: dict[str, Any]) -> _Write:
    """Record the failed attempt on ``row`` (``change``), if it is still under ``lease``."""

    def write(conn: Connection, counts: PassCounts) -> None:
        if conn.execute(_SET_OUTCOME, {"b_id": row.id, "lease": lease, **change}).rowcount:
            _count(counts, row, change)

    return write


def _record(claimed: datetime, sent: list[uuid.UUID], late: list[uuid.UUID], now: datetime) -> _Write:
    """Mark the ``sent`` rows of the claim made at ``claimed`` sent and hand the ``late``
    ones back (due when claimed), in one short transaction; rows no longer under this
    claim's lease are left as they are."""
    lease = claimed + CLAIM_LEASE

    def write(conn: Connection, counts: PassCounts) -> None:
        if sent:
            counts.sent += conn.execute(_MARK_SENT, {"ids": sent, "lease": lease, "now": now}).rowcount
        if late:
            conn.execute(_HAND_BACK, {"ids": late, "lease": lease, "due": claimed})

    return write


#: What an outbox row's ``status`` may be.
STATUSES: Final = ("pending", "sent", "dead")


def items(
    sessions: sessionmaker[Session], status: object = None, limit: object = None, after: object = None
) -> list[OutboxItem]:
    """The rows in ``status`` (one, or a collection; ``None``: every row), oldest first:
    by ``created_at``, then ``id``, so rows queued at one instant are in one total order,
    the order they were queued in (:mod:`._ordered_ids`), and no row is skipped or repeated
    at a page's edge.  At most ``limit``; ``after``: only
    those listed after that row (the next page goes on from the last row of one; rows
    queued meanwhile come at the end, they do not shift it).  The database picks them (the
    due index leads with the status, the listed one with ``created_at``): sent rows stay
    until purged, and neither a listing of the pending and dead rows nor a page reads
    them all.  A wrong argument raises ``TypeError`` or ``ValueError``; an ``after``
    that is no row, ``LookupError``."""
    statuses = chosen_statuses(status, STATUSES, "an outbox")
    limit = checked_limit(limit)
    after = checked_cursor("after", after, "an outbox row's id")
    stmt = select(outbox).order_by(outbox.c.created_at, outbox.c.id).limit(limit)
    if statuses is not None:
        stmt = stmt.where(outbox.c.status.in_(statuses))
    with reading(sessions) as session:
        if after is not None:
            cursor = session.execute(select(outbox.c.created_at).where(outbox.c.id == after)).scalar_one_or_none()
            if cursor is None:
                raise LookupError(f"after: no outbox row {after}; page on with the id of a listed row")
            # The first term alone bounds an index range; the second breaks ties.
            stmt = stmt.where(outbox.c.created_at >= cursor, or_(outbox.c.created_at > cursor, outbox.c.id > after))
        rows = session.execute(stmt).all()
    return [item_of(r) for r in rows]


def item_of(r: Row[Any]) -> OutboxItem:
    """The public view of one outbox row."""
    return OutboxItem(r.id, r.kind, r.status, r.attempts, r.last_error, r.next_attempt_at, target_of(r.kind, r.message))
