"""Temporal's background-check sample, ported: HR orders a check of a candidate; the
candidate is mailed an invitation and has a week to accept (a signal in Temporal: here an
event the run waits for, with a timeout); an SSN trace is ordered from a provider, whose
answer comes back later (Temporal's async activity completion: here a webhook out, and the
provider's call to ``ssn:report``, which appends the event the run waits for); then each
search of the package runs in turn, each waiting up to three days for its result; HR is
mailed the report.  HR may cancel a check at any point with ``app.cancel_run``.

A run is started with ``key=`` the candidate's e-mail: ordering the same check twice
returns the first run (Temporal's workflow id).  The check's row is its progress, which
Temporal exposes through a query: ``check:status`` reads it.

The provider's URL comes from the environment (``CHECKS_PROVIDER_URL``) when a step runs.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from typing import Any, Literal

import attrs
from sqlalchemy import JSON, String, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Feature, RetryPolicy, fail, mail_address, manual, ok

ACCEPT_WITHIN = timedelta(days=7)
SSN_TRACE_WITHIN = timedelta(days=1)
SEARCH_WITHIN = timedelta(days=3)
HR = "hr@example.com"
#: The searches each package runs, in order.
SEARCHES: dict[str, tuple[str, ...]] = {
    "standard": ("federal-criminal",),
    "full": ("federal-criminal", "state-criminal", "motor-vehicle"),
}
DELIVERY = RetryPolicy(times=5, base_delay=timedelta(minutes=1))


def provider_url(path: str) -> str:
    return os.environ.get("CHECKS_PROVIDER_URL", "https://checks.example") + path


class Check(Entity):
    __tablename__ = "bg_check"
    email: Mapped[str] = mapped_column(String(254))
    package: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(40), default="invited")
    #: Search → its outcome, as the searches finish.
    results: Mapped[dict[str, Any]] = mapped_column(JSON, default_factory=dict)


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class CandidateAnswered:
    check_id: uuid.UUID
    accepted: bool


@attrs.frozen
class SsnTraced:
    check_id: uuid.UUID
    valid: bool


@attrs.frozen
class SearchCompleted:
    check_id: uuid.UUID
    search: str
    outcome: Literal["clear", "records-found"]


@attrs.frozen
class SearchRecorded:
    search: str
    outcome: str


@attrs.frozen
class CheckEnded:
    status: str


# --- payloads ------------------------------------------------------------------------------


@attrs.frozen
class OrderCheck:
    email: str = attrs.field(validator=attrs.validators.and_(attrs.validators.max_len(254), mail_address))
    package: Literal["standard", "full"]
    #: For the provider: sent in the trace request and kept in the run's payload, never in
    #: an event or the check's row.
    ssn: str = attrs.field(validator=attrs.validators.matches_re(r"\d{3}-\d{2}-\d{4}"), repr=False)


@attrs.frozen
class Answer:
    check_id: uuid.UUID
    accepted: bool


@attrs.frozen
class SsnReport:
    check_id: uuid.UUID
    valid: bool


@attrs.frozen
class SearchReport:
    check_id: uuid.UUID
    search: str = attrs.field(validator=attrs.validators.in_(SEARCHES["full"]))
    outcome: Literal["clear", "records-found"]


@attrs.frozen
class CheckStatus:
    check_id: uuid.UUID


@attrs.frozen
class Progress:
    status: str
    results: dict[str, str]


#: What the App must be told the run may store besides payloads, events and entities:
#: ``App(..., value_types=VALUE_TYPES)``.  Without it the run fails with
#: ``unstorable_state`` when its ``return_`` answers a ``Progress``, its last segment
#: rolled back (docs/workflows.md, "What can be stored").
VALUE_TYPES = [Progress]


# --- the feature ---------------------------------------------------------------------------

checks = Feature("checks", requires=["mail.send", "webhook.send"])
checks.entity(Check)
checks.event(CandidateAnswered, name="candidate-answered")
checks.event(SsnTraced, name="ssn-traced")
checks.event(SearchCompleted, name="search-completed")
checks.event(SearchRecorded, name="search-recorded")
checks.event(CheckEnded, name="check-ended")


@checks.projector(Check, CandidateAnswered)
def _answered(row: Check, event: CandidateAnswered) -> None:
    row.status = "accepted" if event.accepted else "declined"


@checks.projector(Check, SsnTraced)
def _traced(row: Check, event: SsnTraced) -> None:
    row.status = "searching" if event.valid else "ssn-invalid"


@checks.projector(Check, SearchRecorded)
def _recorded(row: Check, event: SearchRecorded) -> None:
    row.results[event.search] = event.outcome


@checks.projector(Check, CheckEnded)
def _ended(row: Check, event: CheckEnded) -> None:
    row.status = event.status


# The candidate's answer, the provider's: each appends the event a run waits for, and only
# while the check is at that point (a second answer is refused, not appended).
answer = checks.write_handler(
    "candidate:answer",
    checks.pipeline(Answer)
    .get_one("check", lambda c: select(Check).where(Check.id == c.payload.check_id))
    .guard(
        lambda c: c.steps["check"].status == "invited",
        otherwise=lambda c: fail("unprocessable", f"the check is {c.steps['check'].status}, not awaiting an answer"),
    )
    .append_event(
        Check,
        id=lambda c: c.payload.check_id,
        event=lambda c: CandidateAnswered(c.payload.check_id, c.payload.accepted),
    )
    .return_(lambda c: ok(c.steps["check"].status)),
    roles=["Candidate"],
)

report_ssn = checks.write_handler(
    "ssn:report",
    checks.pipeline(SsnReport)
    .get_one("check", lambda c: select(Check).where(Check.id == c.payload.check_id))
    .guard(
        lambda c: c.steps["check"].status == "accepted",
        otherwise=lambda c: fail("unprocessable", f"the check is {c.steps['check'].status}, not tracing"),
    )
    .append_event(
        Check, id=lambda c: c.payload.check_id, event=lambda c: SsnTraced(c.payload.check_id, c.payload.valid)
    )
    .return_(lambda c: ok(c.steps["check"].status)),
    roles=["Provider"],
)

report_search = checks.write_handler(
    "search:report",
    checks.pipeline(SearchReport)
    .get_one("check", lambda c: select(Check).where(Check.id == c.payload.check_id))
    .guard(
        lambda c: (
            c.steps["check"].status == "searching"
            and c.payload.search in SEARCHES[c.steps["check"].package]
            and c.payload.search not in c.steps["check"].results
        ),
        otherwise=lambda c: fail("unprocessable", f"the check is not waiting for {c.payload.search}"),
    )
    .append_event(
        Check,
        id=lambda c: c.payload.check_id,
        event=lambda c: SearchCompleted(c.payload.check_id, c.payload.search, c.payload.outcome),
    )
    .return_(lambda c: ok(c.payload.search)),
    roles=["Provider"],
)

check_status = checks.query_handler(
    "check:status",
    checks.query_pipeline(CheckStatus)
    .get_one("check", lambda c: select(Check).where(Check.id == c.payload.check_id))
    .return_(lambda c: ok(Progress(c.steps["check"].status, dict(c.steps["check"].results)))),
    roles=["HR"],
)


def _search_key(check_id: uuid.UUID, search: str) -> str:
    return f"{check_id}/{search}"


background_check = checks.workflow(
    "background-check",
    trigger=manual(OrderCheck),
    pipeline=checks.workflow_pipeline(OrderCheck)
    .create("check", Check, data=lambda c: Check(email=c.payload.email, package=c.payload.package))
    .send_mail(
        to=lambda c: c.payload.email,
        subject="Your background check",
        body=lambda c: f"Please accept or decline check {c.steps['check'].id} within 7 days.",
    )
    .wait_for_event(
        "answer",
        CandidateAnswered,
        key=lambda c: c.steps["check"].id,
        event_key=lambda e: e.check_id,
        timeout=ACCEPT_WITHIN,
    )
    .compute("accepted", lambda c: (a := c.steps["answer"]) is not None and a.accepted)
    .branch(
        name="trace",
        when=lambda c: c.steps["accepted"],
        on_true=lambda b: b.send_webhook(
            url=lambda c: provider_url("/ssn-trace"),
            body=lambda c: {"check_id": str(c.steps["check"].id), "ssn": c.payload.ssn},
            retry=DELIVERY,
        ).wait_for_event(
            "ssn",
            SsnTraced,
            key=lambda c: c.steps["check"].id,
            event_key=lambda e: e.check_id,
            timeout=SSN_TRACE_WITHIN,
        ),
    )
    .compute("searching", lambda c: (s := c.steps["ssn"]) is not None and s.valid)
    .branch(
        name="searches",
        when=lambda c: c.steps["searching"],
        on_true=lambda b: b.for_each(
            "search",
            over=lambda c: SEARCHES[c.payload.package],
            do=lambda d: (
                d.send_webhook(
                    url=lambda c: provider_url(f"/search/{c.scope['search']}"),
                    body=lambda c: {"check_id": str(c.steps["check"].id), "search": c.scope["search"]},
                    retry=DELIVERY,
                )
                .wait_for_event(
                    "found",
                    SearchCompleted,
                    key=lambda c: _search_key(c.steps["check"].id, c.scope["search"]),
                    event_key=lambda e: _search_key(e.check_id, e.search),
                    timeout=SEARCH_WITHIN,
                )
                .append_event(
                    Check,
                    id=lambda c: c.steps["check"].id,
                    event=lambda c: SearchRecorded(
                        c.scope["search"], f.outcome if (f := c.steps["found"]) is not None else "timed out"
                    ),
                )
            ),
        ),
    )
    .compute(
        "status",
        lambda c: (
            "completed"
            if c.steps["searching"]
            else "expired"
            if c.steps["answer"] is None
            else "declined"
            if not c.steps["accepted"]
            else "ssn-timed-out"
            if c.steps["ssn"] is None
            else "ssn-invalid"
        ),
    )
    .append_event(Check, id=lambda c: c.steps["check"].id, event=lambda c: CheckEnded(c.steps["status"]))
    .get_one("report", lambda c: select(Check).where(Check.id == c.steps["check"].id))
    .send_mail(
        to=HR,
        subject=lambda c: f"Background check of {c.payload.email}: {c.steps['status']}",
        body=lambda c: "\n".join(f"{k}: {v}" for k, v in sorted(c.steps["report"].results.items())) or "no searches",
    )
    .return_(lambda c: ok(Progress(c.steps["status"], dict(c.steps["report"].results)))),
)
