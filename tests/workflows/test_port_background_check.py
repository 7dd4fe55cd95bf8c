"""Temporal's background-check sample, ported (examples/ports/background_check.py), on
SQLite and PostgreSQL: the candidate's answer and the provider's reports are events the
run waits for, each with a timeout; the provider is a real HTTP receiver on 127.0.0.1;
a repeated order returns the first run; HR cancels a run half-way; another tenant's
answer and hostile reports change nothing."""

from __future__ import annotations

import email
import email.policy
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import pytest
from _receiver import Receiver
from _support import failure_of, ok_data

from examples.ports.background_check import (
    ACCEPT_WITHIN,
    SEARCH_WITHIN,
    VALUE_TYPES,
    Answer,
    Check,
    CheckEnded,
    CheckStatus,
    OrderCheck,
    Progress,
    SearchCompleted,
    SearchRecorded,
    SearchReport,
    SsnReport,
    answer,
    background_check,
    check_status,
    checks,
    report_search,
    report_ssn,
)
from kumiko_typed import App, MaildirTransport, Ok, User
from kumiko_typed.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 5, 4, 9, 0, tzinfo=UTC))


@pytest.fixture
def app(
    app_on: Callable[..., App], clock: FakeClock, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> App:
    monkeypatch.setenv("CHECKS_PROVIDER_URL", receiver.base)
    mail = MaildirTransport(str(tmp_path / "mail"))
    return app_on([checks], clock=clock, mail=mail, value_types=VALUE_TYPES)


def _people(tenant: uuid.UUID | None = None) -> tuple[User, User, User]:
    tenant = tenant or uuid.uuid4()
    make = lambda *roles: User(id=uuid.uuid4(), tenant_id=tenant, roles=set(roles))  # noqa: E731
    return make("HR"), make("Candidate"), make("Provider")


def _ordered(
    app: App, hr: User, package: Literal["standard", "full"] = "full", who: str = "cy@example.com"
) -> tuple[uuid.UUID, uuid.UUID]:
    run = app.start_workflow(background_check, OrderCheck(who, package, "123-45-6789"), user=hr, key=who)
    info = app.get_run(run)
    assert info is not None and info.status == "suspended", info
    check: uuid.UUID = info.steps["check"].id
    return run, check


def _mail(tmp_path: Path) -> list[tuple[str, str]]:
    folder = tmp_path / "mail"
    parsed = [email.message_from_bytes(p.read_bytes(), policy=email.policy.default) for p in folder.glob("*.eml")]
    return sorted((str(m["To"]), str(m["Subject"]).strip()) for m in parsed)


def _status(app: App, hr: User, check: uuid.UUID) -> Progress:
    progress: Progress = ok_data(app.query(check_status, CheckStatus(check), user=hr))
    return progress


def test_a_full_check_runs_every_search_and_reports(app: App, receiver: Receiver, tmp_path: Path) -> None:
    hr, candidate, provider = _people()
    run, check = _ordered(app, hr)
    assert _ordered(app, hr)[0] == run  # the same order again: the same run
    app.run_worker(once=True)
    assert _mail(tmp_path) == [("cy@example.com", "Your background check")]

    assert app.dispatch(answer, Answer(check, True), user=candidate) == Ok("accepted")
    assert app.run_worker(once=True)["resumed"] == 1
    app.run_worker(once=True)  # the trace request goes out
    (trace,) = receiver.to("/ssn-trace")
    assert json.loads(trace.body) == {"check_id": str(check), "ssn": "123-45-6789"}
    assert app.dispatch(report_ssn, SsnReport(check, True), user=provider) == Ok("searching")
    reports: list[tuple[str, Literal["clear", "records-found"]]] = [
        ("federal-criminal", "clear"),
        ("state-criminal", "records-found"),
        ("motor-vehicle", "clear"),
    ]
    for search, outcome in reports:
        app.run_worker(once=True)  # resumes the run, which asks for the next search
        app.run_worker(once=True)
        assert [json.loads(r.body)["search"] for r in receiver.to(f"/search/{search}")] == [search]
        assert app.dispatch(report_search, SearchReport(check, search, outcome), user=provider) == Ok(search)
    app.run_worker(once=True)
    app.run_worker(once=True)

    results = {"federal-criminal": "clear", "state-criminal": "records-found", "motor-vehicle": "clear"}
    assert app.result(background_check, run, user=hr) == Ok(Progress("completed", results))
    assert _status(app, hr, check) == Progress("completed", results)
    assert ("hr@example.com", "Background check of cy@example.com: completed") in _mail(tmp_path)
    events = [e.event for e in ok_data(app.read_stream(Check, check, user=hr))]
    assert [e for e in events if isinstance(e, SearchRecorded)] == [SearchRecorded(k, v) for k, v in results.items()]
    assert events[-1] == CheckEnded("completed")
    # The SSN went to the provider only: no event, no row holds it.
    assert all("123-45-6789" not in repr(e) for e in events)
    assert ok_data(app.rebuild_projection(Check, user=hr, verify=True)).matches


def test_a_candidate_who_never_answers_expires_and_a_late_answer_is_refused(
    app: App, clock: FakeClock, receiver: Receiver, tmp_path: Path
) -> None:
    hr, candidate, _ = _people()
    run, check = _ordered(app, hr, "standard")
    clock.advance(ACCEPT_WITHIN - timedelta(seconds=1))
    assert app.run_worker(once=True)["resumed"] == 0
    clock.advance(seconds=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(background_check, run, user=hr) == Ok(Progress("expired", {}))
    late = failure_of(app.dispatch(answer, Answer(check, True), user=candidate), "unprocessable")
    assert late.message == "the check is expired, not awaiting an answer"
    app.run_worker(once=True)
    assert receiver.requests == []
    assert ("hr@example.com", "Background check of cy@example.com: expired") in _mail(tmp_path)


def test_a_search_without_an_answer_times_out_and_the_check_goes_on(app: App, clock: FakeClock) -> None:
    hr, candidate, provider = _people()
    run, check = _ordered(app, hr, "standard")
    app.dispatch(answer, Answer(check, True), user=candidate)
    app.run_worker(once=True)
    app.dispatch(report_ssn, SsnReport(check, True), user=provider)
    app.run_worker(once=True)
    clock.advance(SEARCH_WITHIN)
    app.run_worker(once=True)
    assert app.result(background_check, run, user=hr) == Ok(Progress("completed", {"federal-criminal": "timed out"}))


def test_hr_cancels_a_check_half_way(app: App, clock: FakeClock, tmp_path: Path) -> None:
    """``cancel_run`` stops the run for good: a later report does not resume it and HR gets
    no report.  It runs no step of the run, so the check's row stays where the run left it."""
    hr, candidate, provider = _people()
    run, check = _ordered(app, hr)
    app.dispatch(answer, Answer(check, True), user=candidate)
    app.run_worker(once=True)
    app.dispatch(report_ssn, SsnReport(check, True), user=provider)
    app.run_worker(once=True)
    cancelled = ok_data(app.cancel_run(run, user=hr, reason="the candidate withdrew"))
    assert cancelled.status == "cancelled"
    app.dispatch(report_search, SearchReport(check, "federal-criminal", "clear"), user=provider)
    clock.advance(SEARCH_WITHIN * 3)
    assert app.run_worker(once=True)["resumed"] == 0
    assert failure_of(app.result(background_check, run, user=hr), "status_conflict").details["status"] == "cancelled"
    assert _status(app, hr, check) == Progress("searching", {})
    assert not any(to == "hr@example.com" for to, _ in _mail(tmp_path))


def test_another_tenant_cannot_answer_for_the_candidate(app: App, clock: FakeClock) -> None:
    hr, _, _ = _people()
    run, check = _ordered(app, hr, "standard")
    _, stranger, their_provider = _people()
    assert failure_of(app.dispatch(answer, Answer(check, True), user=stranger)).code == "not_found"
    assert failure_of(app.dispatch(report_ssn, SsnReport(check, True), user=their_provider)).code == "not_found"
    assert (
        failure_of(
            app.query(
                check_status, CheckStatus(check), user=User(id=uuid.uuid4(), tenant_id=stranger.tenant_id, roles={"HR"})
            )
        ).code
        == "not_found"
    )
    # The same key in another tenant is another run.
    their_hr = User(id=uuid.uuid4(), tenant_id=stranger.tenant_id, roles={"HR"})
    assert _ordered(app, their_hr, "standard")[0] != run
    clock.advance(ACCEPT_WITHIN)
    app.run_worker(once=True)
    assert app.result(background_check, run, user=hr) == Ok(Progress("expired", {}))


def test_hostile_reports_are_refused_at_their_field(app: App) -> None:
    hr, candidate, provider = _people()
    _run, check = _ordered(app, hr, "standard")
    app.dispatch(answer, Answer(check, True), user=candidate)
    app.run_worker(once=True)
    app.dispatch(report_ssn, SsnReport(check, True), user=provider)
    bad = app.dispatch_json(
        "checks:search:report",
        {"check_id": str(check), "search": "../../admin", "outcome": "clear; DROP TABLE bg_check"},
        user=provider,
    )
    assert sorted(d["path"] for d in failure_of(bad, "validation_error").details) == ["$.outcome", "$.search"]
    # A search the package does not run is refused by the check, not appended.
    other = app.dispatch(report_search, SearchReport(check, "motor-vehicle", "clear"), user=provider)
    assert failure_of(other, "unprocessable").message == "the check is not waiting for motor-vehicle"
    # A candidate is no provider.
    assert failure_of(app.dispatch(report_ssn, SsnReport(check, False), user=candidate)).code == "access_denied"
    with pytest.raises(ValueError):
        OrderCheck("no-at-sign", "full", "123-45-6789")
    events = [e.event for e in ok_data(app.read_stream(Check, check, user=hr))]
    assert not [e for e in events if isinstance(e, SearchCompleted)]
