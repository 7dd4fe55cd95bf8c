"""A multi-level approval chain (examples/ports/approvals.py), on SQLite and PostgreSQL:
mails go to a real maildir through the outbox, and the App's fake clock moves the
deadlines."""

from __future__ import annotations

import email
import email.policy
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from _worker_thread import Worker

from examples.ports.approvals import (
    DECIDE_WITHIN,
    Answer,
    Approver,
    FileRequest,
    Level,
    Lookup,
    RequestView,
    approvals,
    approve,
    chain,
    file_request,
    reject,
    show_request,
    withdraw,
)
from kumiko_typed import App, Failure, MaildirTransport, Ok, User
from kumiko_typed.testing import FakeClock

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TENANT, OTHER = uuid.uuid4(), uuid.uuid4()
ANA = User(id=uuid.uuid4(), tenant_id=TENANT, roles={"Employee"})


def approver(name: str, tenant: uuid.UUID = TENANT) -> tuple[User, Approver]:
    user = User(id=uuid.uuid4(), tenant_id=tenant, roles={"Approver"})
    return user, Approver(user.id, f"{name}@example.com")


BOB, BOB_A = approver("bob")
CARA, CARA_A = approver("cara")
DEPUTY, DEPUTY_A = approver("deputy")
STRANGER, _ = approver("stranger", OTHER)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock, tmp_path: Path) -> App:
    return app_on([approvals], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))


def filed(app: App, *levels: Level, title: str = "A new laptop") -> uuid.UUID:
    result = app.dispatch(file_request, FileRequest("ana@example.com", title, Decimal("1200"), list(levels)), user=ANA)
    assert isinstance(result, Ok), result
    request: uuid.UUID = result.data
    return request


def view(app: App, request: uuid.UUID, user: User = ANA) -> RequestView:
    shown = app.query(show_request, Lookup(request), user=user)
    assert isinstance(shown, Ok), shown
    return shown.data


def outcome(app: App) -> str:
    (run,) = app.runs(workflow="approvals:chain")
    return run.status if run.status != "suspended" else f"suspended at {run.path}"


def mail(tmp_path: Path) -> list[tuple[str, str]]:
    parsed = [
        email.message_from_bytes(p.read_bytes(), policy=email.policy.default) for p in (tmp_path / "mail").glob("*.eml")
    ]
    return sorted((str(m["To"]), str(m["Subject"])) for m in parsed)


def filing(title: str, levels: list[dict[str, object]] | None = None) -> dict[str, object]:
    """A filing as JSON, which reaches the payload's validators."""
    person = {"user_id": str(BOB.id), "email": "bob@example.com"}
    given = [{"approver": person, "deputy": person}] if levels is None else levels
    return {"requester_email": "ana@example.com", "title": title, "amount": "3", "levels": given}


TWO = (Level(BOB_A, DEPUTY_A), Level(CARA_A, DEPUTY_A))


def test_every_approver_approves_in_order(app: App, tmp_path: Path) -> None:
    request = filed(app, *TWO)
    app.run_worker(once=True)
    assert view(app, request) == RequestView(request, "pending", 0, 2, BOB.id, None)
    assert app.dispatch(approve, Answer(request, "fine"), user=CARA) == Failure(
        "unprocessable", "the request is not waiting for your decision"
    )
    assert app.dispatch(approve, Answer(request, "fine"), user=BOB) == Ok("pending")
    app.run_worker(once=True)
    assert view(app, request) == RequestView(request, "pending", 1, 2, CARA.id, "fine")
    assert app.dispatch(approve, Answer(request), user=CARA) == Ok("pending")
    app.run_worker(once=True)
    assert view(app, request) == RequestView(request, "approved", 2, 2, None, None)
    (run,) = app.runs(workflow="approvals:chain")
    assert app.result(chain, run.run_id, user=ANA) == Ok("approved")
    assert mail(tmp_path) == [
        ("ana@example.com", "Your request A new laptop is decided"),
        ("bob@example.com", "Please decide: A new laptop"),
        ("cara@example.com", "Please decide: A new laptop"),
    ]


