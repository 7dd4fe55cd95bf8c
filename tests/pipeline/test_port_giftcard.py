"""Axon's gift-card sample, ported (examples/ports/giftcard.py), on SQLite and PostgreSQL:
issue, redeem, cancel, the paged summary; every refusal names the field it is about."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from _support import until_appends_wait

from examples.ports.giftcard import (
    CancelCard,
    CardCancelled,
    CardIssued,
    CardRedeemed,
    CardSummaries,
    GiftCard,
    IssueCard,
    RedeemCard,
    Redeemed,
    cancel_card,
    card_summaries,
    giftcards,
    issue_card,
    redeem_card,
)
from kumiko_typed import App, Failure, Ok, User


@pytest.fixture
def app(app_on: Callable[..., App]) -> App:
    return app_on([giftcards])


def issued(app: App, user: User, code: str = "gc-1", amount: int = 100) -> uuid.UUID:
    result = app.dispatch(issue_card, IssueCard(code, amount), user=user)
    assert isinstance(result, Ok), result
    card: uuid.UUID = result.data
    return card


def test_issue_redeem_cancel(app: App, user: User) -> None:
    card = issued(app, user)
    assert app.dispatch(redeem_card, RedeemCard("gc-1", 30), user=user) == Ok(Redeemed(card, 70))
    assert app.dispatch(redeem_card, RedeemCard("gc-1", 70), user=user) == Ok(Redeemed(card, 0))
    assert app.dispatch(cancel_card, CancelCard("gc-1"), user=user) == Ok(4)
    stream = app.read_stream(GiftCard, card, user=user)
    assert isinstance(stream, Ok)
    events = [e.event for e in stream.data]
    assert events == [CardIssued("gc-1", 100), CardRedeemed(30), CardRedeemed(70), CardCancelled()]
    check = app.rebuild_projection(GiftCard, user=user, verify=True)
    assert isinstance(check, Ok) and check.data.matches, check


def test_redeeming_more_than_is_left_names_the_amount(app: App, user: User) -> None:
    issued(app, user, amount=50)
    refused = app.dispatch(redeem_card, RedeemCard("gc-1", 51), user=user)
    assert refused == Failure(
        "unprocessable", "not enough value left on the card", [{"path": "$.amount", "message": "at most 50 is left"}]
    )
    assert refused.http_status == 422
    from_json = app.dispatch_json("giftcard:card:redeem", {"code": "gc-1", "amount": 0}, user=user)
    assert isinstance(from_json, Failure) and from_json.details == [
        {"path": "$.amount", "message": "amount must be positive"}
    ]
    app.dispatch(cancel_card, CancelCard("gc-1"), user=user)
    cancelled = app.dispatch(redeem_card, RedeemCard("gc-1", 1), user=user)
    assert isinstance(cancelled, Failure) and cancelled.details == [{"path": "$.code", "message": "cancelled"}]
    unknown = app.dispatch(redeem_card, RedeemCard("gc-404", 1), user=user)
    assert isinstance(unknown, Failure) and unknown.code == "not_found"


def test_a_code_in_use_is_refused_naming_the_field_and_nothing_else(app: App, user: User) -> None:
    issued(app, user)
    again = app.dispatch_json("giftcard:card:issue", {"code": "gc-1", "amount": 5}, user=user)
    assert isinstance(again, Failure) and again.code == "unique_violation", again
    # The clashing columns and the field the code came from; no value, nothing of the
    # database's own text (PostgreSQL's names a constraint, SQLite's a table).
    assert again.message == (
        'step aggregate.create "card": GiftCard violates a unique constraint on tenant_id, code: another row holds '
        "those values; pass another value at $.code, or update that row instead"
    )
    assert again.details == {"entity": "GiftCard", "columns": ["tenant_id", "code"], "path": "$.code"}


def test_codes_are_per_tenant(app: App, user: User, make_user: Callable[..., User]) -> None:
    """Another tenant may use the same code, and learns nothing about the first one's."""
    issued(app, user)
    other = make_user()
    issued(app, other, amount=10)
    assert app.dispatch(redeem_card, RedeemCard("gc-1", 11), user=other) == Failure(
        "unprocessable", "not enough value left on the card", [{"path": "$.amount", "message": "at most 10 is left"}]
    )


def test_summaries_page_through_the_tenants_cards(app: App, user: User, make_user: Callable[..., User]) -> None:
    for n in range(5):
        issued(app, user, f"gc-{n}", 10 * (n + 1))
    issued(app, make_user(), "gc-other")
    page = app.query(card_summaries, CardSummaries(offset=1, limit=2), user=user)
    assert isinstance(page, Ok)
    assert page.data.total == 5
    assert [(s.code, s.remaining_value) for s in page.data.cards] == [("gc-1", 20), ("gc-2", 30)]
    bad = app.query_json("giftcard:card:summaries", {"limit": 0}, user=user)
    assert isinstance(bad, Failure) and [d["path"] for d in bad.details] == ["$.limit"]


def test_two_racing_redeems_of_one_card_one_wins_the_other_is_a_clean_version_conflict(
    fresh_postgres_url: str, user: User
) -> None:
    """Axon's optimistic locking, on PostgreSQL: two redeems of 60 from a card of 100 both
    read version 1 (appends to the event store are held back until both have read), then
    both append version 2. Exactly one wins; the other is a ``version_conflict`` whose
    details name the versions its message names, and the card is never overdrawn."""
    app = App([giftcards], database_url=fresh_postgres_url)
    app.create_all()
    engine = sa.create_engine(fresh_postgres_url)
    try:
        card = issued(app, user)
        results: list[Ok[Redeemed] | Failure] = []

        def redeem() -> None:
            results.append(app.dispatch(redeem_card, RedeemCard("gc-1", 60), user=user))

        racers = [threading.Thread(target=redeem) for _ in range(2)]
        with engine.connect() as holder:
            holder.execute(sa.text("LOCK TABLE kumiko_events IN SHARE MODE"))
            for racer in racers:
                racer.start()
            until_appends_wait(engine, 2, "redeems")
            holder.rollback()
        for racer in racers:
            racer.join(timeout=30)
        won = [r for r in results if isinstance(r, Ok)]
        lost = [r for r in results if isinstance(r, Failure)]
        assert won == [Ok(Redeemed(card, 40))], results
        assert len(lost) == 1 and lost[0].code == "version_conflict" and lost[0].http_status == 409
        assert lost[0].message == f"GiftCard {card}: version 2 of its event stream is taken already"
        assert lost[0].details == {"entity_id": str(card), "expected_version": 1, "current_version": 2}
        stream = app.read_stream(GiftCard, card, user=user)
        assert isinstance(stream, Ok)
        assert [e.event for e in stream.data] == [CardIssued("gc-1", 100), CardRedeemed(60)]
        check = app.rebuild_projection(GiftCard, user=user, verify=True)
        assert isinstance(check, Ok) and check.data.matches, check
    finally:
        engine.dispose()
        app.dispose()
