"""Marten's help desk, ported (examples/ports/helpdesk.py), on SQLite and PostgreSQL: an
incident's life from logged to closed, the first-response SLA workflow (answered in time,
answered before the run started, escalated at its timeout), two agents taking one
incident from the same version, another tenant, and hostile input."""

from __future__ import annotations

import email
import email.policy
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from _support import failure_of, ok_data

from examples.ports.helpdesk import (
    FIRST_RESPONSE_SLA,
    AgentAssigned,
    AgentResponded,
    AssignAgent,
    ByCustomer,
    ByIncident,
    Categorise,
    Category,
    Incident,
    IncidentCategorised,
    IncidentClosed,
    IncidentEscalated,
    IncidentLogged,
    IncidentResolved,
    LogIncident,
    RegisterCustomer,
    Resolution,
    ResolutionAcknowledged,
    Resolve,
    Respond,
    Summary,
    acknowledge,
    assign_agent,
    categorise,
    close,
    customer_summary,
    first_response_sla,
    helpdesk,
    log_incident,
    register_customer,
    resolve,
    respond_as_agent,
)
from kumiko_typed import App, MaildirTransport, Ok, User
from kumiko_typed.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 4, 6, 9, 0, tzinfo=UTC))


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock, tmp_path: Path) -> App:
    return app_on([helpdesk], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))


def _desk(tenant: uuid.UUID | None = None) -> tuple[User, User, User]:
    tenant = tenant or uuid.uuid4()
    customer = User(id=uuid.uuid4(), tenant_id=tenant, roles={"Customer"})
    agent = User(id=uuid.uuid4(), tenant_id=tenant, roles={"Agent"})
    other_agent = User(id=uuid.uuid4(), tenant_id=tenant, roles={"Agent"})
    return customer, agent, other_agent


def _logged(app: App, customer: User, text: str = "the printer is on fire") -> tuple[uuid.UUID, uuid.UUID]:
    customer_id: uuid.UUID = ok_data(app.dispatch(register_customer, RegisterCustomer("ACME"), user=customer))
    incident: uuid.UUID = ok_data(app.dispatch(log_incident, LogIncident(customer_id, text), user=customer))
    return customer_id, incident


def _events(app: App, user: User, incident: uuid.UUID) -> list[object]:
    return [e.event for e in ok_data(app.read_stream(Incident, incident, user=user))]


def _sla_run(app: App) -> uuid.UUID:
    (run,) = app.runs(workflow="helpdesk:first-response-sla")
    return run.run_id


