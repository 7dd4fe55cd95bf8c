"""A multi-level approval chain, in the style of Temporal's human-in-the-loop and Camunda's
approval samples: a purchase request goes through an ordered list of approvers.  Each is
asked in turn (a mail through the outbox) and has until a deadline to approve or reject;
one who lets it pass is escalated, once, to their deputy, and a deputy who lets it pass
too ends the request as expired.  The first rejection ends the chain; the requester may withdraw
while it waits; a request every approver approved is approved.  A read model per request
shows where it stands.

There is no early exit from ``for_each``: each iteration reads the request (locked, so a
decision that commits meanwhile is read here or answers the wait) and asks its approver
only while the request is still pending, so the iterations after a rejection, a timeout or
a withdrawal pass by without a step.

Every answer (approve, reject, withdraw) is one event type keyed by the wait it answers
(``RequestAnswered.wait_key``: the request, the level and whether the deputy was asked), so
a decision for an earlier approver can never answer a later wait, and a withdrawal answers
whichever wait the run stands at.  The handlers refuse, with a sentence, what the run would
ignore: a decision by anyone but the approver asked, one at or after the deadline, one on a
request that is no longer pending.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal

import attrs
from sqlalchemy import DateTime, Integer, Numeric, String, Uuid, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Feature, WriteHandler, fail, ok, on_event

DECIDE_WITHIN = timedelta(days=2)
#: A mail address without control characters: it is a mail's recipient.
ADDRESS = r"[^@\s\x00-\x1f\x7f]{1,64}@[^@\s\x00-\x1f\x7f]{1,189}"

Verdict = Literal["approve", "reject", "withdraw"]


@attrs.frozen
class Approver:
    user_id: uuid.UUID
    email: str = attrs.field(validator=attrs.validators.matches_re(ADDRESS))


@attrs.frozen
class Level:
    approver: Approver
    deputy: Approver


class PurchaseRequest(Entity):
    __tablename__ = "appr_request"
    requester: Mapped[uuid.UUID] = mapped_column(Uuid)
    requester_email: Mapped[str] = mapped_column(String(254))
    title: Mapped[str] = mapped_column(String(200))
    amount: Mapped[Decimal] = mapped_column(Numeric(12, 2))
    levels: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), default="pending", index=True)
    approvals: Mapped[int] = mapped_column(Integer, default=0)
    waiting_for: Mapped[uuid.UUID | None] = mapped_column(Uuid, default=None)
    wait_key: Mapped[str | None] = mapped_column(String(80), default=None)
    decide_by: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    note: Mapped[str | None] = mapped_column(String(500), default=None)


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class RequestFiled:
    request_id: uuid.UUID
    requester_email: str
    title: str
    levels: list[Level]


@attrs.frozen
class ApproverAsked:
    request_id: uuid.UUID
    approver: uuid.UUID
    wait_key: str
    decide_by: datetime


@attrs.frozen
class RequestAnswered:
    wait_key: str
    request_id: uuid.UUID
    verdict: Verdict
    by: uuid.UUID
    note: str | None


@attrs.frozen
class RequestExpired:
    request_id: uuid.UUID


@attrs.frozen
class RequestApproved:
    request_id: uuid.UUID


# --- payloads ------------------------------------------------------------------------------


@attrs.frozen
class FileRequest:
    requester_email: str = attrs.field(validator=attrs.validators.matches_re(ADDRESS))
    # One line: it goes into mail subjects.
    title: str = attrs.field(
        validator=attrs.validators.and_(
            attrs.validators.max_len(200), attrs.validators.matches_re(r"[^\x00-\x1f\x7f]+")
        )
    )
    amount: Decimal = attrs.field(validator=attrs.validators.gt(Decimal(0)))
    levels: list[Level] = attrs.field(
        validator=attrs.validators.and_(attrs.validators.min_len(1), attrs.validators.max_len(500))
    )


@attrs.frozen
class Answer:
    request_id: uuid.UUID
    note: str | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.max_len(500)))


@attrs.frozen
class RequestView:
    request_id: uuid.UUID
    status: str
    approvals: int
    levels: int
    waiting_for: uuid.UUID | None
    note: str | None


@attrs.frozen
class Lookup:
    request_id: uuid.UUID


# --- the feature ---------------------------------------------------------------------------

approvals = Feature("approvals", requires=["mail.send"])
approvals.entity(PurchaseRequest)
approvals.event(RequestFiled, name="request-filed")
approvals.event(ApproverAsked, name="approver-asked")
approvals.event(RequestAnswered, name="request-answered")
approvals.event(RequestExpired, name="request-expired")
approvals.event(RequestApproved, name="request-approved")


@approvals.projector(PurchaseRequest, ApproverAsked)
def _asked(row: PurchaseRequest, event: ApproverAsked) -> None:
    row.waiting_for, row.wait_key, row.decide_by = event.approver, event.wait_key, event.decide_by


_ANSWERED: dict[Verdict, str] = {"approve": "pending", "reject": "rejected", "withdraw": "withdrawn"}


@approvals.projector(PurchaseRequest, RequestAnswered)
def _answered(row: PurchaseRequest, event: RequestAnswered) -> None:
    row.status = _ANSWERED[event.verdict]
    row.approvals += event.verdict == "approve"
    row.waiting_for = row.decide_by = None
    row.note = event.note


@approvals.projector(PurchaseRequest, RequestExpired)
def _expired(row: PurchaseRequest, event: RequestExpired) -> None:
    row.status, row.waiting_for, row.decide_by = "expired", None, None


@approvals.projector(PurchaseRequest, RequestApproved)
def _approved(row: PurchaseRequest, event: RequestApproved) -> None:
    row.status = "approved"


file_request = approvals.write_handler(
    "request:file",
    approvals.pipeline(FileRequest)
    .create(
        "request",
        PurchaseRequest,
        data=lambda c: PurchaseRequest(
            requester=c.user.id,
            requester_email=c.payload.requester_email,
            title=c.payload.title,
            amount=c.payload.amount,
            levels=len(c.payload.levels),
        ),
    )
    .append_event(
        PurchaseRequest,
        id=lambda c: c.steps["request"].id,
        event=lambda c: RequestFiled(
            c.steps["request"].id, c.payload.requester_email, c.payload.title, c.payload.levels
        ),
    )
    .return_(lambda c: ok(c.steps["request"].id)),
    roles=["Employee"],
)


def _decision(name: str, verdict: Verdict) -> WriteHandler[Answer, str]:
    """``request:approve`` and ``request:reject``, by one rule.  The read is filtered to the
    approver's tenant, so another tenant's request is ``not_found``."""
    return approvals.write_handler(
        name,
        approvals.pipeline(Answer)
        .get_one(
            "request",
            lambda c: select(PurchaseRequest).where(PurchaseRequest.id == c.payload.request_id).with_for_update(),
        )
        .guard(
            lambda c: c.steps["request"].status == "pending",
            otherwise=lambda c: fail("unprocessable", f"the request is {c.steps['request'].status}"),
        )
        .guard(
            lambda c: c.steps["request"].waiting_for == c.user.id,
            otherwise=lambda c: fail("unprocessable", "the request is not waiting for your decision"),
        )
        .guard(
            lambda c: (by := c.steps["request"].decide_by) is not None and c.now < by,
            otherwise=lambda c: fail("unprocessable", "the time to decide on the request has run out"),
        )
        .append_event(
            PurchaseRequest,
            id=lambda c: c.payload.request_id,
            event=lambda c: RequestAnswered(
                c.steps["request"].wait_key or "", c.payload.request_id, verdict, c.user.id, c.payload.note
            ),
        )
        .return_(lambda c: ok(c.steps["request"].status)),
        roles=["Approver"],
    )


approve = _decision("request:approve", "approve")
reject = _decision("request:reject", "reject")

withdraw = approvals.write_handler(
    "request:withdraw",
    approvals.pipeline(Answer)
    .get_one(
        "request",
        lambda c: (
            select(PurchaseRequest)
            .where(PurchaseRequest.id == c.payload.request_id, PurchaseRequest.requester == c.user.id)
            .with_for_update()
        ),
    )
    .guard(
        lambda c: c.steps["request"].status == "pending",
        otherwise=lambda c: fail("unprocessable", f"the request is {c.steps['request'].status}"),
    )
    .append_event(
        PurchaseRequest,
        id=lambda c: c.payload.request_id,
        event=lambda c: RequestAnswered(
            c.steps["request"].wait_key or "", c.payload.request_id, "withdraw", c.user.id, c.payload.note
        ),
    )
    .return_(lambda c: ok(c.steps["request"].status)),
    roles=["Employee"],
)

show_request = approvals.query_handler(
    "request:show",
    approvals.query_pipeline(Lookup)
    .get_one("request", lambda c: select(PurchaseRequest).where(PurchaseRequest.id == c.payload.request_id))
    .return_(
        lambda c: ok(
            RequestView(
                c.steps["request"].id,
                c.steps["request"].status,
                c.steps["request"].approvals,
                c.steps["request"].levels,
                c.steps["request"].waiting_for,
                c.steps["request"].note,
            )
        )
    ),
)


def _outcome(status: str) -> str:
    """The final read comes before the approving append: pending there means approved."""
    return "approved" if status == "pending" else status


def wait_key(request_id: uuid.UUID, level: int, deputy: bool) -> str:
    return f"{request_id}/{level}/{'deputy' if deputy else 'approver'}"


chain = approvals.workflow(
    "chain",
    trigger=on_event(RequestFiled),
    pipeline=approvals.workflow_pipeline(RequestFiled)
    .for_each(
        "level",
        over=lambda c: list(enumerate(c.payload.levels)),
        do=lambda b: b.get_one(
            "request",
            lambda c: select(PurchaseRequest).where(PurchaseRequest.id == c.payload.request_id).with_for_update(),
        ).branch(
            name="ask",
            when=lambda c: c.steps["request"].status == "pending",
            on_true=lambda b: (
                b.append_event(
                    PurchaseRequest,
                    id=lambda c: c.payload.request_id,
                    event=lambda c: ApproverAsked(
                        c.payload.request_id,
                        c.scope["level"][1].approver.user_id,
                        wait_key(c.payload.request_id, c.scope["level"][0], deputy=False),
                        c.now + DECIDE_WITHIN,
                    ),
                )
                .send_mail(
                    to=lambda c: c.scope["level"][1].approver.email,
                    subject=lambda c: f"Please decide: {c.payload.title}",
                    body=lambda c: f"Request {c.payload.request_id} waits for your decision.",
                )
                .wait_for_event(
                    "answer",
                    RequestAnswered,
                    key=lambda c: wait_key(c.payload.request_id, c.scope["level"][0], deputy=False),
                    event_key=lambda e: e.wait_key,
                    timeout=DECIDE_WITHIN,
                )
                .branch(
                    name="escalate",
                    when=lambda c: c.steps["answer"] is None,
                    on_true=lambda b: (
                        b.append_event(
                            PurchaseRequest,
                            id=lambda c: c.payload.request_id,
                            event=lambda c: ApproverAsked(
                                c.payload.request_id,
                                c.scope["level"][1].deputy.user_id,
                                wait_key(c.payload.request_id, c.scope["level"][0], deputy=True),
                                c.now + DECIDE_WITHIN,
                            ),
                        )
                        .send_mail(
                            to=lambda c: c.scope["level"][1].deputy.email,
                            subject=lambda c: f"Please decide (as deputy): {c.payload.title}",
                            body=lambda c: f"Request {c.payload.request_id} waits for your decision.",
                        )
                        .wait_for_event(
                            "deputy_answer",
                            RequestAnswered,
                            key=lambda c: wait_key(c.payload.request_id, c.scope["level"][0], deputy=True),
                            event_key=lambda e: e.wait_key,
                            timeout=DECIDE_WITHIN,
                        )
                        .branch(
                            name="expire",
                            when=lambda c: c.steps["deputy_answer"] is None,
                            on_true=lambda b: b.append_event(
                                PurchaseRequest,
                                id=lambda c: c.payload.request_id,
                                event=lambda c: RequestExpired(c.payload.request_id),
                            ),
                        )
                    ),
                )
            ),
        ),
    )
    .get_one(
        "final",
        lambda c: select(PurchaseRequest).where(PurchaseRequest.id == c.payload.request_id).with_for_update(),
    )
    .branch(
        name="approve",
        when=lambda c: c.steps["final"].status == "pending",
        on_true=lambda b: b.append_event(
            PurchaseRequest, id=lambda c: c.payload.request_id, event=lambda c: RequestApproved(c.payload.request_id)
        ),
    )
    .send_mail(
        to=lambda c: c.payload.requester_email,
        subject=lambda c: f"Your request {c.payload.title} is decided",
        body=lambda c: f"Request {c.payload.request_id}: {_outcome(c.steps['final'].status)}.",
    )
    .return_(lambda c: ok(_outcome(c.steps["final"].status))),
)
