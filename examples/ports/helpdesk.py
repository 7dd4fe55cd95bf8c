"""Marten's help desk (incident management), ported: customers log incidents, agents are
assigned and respond, the customer acknowledges the resolution and the incident is closed.

Two aggregates (``Customer``, ``Incident``); every change of an incident is a domain event
whose projector keeps the incident's row, which is the "incident details" read model.
The per-customer summary (Marten's multi-stream projection) is a query grouping those rows.
A workflow holds the first-response SLA: a newly logged incident that no agent answered in
time is escalated (mail to the supervisors, an ``IncidentEscalated`` event).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
from sqlalchemy import Enum, ForeignKey, String, func, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Failure, Feature, fail, ok, on_event

#: How long a new incident may wait for an agent's first answer.
FIRST_RESPONSE_SLA = timedelta(hours=4)
SUPERVISORS = "helpdesk-supervisors@example.com"


class Status(enum.Enum):
    PENDING = "pending"
    RESOLVED = "resolved"
    RESOLUTION_ACKNOWLEDGED = "resolution-acknowledged"
    CLOSED = "closed"


class Priority(enum.Enum):
    CRITICAL = "critical"
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


class Category(enum.Enum):
    SOFTWARE = "software"
    HARDWARE = "hardware"
    NETWORK = "network"
    DATABASE = "database"


class Resolution(enum.Enum):
    FIXED = "fixed"
    NOT_AN_INCIDENT = "not-an-incident"
    WORKAROUND = "workaround"


class Customer(Entity):
    __tablename__ = "helpdesk_customer"
    name: Mapped[str] = mapped_column(String(200))


class Incident(Entity):
    __tablename__ = "helpdesk_incident"
    customer_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("helpdesk_customer.id"), default=None)
    description: Mapped[str] = mapped_column(String(2000), default="")
    status: Mapped[Status] = mapped_column(Enum(Status), default=Status.PENDING)
    priority: Mapped[Priority | None] = mapped_column(Enum(Priority), nullable=True, default=None)
    category: Mapped[Category | None] = mapped_column(Enum(Category), nullable=True, default=None)
    agent_id: Mapped[uuid.UUID | None] = mapped_column(nullable=True, default=None)
    responses: Mapped[int] = mapped_column(default=0)
    escalated: Mapped[bool] = mapped_column(default=False)


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class IncidentLogged:
    incident_id: uuid.UUID
    customer_id: uuid.UUID
    description: str
    logged_by: uuid.UUID


@attrs.frozen
class IncidentCategorised:
    category: Category


@attrs.frozen
class IncidentPrioritised:
    priority: Priority


@attrs.frozen
class AgentAssigned:
    agent_id: uuid.UUID


@attrs.frozen
class AgentResponded:
    incident_id: uuid.UUID
    agent_id: uuid.UUID
    content: str
    visible_to_customer: bool


@attrs.frozen
class CustomerResponded:
    customer_id: uuid.UUID
    content: str


@attrs.frozen
class IncidentResolved:
    resolution: Resolution
    resolved_by: uuid.UUID


@attrs.frozen
class ResolutionAcknowledged:
    acknowledged_by: uuid.UUID


@attrs.frozen
class IncidentClosed:
    closed_by: uuid.UUID


@attrs.frozen
class IncidentEscalated:
    waited: str


# --- payloads: untrusted input is limited here, before any step runs -------------------------


_CONTENT: list[Callable[[Any, Any, str], None]] = [attrs.validators.min_len(1), attrs.validators.max_len(2000)]


@attrs.frozen
class RegisterCustomer:
    name: str = attrs.field(validator=[attrs.validators.min_len(1), attrs.validators.max_len(200)])


@attrs.frozen
class LogIncident:
    customer_id: uuid.UUID
    description: str = attrs.field(validator=_CONTENT)


@attrs.frozen
class Categorise:
    incident_id: uuid.UUID
    category: Category
    version: int


@attrs.frozen
class Prioritise:
    incident_id: uuid.UUID
    priority: Priority
    version: int


@attrs.frozen
class AssignAgent:
    incident_id: uuid.UUID
    version: int


@attrs.frozen
class Respond:
    incident_id: uuid.UUID
    content: str = attrs.field(validator=_CONTENT)
    visible_to_customer: bool = True


@attrs.frozen
class Resolve:
    incident_id: uuid.UUID
    resolution: Resolution
    version: int


@attrs.frozen
class ByIncident:
    incident_id: uuid.UUID


@attrs.frozen
class ByCustomer:
    customer_id: uuid.UUID


@attrs.frozen
class Summary:
    """Marten's ``CustomerIncidentsSummary``: how many of a customer's incidents are where."""

    pending: int = 0
    resolved: int = 0
    acknowledged: int = 0
    closed: int = 0


# --- the feature ---------------------------------------------------------------------------

helpdesk = Feature("helpdesk", requires=["mail.send"])
helpdesk.entity(Customer)
helpdesk.entity(Incident)
for _event, _name in (
    (IncidentLogged, "incident-logged"),
    (IncidentCategorised, "incident-categorised"),
    (IncidentPrioritised, "incident-prioritised"),
    (AgentAssigned, "agent-assigned"),
    (AgentResponded, "agent-responded"),
    (CustomerResponded, "customer-responded"),
    (IncidentResolved, "incident-resolved"),
    (ResolutionAcknowledged, "resolution-acknowledged"),
    (IncidentClosed, "incident-closed"),
    (IncidentEscalated, "incident-escalated"),
):
    helpdesk.event(_event, name=_name)


@helpdesk.projector(Incident, IncidentLogged)
def _logged(row: Incident, event: IncidentLogged) -> None:
    row.customer_id, row.description, row.status = event.customer_id, event.description, Status.PENDING


def _new_incident(incident_id: uuid.UUID, payload: LogIncident) -> Incident:
    """The incident under the id its creation event names: ``id`` is no argument of an
    entity's constructor, and ``create`` keeps an id the entity has."""
    incident = Incident(customer_id=payload.customer_id, description=payload.description)
    incident.id = incident_id
    return incident