def test_an_incident_from_logged_to_closed(app: App, tmp_path: Path) -> None:
    customer, agent, _ = _desk()
    customer_id, incident = _logged(app, customer)
    assert app.run_worker(once=True)["started"] == 1  # the SLA run waits for an answer
    run = app.get_run(_sla_run(app))
    assert run is not None and (run.status, run.path) == ("suspended", "await/on_true/answer")

    assert app.dispatch(categorise, Categorise(incident, Category.HARDWARE, 1), user=agent) == Ok(2)
    assert app.dispatch(assign_agent, AssignAgent(incident, 2), user=agent) == Ok(3)
    assert app.dispatch(respond_as_agent, Respond(incident, "on my way"), user=agent) == Ok(1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(first_response_sla, _sla_run(app), user=customer) == Ok("answered")

    assert app.dispatch(resolve, Resolve(incident, Resolution.FIXED, 5), user=agent) == Ok("resolved")
    assert app.query(customer_summary, ByCustomer(customer_id), user=agent) == Ok(Summary(resolved=1))
    assert app.dispatch(acknowledge, ByIncident(incident), user=customer) == Ok("resolution-acknowledged")
    assert app.dispatch(close, ByIncident(incident), user=agent) == Ok("closed")
    assert app.query(customer_summary, ByCustomer(customer_id), user=agent) == Ok(Summary(closed=1))

    assert _events(app, agent, incident) == [
        IncidentLogged(incident, customer_id, "the printer is on fire", customer.id),
        IncidentCategorised(Category.HARDWARE),
        AgentAssigned(agent.id),
        AgentResponded(incident, agent.id, "on my way", True),
        IncidentResolved(Resolution.FIXED, agent.id),
        ResolutionAcknowledged(customer.id),
        IncidentClosed(agent.id),
    ]
    # The incident's row is its events' projection: a replay finds nothing to change.
    check = ok_data(app.rebuild_projection(Incident, user=agent, verify=True))
    assert check.matches and check.streams == 1
    # A closed incident takes no more answers; nothing was mailed.
    late = failure_of(app.dispatch(respond_as_agent, Respond(incident, "again"), user=agent), "unprocessable")
    assert late.message == "the incident is closed"
    assert app.outbox() == []


def test_an_unanswered_incident_is_escalated_at_the_sla(app: App, clock: FakeClock, tmp_path: Path) -> None:
    customer, agent, _ = _desk()
    customer_id, incident = _logged(app, customer)
    _, answered = _logged(app, customer, "the mouse squeaks")
    app.run_worker(once=True)
    app.dispatch(respond_as_agent, Respond(answered, "have you tried oil"), user=agent)
    clock.advance(FIRST_RESPONSE_SLA - timedelta(seconds=1))
    assert app.run_worker(once=True)["resumed"] == 1  # only the answered one
    clock.advance(seconds=1)
    counts = app.run_worker(once=True)
    assert (counts["resumed"], counts["sent"]) == (1, 1)
    outcomes = sorted(ok_data(app.result(first_response_sla, r.run_id, user=customer)) for r in app.runs())
    assert outcomes == ["answered", "escalated"]
    assert _events(app, agent, incident)[-1] == IncidentEscalated("PT4H")
    ((item),) = app.outbox()
    assert (item.kind, item.status) == ("mail", "sent")
    (mail,) = (tmp_path / "mail").rglob("*.eml")
    message = email.message_from_bytes(mail.read_bytes(), policy=email.policy.default)
    # The stdlib folds this long subject right after "Subject:", and reads it back with the fold's space.
    assert message["Subject"].strip() == f"Incident {incident} has no answer after 4 hours"
    assert app.query(customer_summary, ByCustomer(customer_id), user=agent) == Ok(Summary(pending=1))


def test_an_answer_before_the_run_started_is_not_missed(app: App, clock: FakeClock) -> None:
    """The SLA run starts in a worker pass; an agent who answered before it is counted
    (the run reads the incident before it waits), not escalated four hours later."""
    customer, agent, _ = _desk()
    _, incident = _logged(app, customer)
    app.dispatch(respond_as_agent, Respond(incident, "already on it"), user=agent)
    app.run_worker(once=True)
    assert app.result(first_response_sla, _sla_run(app), user=customer) == Ok("answered")
    clock.advance(FIRST_RESPONSE_SLA)
    assert app.run_worker(once=True)["resumed"] == 0
    assert IncidentEscalated("PT4H") not in _events(app, agent, incident)


def test_two_agents_taking_one_incident_from_the_same_version(app: App) -> None:
    customer, agent, other_agent = _desk()
    _, incident = _logged(app, customer)
    assert app.dispatch(assign_agent, AssignAgent(incident, 1), user=agent) == Ok(2)  # the version it wrote
    second = failure_of(app.dispatch(assign_agent, AssignAgent(incident, 1), user=other_agent), "version_conflict")
    assert second.http_status == 409
    assert second.details == {"expected_version": 1, "current_version": 2}
    # Read again, the other agent learns it is taken.
    taken = failure_of(app.dispatch(assign_agent, AssignAgent(incident, 2), user=other_agent), "unprocessable")
    assert taken.message == "the incident has an agent already"
    assert [e for e in _events(app, agent, incident) if isinstance(e, AgentAssigned)] == [AgentAssigned(agent.id)]


def test_another_tenant_sees_and_touches_nothing(app: App) -> None:
    customer, agent, _ = _desk()
    customer_id, incident = _logged(app, customer)
    _, their_agent, _ = _desk()
    assert failure_of(app.dispatch(respond_as_agent, Respond(incident, "hi"), user=their_agent)).code == "not_found"
    assert failure_of(app.read_stream(Incident, incident, user=their_agent)).code == "not_found"
    assert app.query(customer_summary, ByCustomer(customer_id), user=their_agent) == Ok(Summary())
    # Logging an incident for another tenant's customer is refused as an unknown customer.
    their_customer = User(id=uuid.uuid4(), tenant_id=their_agent.tenant_id, roles={"Customer"})
    refused = app.dispatch(log_incident, LogIncident(customer_id, "theirs"), user=their_customer)
    assert failure_of(refused).code == "not_found"
    assert app.query(customer_summary, ByCustomer(customer_id), user=agent) == Ok(Summary(pending=1))


def test_hostile_input_is_refused_at_its_field(app: App) -> None:
    customer, agent, _ = _desk()
    customer_id, incident = _logged(app, customer)
    too_long = app.dispatch_json(
        "helpdesk:incident:log", {"customer_id": str(customer_id), "description": "x" * 2001}, user=customer
    )
    assert [d["path"] for d in failure_of(too_long, "validation_error").details] == ["$.description"]
    nul = app.dispatch_json(
        "helpdesk:incident:log", {"customer_id": str(customer_id), "description": "a\x00b"}, user=customer
    )
    assert [d["path"] for d in failure_of(nul, "validation_error").details] == ["$.description"]
    not_a_category = app.dispatch_json(
        "helpdesk:incident:categorise",
        {"incident_id": str(incident), "category": "plumbing", "version": 1},
        user=agent,
    )
    assert [d["path"] for d in failure_of(not_a_category, "validation_error").details] == ["$.category"]
    # A customer may not assign agents.
    assert failure_of(app.dispatch(assign_agent, AssignAgent(incident, 1), user=customer)).code == "access_denied"
    assert len(_events(app, agent, incident)) == 1