def test_the_first_rejection_ends_the_chain(app: App, tmp_path: Path) -> None:
    request = filed(app, *TWO)
    app.run_worker(once=True)
    assert app.dispatch(reject, Answer(request, "too dear"), user=BOB) == Ok("rejected")
    app.run_worker(once=True)
    assert view(app, request) == RequestView(request, "rejected", 0, 2, None, "too dear")
    assert outcome(app) == "completed"
    assert [to for to, _ in mail(tmp_path)] == ["ana@example.com", "bob@example.com"]  # cara never asked
    assert app.dispatch(approve, Answer(request), user=CARA) == Failure("unprocessable", "the request is rejected")


def test_the_same_decision_twice_counts_once(app: App) -> None:
    request = filed(app, *TWO)
    app.run_worker(once=True)
    assert app.dispatch(approve, Answer(request), user=BOB) == Ok("pending")
    again = app.dispatch(approve, Answer(request), user=BOB)
    assert again == Failure("unprocessable", "the request is not waiting for your decision")
    app.run_worker(once=True)
    assert view(app, request).approvals == 1


def test_a_silent_approver_is_escalated_once_then_the_request_expires(
    app: App, clock: FakeClock, tmp_path: Path
) -> None:
    request = filed(app, *TWO)
    app.run_worker(once=True)
    clock.advance(DECIDE_WITHIN)
    # At the deadline itself the approver is refused: the run takes the timeout from that instant.
    late = app.dispatch(approve, Answer(request), user=BOB)
    assert late == Failure("unprocessable", "the time to decide on the request has run out")
    app.run_worker(once=True)
    assert view(app, request).waiting_for == DEPUTY.id
    assert app.dispatch(approve, Answer(request), user=BOB) == Failure(
        "unprocessable", "the request is not waiting for your decision"
    )
    clock.advance(DECIDE_WITHIN - timedelta(seconds=1))
    app.run_worker(once=True)
    assert view(app, request).status == "pending"
    clock.advance(seconds=1)
    app.run_worker(once=True)
    assert view(app, request) == RequestView(request, "expired", 0, 2, None, None)
    (run,) = app.runs(workflow="approvals:chain")
    assert app.result(chain, run.run_id, user=ANA) == Ok("expired")
    assert ("deputy@example.com", "Please decide (as deputy): A new laptop") in mail(tmp_path)


def test_a_deputy_decides_for_the_silent_approver(app: App, clock: FakeClock) -> None:
    request = filed(app, *TWO)
    app.run_worker(once=True)
    clock.advance(DECIDE_WITHIN)
    app.run_worker(once=True)
    assert app.dispatch(approve, Answer(request), user=DEPUTY) == Ok("pending")
    app.run_worker(once=True)
    assert view(app, request).waiting_for == CARA.id
    app.dispatch(approve, Answer(request), user=CARA)
    app.run_worker(once=True)
    assert view(app, request).status == "approved"


def test_a_decision_a_second_before_the_deadline_counts_though_read_after_it(app: App, clock: FakeClock) -> None:
    request = filed(app, *TWO)
    app.run_worker(once=True)
    clock.advance(DECIDE_WITHIN - timedelta(seconds=1))
    assert app.dispatch(reject, Answer(request), user=BOB) == Ok("rejected")
    clock.advance(hours=1)
    app.run_worker(once=True)
    assert view(app, request).status == "rejected"
    assert outcome(app) == "completed"


def test_the_requester_withdraws_while_it_waits(app: App, tmp_path: Path) -> None:
    request = filed(app, *TWO)
    app.run_worker(once=True)
    app.dispatch(approve, Answer(request), user=BOB)
    app.run_worker(once=True)
    assert app.dispatch(withdraw, Answer(request, "bought it myself"), user=ANA) == Ok("withdrawn")
    app.run_worker(once=True)
    assert view(app, request) == RequestView(request, "withdrawn", 1, 2, None, "bought it myself")
    assert outcome(app) == "completed"
    assert app.dispatch(approve, Answer(request), user=CARA) == Failure("unprocessable", "the request is withdrawn")
    assert app.dispatch(withdraw, Answer(request), user=ANA) == Failure("unprocessable", "the request is withdrawn")