@helpdesk.projector(Incident, IncidentCategorised)
def _categorised(row: Incident, event: IncidentCategorised) -> None:
    row.category = event.category


@helpdesk.projector(Incident, IncidentPrioritised)
def _prioritised(row: Incident, event: IncidentPrioritised) -> None:
    row.priority = event.priority


@helpdesk.projector(Incident, AgentAssigned)
def _assigned(row: Incident, event: AgentAssigned) -> None:
    row.agent_id = event.agent_id


@helpdesk.projector(Incident, AgentResponded)
def _agent_responded(row: Incident, event: AgentResponded) -> None:
    row.responses += 1


@helpdesk.projector(Incident, CustomerResponded)
def _customer_responded(row: Incident, event: CustomerResponded) -> None:
    row.responses += 1


@helpdesk.projector(Incident, IncidentResolved)
def _resolved(row: Incident, event: IncidentResolved) -> None:
    row.status = Status.RESOLVED


@helpdesk.projector(Incident, ResolutionAcknowledged)
def _acknowledged(row: Incident, event: ResolutionAcknowledged) -> None:
    row.status = Status.RESOLUTION_ACKNOWLEDGED


@helpdesk.projector(Incident, IncidentClosed)
def _closed(row: Incident, event: IncidentClosed) -> None:
    row.status = Status.CLOSED


@helpdesk.projector(Incident, IncidentEscalated)
def _escalated(row: Incident, event: IncidentEscalated) -> None:
    row.escalated = True


def _changed_since_read(read: int, incident: Incident) -> Failure:
    """The answer to a command about a version of the incident that is no longer its own
    (append_event takes no version=: the guard before it compares)."""
    details = {"expected_version": read, "current_version": incident.version}
    return fail("version_conflict", "the incident changed since it was read", details)


def _not_closed(incident: Incident) -> bool:
    return incident.status is not Status.CLOSED


register_customer = helpdesk.write_handler(
    "customer:register",
    helpdesk.pipeline(RegisterCustomer)
    .create("customer", Customer, data=lambda c: Customer(name=c.payload.name))
    .return_(lambda c: ok(c.steps["customer"].id)),
)

log_incident = helpdesk.write_handler(
    "incident:log",
    helpdesk.pipeline(LogIncident)
    # The customer must be one of this tenant's: get_one reads within the tenant.
    .get_one("customer", lambda c: select(Customer).where(Customer.id == c.payload.customer_id))
    # Marten's IncidentLogged names its stream; the id is chosen first so that the creation
    # event (which starts the SLA workflow) can carry it.
    .compute("incident_id", lambda c: uuid.uuid4())
    .create(
        "incident",
        Incident,
        data=lambda c: _new_incident(c.steps["incident_id"], c.payload),
        event=lambda c: IncidentLogged(c.steps["incident_id"], c.payload.customer_id, c.payload.description, c.user.id),
    )
    .return_(lambda c: ok(c.steps["incident"].id)),
    roles=["Customer", "Agent"],
)

