"""The DDD book's cargo shipping sample, as the ``eventsourcing`` library has it, ported
(examples/ports/cargo.py) and run on SQLite and PostgreSQL: the book's Hongkong-Stockholm
scenario (misdirected in Tokyo, rerouted, claimed), a destination change the route no longer
reaches, the rerouting run's webhook to a real receiver and its mail a day later; unknown
and other tenants' cargos, reports that cannot have happened, bad itineraries, and two
handling reports of one cargo racing."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import failure_of, ok_data, until_appends_wait

from examples.ports.cargo import (
    REROUTE_WITHIN,
    Activity,
    AssignRoute,
    BookCargo,
    Cargo,
    CargoDetails,
    CargoId,
    CargoNeedsRerouting,
    ChangeDestination,
    HandlingRegistered,
    Leg,
    ListCargos,
    Location,
    NextActivity,
    RegisterHandling,
    RouteAssigned,
    Routing,
    Transport,
    assign_route,
    book_cargo,
    cargo_details,
    change_destination,
    list_cargos,
    possible_routes,
    register_handling,
    shipping,
)
from kumiko_typed import App, Failure, Ok, User
from kumiko_typed.testing import FakeClock, MemoryMail

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TENANT = uuid.uuid4()
BOOKER = User(id=uuid.uuid4(), tenant_id=TENANT, roles={"Booking"})
PORT = User(id=uuid.uuid4(), tenant_id=TENANT, roles={"Handling"})
STRANGER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles={"Booking", "Handling"})
L = Location
A = Activity


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def mail() -> MemoryMail:
    return MemoryMail()


@pytest.fixture
def app(
    app_on: Callable[..., App], clock: FakeClock, mail: MemoryMail, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> App:
    monkeypatch.setenv("CARGO_DESK_URL", receiver.base)
    return app_on([shipping], clock=clock, mail=mail)


def _book(app: App, origin: Location = L.HONGKONG, destination: Location = L.STOCKHOLM) -> uuid.UUID:
    booked: uuid.UUID = ok_data(
        app.dispatch(book_cargo, BookCargo(origin, destination, START + timedelta(weeks=2)), user=BOOKER)
    )
    return booked


def _details(app: App, cargo: uuid.UUID, user: User = BOOKER) -> CargoDetails:
    seen: CargoDetails = ok_data(app.query(cargo_details, CargoId(cargo), user=user))
    return seen


def _route(app: App, cargo: uuid.UUID) -> CargoDetails:
    (first, *_rest) = ok_data(app.query(possible_routes, CargoId(cargo), user=BOOKER))
    routed: CargoDetails = ok_data(app.dispatch(assign_route, AssignRoute(cargo, first.legs), user=BOOKER))
    return routed


def _handle(
    app: App, cargo: uuid.UUID, activity: Activity, where: Location, voyage: str | None = None
) -> Ok[CargoDetails] | Failure:
    return app.dispatch(register_handling, RegisterHandling(cargo, activity, where, voyage), user=PORT)


def _handled(
    app: App, cargo: uuid.UUID, activity: Activity, where: Location, voyage: str | None = None
) -> CargoDetails:
    seen: CargoDetails = ok_data(_handle(app, cargo, activity, where, voyage))
    return seen


def _events(app: App, cargo: uuid.UUID) -> list[object]:
    return [e.event for e in ok_data(app.read_stream(Cargo, cargo, user=BOOKER))]


def _drain(app: App) -> None:
    while any(app.run_worker(once=True).values()):
        pass


def _state(d: CargoDetails) -> tuple[object, ...]:
    return (d.transport_status, d.last_location, d.current_voyage, d.misdirected, d.next_expected)


def test_the_books_scenario_from_hongkong_to_stockholm(app: App, receiver: Receiver, mail: MemoryMail) -> None:
    cargo = _book(app)
    booked = _details(app, cargo)
    assert (booked.routing_status, booked.eta, booked.next_expected) == (Routing.NOT_ROUTED, None, None)
    assert _state(booked) == (Transport.NOT_RECEIVED, None, None, False, None)

    routed = _route(app, cargo)
    assert routed.routing_status == Routing.ROUTED and routed.eta == START + timedelta(weeks=1)
    assert routed.next_expected == NextActivity(A.RECEIVE, L.HONGKONG, None)

    assert _state(_handled(app, cargo, A.RECEIVE, L.HONGKONG)) == (
        Transport.IN_PORT,
        L.HONGKONG,
        None,
        False,
        NextActivity(A.LOAD, L.HONGKONG, "V1"),
    )
    assert _state(_handled(app, cargo, A.LOAD, L.HONGKONG, "V1")) == (
        Transport.ONBOARD_CARRIER,
        L.HONGKONG,
        "V1",
        False,
        NextActivity(A.UNLOAD, L.NEWYORK, "V1"),
    )
    # Unloaded in the wrong port: misdirected, and the desk is told.
    assert _state(_handled(app, cargo, A.UNLOAD, L.TOKYO, "V1")) == (Transport.IN_PORT, L.TOKYO, None, True, None)
    misdirected = ok_data(app.query(list_cargos, ListCargos(misdirected_only=True), user=PORT))
    assert [d.id for d in misdirected] == [cargo]
    _drain(app)
    (alert,) = receiver.to("/needs-rerouting")
    assert alert.body == f'{{"cargo_id":"{cargo}","reason":"misdirected","location":"TOKYO"}}'.encode()

    # Rerouted from where it is: the run that waits for the route ends without a mail.
    rerouted = _route(app, cargo)
    assert rerouted.route == (Leg(L.TOKYO, L.HAMBURG, "V3"), Leg(L.HAMBURG, L.STOCKHOLM, "V4"))
    assert (rerouted.misdirected, rerouted.next_expected) == (False, NextActivity(A.LOAD, L.TOKYO, "V3"))
    _drain(app)
    (run,) = app.runs()
    assert run.status == "completed" and run.steps["rerouted"] == RouteAssigned(
        cargo, rerouted.route, START + timedelta(weeks=1)
    )
    # Read back from the run's stored state as members, not their text.
    assert type(run.steps["rerouted"].legs[0].origin) is Location

    assert _state(_handled(app, cargo, A.LOAD, L.TOKYO, "V3")) == (
        Transport.ONBOARD_CARRIER,
        L.TOKYO,
        "V3",
        False,
        NextActivity(A.UNLOAD, L.HAMBURG, "V3"),
    )
    assert _state(_handled(app, cargo, A.UNLOAD, L.HAMBURG, "V3")) == (
        Transport.IN_PORT,
        L.HAMBURG,
        None,
        False,
        NextActivity(A.LOAD, L.HAMBURG, "V4"),
    )
    _handled(app, cargo, A.LOAD, L.HAMBURG, "V4")
    assert _state(_handled(app, cargo, A.UNLOAD, L.STOCKHOLM, "V4")) == (
        Transport.IN_PORT,
        L.STOCKHOLM,
        None,
        False,
        NextActivity(A.CLAIM, L.STOCKHOLM, None),
    )
    claimed = _handled(app, cargo, A.CLAIM, L.STOCKHOLM)
    assert _state(claimed) == (Transport.CLAIMED, L.STOCKHOLM, None, False, None)
    assert claimed.version == 12  # booked, 2 routes, 8 reports, 1 alert
    assert mail.sent == []
    assert [type(e) for e in _events(app, cargo)].count(HandlingRegistered) == 8
    # The row is what the events make it, on a replay too.
    check = app.rebuild_projection(Cargo, user=BOOKER, verify=True)
    assert isinstance(check, Ok) and check.data.matches, check
    assert ok_data(app.query(list_cargos, ListCargos(), user=BOOKER)) == [claimed]
    assert ok_data(app.query(list_cargos, ListCargos(misdirected_only=True), user=BOOKER)) == []


def test_a_report_sent_twice_with_its_key_is_handled_once(app: App) -> None:
    """A port's system resends a report it got no answer to: with an idempotency key the
    repeat gets the first answer, typed as it was (CargoDetails is a value type of the feature)."""
    cargo = _book(app)
    _route(app, cargo)
    report = RegisterHandling(cargo, A.RECEIVE, L.HONGKONG)
    first = ok_data(app.dispatch(register_handling, report, user=PORT, idempotency_key="edi-1"))
    again = ok_data(app.dispatch(register_handling, report, user=PORT, idempotency_key="edi-1"))
    assert first == again and type(again.transport_status) is Transport and type(again.last_location) is Location
    assert type(again.next_expected.location) is Location and len(_events(app, cargo)) == 3


def test_a_destination_change_keeps_the_deadline_and_misroutes_the_route(
    app: App, receiver: Receiver, mail: MemoryMail, clock: FakeClock
) -> None:
    cargo = _book(app, L.NLRTM, L.USDAL)
    changed: CargoDetails = ok_data(app.dispatch(change_destination, ChangeDestination(cargo, L.AUMEL), user=BOOKER))
    assert (changed.destination, changed.arrival_deadline, changed.routing_status) == (
        L.AUMEL,
        START + timedelta(weeks=2),
        Routing.NOT_ROUTED,
    )
    assert ok_data(app.query(possible_routes, CargoId(cargo), user=BOOKER)) == []  # none known to AUMEL

    ok_data(app.dispatch(change_destination, ChangeDestination(cargo, L.USDAL), user=BOOKER))
    _route(app, cargo)
    _handled(app, cargo, A.RECEIVE, L.NLRTM)
    misrouted: CargoDetails = ok_data(app.dispatch(change_destination, ChangeDestination(cargo, L.AUMEL), user=BOOKER))
    assert (misrouted.routing_status, misrouted.misdirected) == (Routing.MISROUTED, False)
    assert _events(app, cargo)[-1] == CargoNeedsRerouting(cargo, "misrouted", L.NLRTM)
    _drain(app)
    (alert,) = receiver.to("/needs-rerouting")
    assert b'"reason":"misrouted"' in alert.body
    assert mail.sent == []
    # Nobody reroutes it within the day: the desk gets a mail.
    clock.advance(REROUTE_WITHIN)
    _drain(app)
    (sent,) = mail.sent
    assert sent.to == ("operations@shipping.example",) and str(cargo) in sent.subject
    assert sent.body == f"Cargo {cargo} was misrouted at NLRTM a day ago and has no new route yet."
    # Changing it back makes the route fit again (no second alert).
    back: CargoDetails = ok_data(app.dispatch(change_destination, ChangeDestination(cargo, L.USDAL), user=BOOKER))
    assert back.routing_status == Routing.ROUTED
    assert len(app.runs()) == 1


def test_unknown_and_other_tenants_cargos_are_not_found(app: App) -> None:
    cargo = _book(app)
    _route(app, cargo)
    clerk = User(id=uuid.uuid4(), tenant_id=TENANT, roles={"Booking", "Handling"})
    for who, which in ((clerk, uuid.uuid4()), (STRANGER, cargo)):
        answers = [
            app.query(cargo_details, CargoId(which), user=who),
            app.query(possible_routes, CargoId(which), user=who),
            app.dispatch(change_destination, ChangeDestination(which, L.TOKYO), user=who),
            app.dispatch(assign_route, AssignRoute(which, (Leg(L.HONGKONG, L.STOCKHOLM, "V9"),)), user=who),
            app.dispatch(register_handling, RegisterHandling(which, A.RECEIVE, L.HONGKONG), user=who),
        ]
        assert [failure_of(a).code for a in answers] == ["not_found"] * 5, answers
    assert ok_data(app.query(list_cargos, ListCargos(), user=STRANGER)) == []
    assert len(_events(app, cargo)) == 2 and _details(app, cargo).destination == L.STOCKHOLM


def test_roles(app: App) -> None:
    refused = app.dispatch(book_cargo, BookCargo(L.HONGKONG, L.TOKYO, START + timedelta(days=3)), user=PORT)
    assert failure_of(refused, "access_denied").http_status == 403
    cargo = _book(app)
    _route(app, cargo)
    refused = app.dispatch(register_handling, RegisterHandling(cargo, A.RECEIVE, L.HONGKONG), user=BOOKER)
    failure_of(refused, "access_denied")
    assert _details(app, cargo, user=PORT).transport_status == Transport.NOT_RECEIVED


def test_reports_from_json_name_the_field(app: App) -> None:
    cargo = _book(app)
    _route(app, cargo)
    name = "cargo:cargo:register-handling"
    unknown_port = app.dispatch_json(
        name, {"cargo_id": str(cargo), "activity": "RECEIVE", "location": "MARS"}, user=PORT
    )
    assert [d["path"] for d in failure_of(unknown_port, "validation_error").details] == ["$.location"]
    unknown_activity = app.dispatch_json(
        name, {"cargo_id": str(cargo), "activity": "LOSE", "location": "TOKYO"}, user=PORT
    )
    assert [d["path"] for d in failure_of(unknown_activity, "validation_error").details] == ["$.activity"]
    no_voyage = app.dispatch_json(name, {"cargo_id": str(cargo), "activity": "LOAD", "location": "HONGKONG"}, user=PORT)
    assert failure_of(no_voyage, "validation_error").details == [{"path": "$.voyage", "message": "required for LOAD"}]
    assert len(_events(app, cargo)) == 2


def test_reports_that_cannot_have_happened_are_refused_and_write_nothing(app: App) -> None:
    cargo = _book(app)
    assert (
        failure_of(_handle(app, cargo, A.RECEIVE, L.HONGKONG), "unprocessable").message == "the cargo has no route yet"
    )
    _route(app, cargo)
    _handled(app, cargo, A.RECEIVE, L.HONGKONG)
    never_loaded = failure_of(_handle(app, cargo, A.UNLOAD, L.NEWYORK, "V1"), "unprocessable")
    assert never_loaded.message == "the cargo is not on board voyage V1"
    assert never_loaded.details == [{"path": "$.activity", "message": "the cargo is not on board voyage V1"}]
    elsewhere = failure_of(_handle(app, cargo, A.LOAD, L.TOKYO, "V1"), "unprocessable")
    assert elsewhere.message == "the cargo is in HONGKONG, not TOKYO"
    failure_of(_handle(app, cargo, A.RECEIVE, L.HONGKONG), "unprocessable")
    assert len(_events(app, cargo)) == 3
    assert _state(_details(app, cargo)) == (
        Transport.IN_PORT,
        L.HONGKONG,
        None,
        False,
        NextActivity(A.LOAD, L.HONGKONG, "V1"),
    )


def test_itineraries_that_do_not_fit_are_refused(app: App) -> None:
    cargo = _book(app)
    name = "cargo:cargo:assign-route"
    empty = app.dispatch_json(name, {"cargo_id": str(cargo), "legs": []}, user=BOOKER)
    assert failure_of(empty, "validation_error").details == [
        {"path": "$.legs", "message": "an itinerary needs at least one leg"}
    ]
    gap = (Leg(L.HONGKONG, L.NEWYORK, "V1"), Leg(L.HAMBURG, L.STOCKHOLM, "V4"))
    broken = failure_of(app.dispatch(assign_route, AssignRoute(cargo, gap), user=BOOKER), "validation_error")
    assert broken.details == [{"path": "$.legs[1].origin", "message": "must be NEWYORK, where leg 0 ends"}]
    elsewhere = (Leg(L.TOKYO, L.STOCKHOLM, "V9"),)
    wrong_start = failure_of(app.dispatch(assign_route, AssignRoute(cargo, elsewhere), user=BOOKER), "unprocessable")
    assert wrong_start.details == [{"path": "$.legs[0].origin", "message": "must be HONGKONG"}]
    short = (Leg(L.HONGKONG, L.NEWYORK, "V1"),)
    wrong_end = failure_of(app.dispatch(assign_route, AssignRoute(cargo, short), user=BOOKER), "unprocessable")
    assert wrong_end.details == [{"path": "$.legs[0].destination", "message": "must be STOCKHOLM"}]
    assert len(_events(app, cargo)) == 1


def test_two_racing_reports_of_one_cargo_one_wins_nothing_half_written(
    app: App, db_url: str, receiver: Receiver
) -> None:
    """Two ports report the same misdirecting unload at once.  On PostgreSQL both read the
    cargo at one version (their appends are held back until both have read): one wins with
    its two events (the report and the alert), the other is a ``version_conflict`` that wrote
    neither.  SQLite runs one writer at a time: the second reads the first's result and is
    refused as a report that cannot have happened.  Either way one report, one alert, one run."""
    cargo = _book(app)
    _route(app, cargo)
    _handled(app, cargo, A.RECEIVE, L.HONGKONG)
    _handled(app, cargo, A.LOAD, L.HONGKONG, "V1")
    results: list[Ok[CargoDetails] | Failure] = []

    def report() -> None:
        results.append(_handle(app, cargo, A.UNLOAD, L.TOKYO, "V1"))

    racers = [threading.Thread(target=report) for _ in range(2)]
    if db_url.startswith("sqlite"):
        for racer in racers:
            racer.start()
    else:
        engine = sa.create_engine(db_url)
        try:
            with engine.connect() as holder:
                holder.execute(sa.text("LOCK TABLE kumiko_events IN SHARE MODE"))
                for racer in racers:
                    racer.start()
                until_appends_wait(engine, 2, "reports")
                holder.rollback()
        finally:
            engine.dispose()
    for racer in racers:
        racer.join(timeout=60)
    won = [r for r in results if isinstance(r, Ok)]
    lost = [r for r in results if isinstance(r, Failure)]
    assert len(won) == 1 and len(lost) == 1, results
    if db_url.startswith("sqlite"):
        assert lost[0].code == "unprocessable" and lost[0].message == "the cargo is not on board voyage V1"
    else:
        assert lost[0].code == "version_conflict"
        assert lost[0].details == {"entity_id": str(cargo), "expected_version": 4, "current_version": 5}
    assert won[0].data.version == 6 and _details(app, cargo) == won[0].data
    assert [type(e) for e in _events(app, cargo)][-2:] == [HandlingRegistered, CargoNeedsRerouting]
    assert len(_events(app, cargo)) == 6
    _drain(app)
    assert len(app.runs()) == 1 and len(receiver.to("/needs-rerouting")) == 1
    check = app.rebuild_projection(Cargo, user=BOOKER, verify=True)
    assert isinstance(check, Ok) and check.data.matches, check