def test_only_the_requester_withdraws(app: App) -> None:
    request = filed(app, *TWO)
    colleague = User(id=uuid.uuid4(), tenant_id=TENANT, roles={"Employee"})
    refused = app.dispatch(withdraw, Answer(request), user=colleague)
    assert isinstance(refused, Failure) and refused.code == "not_found", refused


def test_another_tenant_sees_no_request(app: App) -> None:
    request = filed(app, *TWO)
    app.run_worker(once=True)
    foreign = User(id=BOB.id, tenant_id=OTHER, roles={"Approver"})  # even Bob's id, in another tenant
    for handler in (approve, reject):
        for user in (STRANGER, foreign):
            refused = app.dispatch(handler, Answer(request), user=user)
            assert isinstance(refused, Failure) and refused.code == "not_found", refused
            assert str(request) not in refused.message
    shown = app.query(show_request, Lookup(request), user=STRANGER)
    assert isinstance(shown, Failure) and shown.code == "not_found"
    app.run_worker(once=True)
    assert view(app, request).waiting_for == BOB.id


def test_an_empty_chain_is_refused_when_filed(app: App) -> None:
    refused = app.dispatch_json("approvals:request:file", filing("Pens", levels=[]), user=ANA)
    assert isinstance(refused, Failure) and refused.code == "validation_error", refused
    assert refused.details == [{"path": "$.levels", "message": "Length of 'levels' must be >= 1: 0"}]
    assert app.runs() == []


def test_the_same_approver_twice_decides_twice(app: App) -> None:
    request = filed(app, Level(BOB_A, DEPUTY_A), Level(BOB_A, DEPUTY_A))
    app.run_worker(once=True)
    assert app.dispatch(approve, Answer(request), user=BOB) == Ok("pending")
    app.run_worker(once=True)
    assert view(app, request).waiting_for == BOB.id
    assert app.dispatch(approve, Answer(request), user=BOB) == Ok("pending")
    app.run_worker(once=True)
    assert view(app, request) == RequestView(request, "approved", 2, 2, None, None)


def test_two_hundred_approvers(app: App) -> None:
    people = [approver(f"a{i}") for i in range(200)]
    request = filed(app, *(Level(a, DEPUTY_A) for _, a in people))
    app.run_worker(once=True)
    for user, _ in people:
        assert view(app, request).waiting_for == user.id
        assert app.dispatch(approve, Answer(request), user=user) == Ok("pending")
        app.run_worker(once=True)
    assert view(app, request) == RequestView(request, "approved", 200, 200, None, None)
    assert len(app.outbox()) == 201


def test_hostile_text_is_stored_as_given_or_refused(app: App, tmp_path: Path) -> None:
    title = "Ünïcødé 🚲 ' OR 1=1; -- \\ %s"
    request = filed(app, *TWO, title=title)
    app.run_worker(once=True)
    # NUL is refused by name on both databases (PostgreSQL stores no NUL in text), before any write.
    nul = app.dispatch(reject, Answer(request, "a\u0000b"), user=BOB)
    assert isinstance(nul, Failure) and nul.code == "validation_error", nul
    assert "NUL" in nul.message and "$.note" in nul.message
    assert view(app, request).status == "pending"
    note = "\u202eevil\x1b[31m\x7f" + "é" * 480
    assert app.dispatch(reject, Answer(request, note), user=BOB) == Ok("rejected")
    app.run_worker(once=True)
    assert view(app, request).note == note
    assert ("bob@example.com", f"Please decide: {title}") in mail(tmp_path)
    for bad in ("x" * 201, "Laptop\r\nBcc: eve@example.com", ""):
        refused = app.dispatch_json("approvals:request:file", filing(bad), user=ANA)
        assert isinstance(refused, Failure) and refused.code == "validation_error", (bad, refused)
    for address in ("bob\x00@example.com", "bob@example.com\r\nBcc: eve@example.com", "bob@exa\x1bmple.com"):
        person = {"user_id": str(BOB.id), "email": address}
        refused = app.dispatch_json(
            "approvals:request:file", filing("Pens", [{"approver": person, "deputy": person}]), user=ANA
        )
        assert isinstance(refused, Failure) and refused.code == "validation_error", (address, refused)
        assert isinstance(refused.details, list), refused
        assert refused.details[0]["path"] == "$.levels[0].approver.email", refused
    too_long = app.dispatch_json("approvals:request:approve", {"request_id": str(request), "note": "n" * 501}, user=BOB)
    assert isinstance(too_long, Failure) and too_long.code == "validation_error"