categorise = helpdesk.write_handler(
    "incident:categorise",
    helpdesk.pipeline(Categorise)
    .get_one("incident", lambda c: select(Incident).where(Incident.id == c.payload.incident_id))
    .guard(
        lambda c: c.steps["incident"].version == c.payload.version,
        otherwise=lambda c: _changed_since_read(c.payload.version, c.steps["incident"]),
    )
    .guard(
        lambda c: _not_closed(c.steps["incident"]), otherwise=lambda c: fail("unprocessable", "the incident is closed")
    )
    .branch(
        when=lambda c: c.steps["incident"].category is not c.payload.category,
        on_true=lambda b: b.append_event(
            Incident, id=lambda c: c.payload.incident_id, event=lambda c: IncidentCategorised(c.payload.category)
        ),
    )
    .return_(lambda c: ok(c.steps["incident"].version)),
    roles=["Agent"],
)

prioritise = helpdesk.write_handler(
    "incident:prioritise",
    helpdesk.pipeline(Prioritise)
    .get_one("incident", lambda c: select(Incident).where(Incident.id == c.payload.incident_id))
    .guard(
        lambda c: c.steps["incident"].version == c.payload.version,
        otherwise=lambda c: _changed_since_read(c.payload.version, c.steps["incident"]),
    )
    .guard(
        lambda c: _not_closed(c.steps["incident"]), otherwise=lambda c: fail("unprocessable", "the incident is closed")
    )
    .append_event(Incident, id=lambda c: c.payload.incident_id, event=lambda c: IncidentPrioritised(c.payload.priority))
    .return_(lambda c: ok(c.steps["incident"].version)),
    roles=["Agent"],
)

# An agent takes the incident as it read it: two agents taking it from the same version
# are one assignment and one version_conflict, never two assignments.
assign_agent = helpdesk.write_handler(
    "incident:assign",
    helpdesk.pipeline(AssignAgent)
    .get_one("incident", lambda c: select(Incident).where(Incident.id == c.payload.incident_id))
    .guard(
        lambda c: c.steps["incident"].version == c.payload.version,
        otherwise=lambda c: _changed_since_read(c.payload.version, c.steps["incident"]),
    )
    .guard(
        lambda c: c.steps["incident"].agent_id is None,
        otherwise=lambda c: fail("unprocessable", "the incident has an agent already"),
    )
    .append_event(Incident, id=lambda c: c.payload.incident_id, event=lambda c: AgentAssigned(c.user.id))
    .return_(lambda c: ok(c.steps["incident"].version)),
    roles=["Agent"],
)

respond_as_agent = helpdesk.write_handler(
    "incident:agent-respond",
    helpdesk.pipeline(Respond)
    .get_one("incident", lambda c: select(Incident).where(Incident.id == c.payload.incident_id))
    .guard(
        lambda c: _not_closed(c.steps["incident"]), otherwise=lambda c: fail("unprocessable", "the incident is closed")
    )
    .append_event(
        Incident,
        id=lambda c: c.payload.incident_id,
        event=lambda c: AgentResponded(
            c.payload.incident_id, c.user.id, c.payload.content, c.payload.visible_to_customer
        ),
    )
    .return_(lambda c: ok(c.steps["incident"].responses)),
    roles=["Agent"],
)

respond_as_customer = helpdesk.write_handler(
    "incident:customer-respond",
    helpdesk.pipeline(Respond)
    .get_one("incident", lambda c: select(Incident).where(Incident.id == c.payload.incident_id))
    .guard(
        lambda c: _not_closed(c.steps["incident"]), otherwise=lambda c: fail("unprocessable", "the incident is closed")
    )
    .append_event(
        Incident,
        id=lambda c: c.payload.incident_id,
        event=lambda c: CustomerResponded(c.steps["incident"].customer_id, c.payload.content),
    )
    .return_(lambda c: ok(c.steps["incident"].responses)),
    roles=["Customer"],
)

resolve = helpdesk.write_handler(
    "incident:resolve",
    helpdesk.pipeline(Resolve)
    .get_one("incident", lambda c: select(Incident).where(Incident.id == c.payload.incident_id))
    .guard(
        lambda c: c.steps["incident"].status is Status.PENDING,
        otherwise=lambda c: fail("unprocessable", f"the incident is {c.steps['incident'].status.value}, not pending"),
    )
    .append_event(
        Incident,
        id=lambda c: c.payload.incident_id,
        event=lambda c: IncidentResolved(c.payload.resolution, c.user.id),
    )
    .return_(lambda c: ok(c.steps["incident"].status.value)),
    roles=["Agent"],
)

acknowledge = helpdesk.write_handler(
    "incident:acknowledge",
    helpdesk.pipeline(ByIncident)
    .get_one("incident", lambda c: select(Incident).where(Incident.id == c.payload.incident_id))
    .guard(
        lambda c: c.steps["incident"].status is Status.RESOLVED,
        otherwise=lambda c: fail("unprocessable", f"the incident is {c.steps['incident'].status.value}, not resolved"),
    )
    .append_event(Incident, id=lambda c: c.payload.incident_id, event=lambda c: ResolutionAcknowledged(c.user.id))
    .return_(lambda c: ok(c.steps["incident"].status.value)),
    roles=["Customer"],
)

close = helpdesk.write_handler(
    "incident:close",
    helpdesk.pipeline(ByIncident)
    .get_one("incident", lambda c: select(Incident).where(Incident.id == c.payload.incident_id))
    .guard(
        lambda c: c.steps["incident"].status is Status.RESOLUTION_ACKNOWLEDGED,
        otherwise=lambda c: fail(
            "unprocessable", f"the incident is {c.steps['incident'].status.value}, not acknowledged"
        ),
    )
    .append_event(Incident, id=lambda c: c.payload.incident_id, event=lambda c: IncidentClosed(c.user.id))
    .return_(lambda c: ok(c.steps["incident"].status.value)),
    roles=["Agent"],
)

customer_summary = helpdesk.query_handler(
    "customer:summary",
    helpdesk.query_pipeline(ByCustomer)
    # Several columns per row: a read step keeps one, so the grouped counts are read with
    # c.db (filtered to the tenant as the read steps are).
    .compute(
        "by_status",
        lambda c: {
            status: count
            for status, count in c.db.execute(
                select(Incident.status, func.count())
                .where(Incident.customer_id == c.payload.customer_id)
                .group_by(Incident.status)
            )
        },
    )
    .return_(
        lambda c: ok(
            Summary(
                pending=c.steps["by_status"].get(Status.PENDING, 0),
                resolved=c.steps["by_status"].get(Status.RESOLVED, 0),
                acknowledged=c.steps["by_status"].get(Status.RESOLUTION_ACKNOWLEDGED, 0),
                closed=c.steps["by_status"].get(Status.CLOSED, 0),
            )
        )
    ),
)

# The first-response SLA.  The run starts in a worker pass after the incident was logged,
# so an agent may have answered already: a wait sees only events appended after the run
# reached it.  The incident is read FOR UPDATE first, so an answer that commits meanwhile
# is either counted here or comes after the wait (docs/workflows.md).
first_response_sla = helpdesk.workflow(
    "first-response-sla",
    trigger=on_event(IncidentLogged),
    pipeline=helpdesk.workflow_pipeline(IncidentLogged)
    .get_one(
        "incident",
        lambda c: select(Incident).where(Incident.id == c.payload.incident_id).with_for_update(),
    )
    .branch(
        name="await",
        when=lambda c: c.steps["incident"].responses == 0,
        on_true=lambda b: b.wait_for_event(
            "answer",
            AgentResponded,
            key=lambda c: c.payload.incident_id,
            event_key=lambda e: e.incident_id,
            timeout=FIRST_RESPONSE_SLA,
        ).branch(
            name="escalate",
            when=lambda c: c.steps["answer"] is None,
            on_true=lambda b: b.append_event(
                Incident, id=lambda c: c.payload.incident_id, event=lambda c: IncidentEscalated("PT4H")
            ).send_mail(
                to=SUPERVISORS,
                subject=lambda c: f"Incident {c.payload.incident_id} has no answer after 4 hours",
                body=lambda c: c.payload.description,
            ),
        ),
    )
    .return_(
        lambda c: ok("answered" if c.steps["incident"].responses > 0 or c.steps["answer"] is not None else "escalated")
    ),
)