def test_two_workers_at_once_advance_each_request_once(app: App) -> None:
    requests = [filed(app, *TWO) for _ in range(6)]
    app.run_worker(once=True)
    for request in requests:
        assert app.dispatch(approve, Answer(request), user=BOB) == Ok("pending")
    start = threading.Barrier(2)
    raised: list[BaseException] = []

    def work() -> None:
        start.wait()
        try:
            app.run_worker(once=True)
        except BaseException as exc:
            raised.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert raised == []
    app.run_worker(once=True)  # a segment that lost a race is due again within a second
    for request in requests:
        assert view(app, request).waiting_for == CARA.id
    asked = [item for item in app.outbox() if item.target == "cara@example.com"]
    assert len(asked) == 6


def test_decisions_while_two_workers_loop_lose_no_wake_up(app: App) -> None:
    """Decisions commit while two looping workers feed, resume and suspend the runs: each
    wakes its run once, and every chain ends approved."""
    requests = [filed(app, *TWO, Level(BOB_A, DEPUTY_A)) for _ in range(4)]
    workers = [Worker(app), Worker(app)]
    try:
        deadline = time.monotonic() + 90
        pending = set(requests)
        while pending and time.monotonic() < deadline:
            for request in list(pending):
                seen = view(app, request)
                if seen.status == "approved":
                    pending.discard(request)
                elif seen.waiting_for is not None:
                    user = BOB if seen.waiting_for == BOB.id else CARA
                    assert app.dispatch(approve, Answer(request), user=user) == Ok("pending")
            time.sleep(0.05)
    finally:
        for worker in workers:
            worker.stop()
    assert [w.raised for w in workers] == [[], []]
    assert pending == set()
    assert [view(app, r).approvals for r in requests] == [3, 3, 3, 3]
    assert {run.status for run in app.runs(workflow="approvals:chain")} == {"completed"}


def test_a_withdrawal_before_any_worker_ran_asks_no_one(app: App, tmp_path: Path) -> None:
    request = filed(app, *TWO)
    assert app.dispatch(withdraw, Answer(request), user=ANA) == Ok("withdrawn")
    app.run_worker(once=True)
    assert outcome(app) == "completed"
    assert view(app, request).status == "withdrawn"
    assert mail(tmp_path) == [("ana@example.com", "Your request A new laptop is decided")]


def test_the_same_decision_sent_twice_at_once_counts_once(app: App) -> None:
    """A double click: two requests at once, one recorded, the other told so, the same
    way on both databases, never an internal error."""
    request = filed(app, *TWO)
    app.run_worker(once=True)
    start = threading.Barrier(2)
    results: list[object] = []

    def decide() -> None:
        start.wait()
        results.append(app.dispatch(approve, Answer(request), user=BOB))

    threads = [threading.Thread(target=decide) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # The read is locked (FOR UPDATE): the second waits for the first and reads its decision.
    assert sorted(map(repr, results)) == sorted(
        map(repr, [Ok("pending"), Failure("unprocessable", "the request is not waiting for your decision")])
    )
    app.run_worker(once=True)
    assert view(app, request).approvals == 1 and view(app, request).waiting_for == CARA.id
