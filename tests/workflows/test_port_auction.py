"""An English auction as an example app (examples/ports/auction.py), run end to end with a
FakeClock on SQLite and PostgreSQL: bidding by the increment, the reserve, bids that extend
the end (capped), the close with and without a sale, payment and its lapse, racing bids, and
another tenant's and the seller's attempts; checked on answers and on what is stored."""

from __future__ import annotations

import email
import email.policy
import itertools
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from _support import failure_of, ok_data, together

from examples.ports.auction import (
    EXTENSION,
    MAX_EXTENSIONS,
    PAY_WITHIN,
    Auction,
    AuctionOpened,
    AuctionQuery,
    AuctionSold,
    AuctionUnsold,
    BidPlaced,
    OpenAuction,
    Pay,
    PaymentLapsed,
    PaymentReceived,
    PlaceBid,
    Standing,
    auctions,
    closing,
    open_auction,
    pay,
    place_bid,
    standing,
)
from kumiko_typed import App, Failure, MaildirTransport, Ok, User
from kumiko_typed.testing import FakeClock

START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def app(app_on: Callable[..., App], clock: FakeClock, tmp_path: Path) -> App:
    return app_on([auctions], clock=clock, mail=MaildirTransport(str(tmp_path / "mail")))


@pytest.fixture
def seller() -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def bidder(seller: User) -> User:
    """Another user of the seller's tenant."""
    return User(id=uuid.uuid4(), tenant_id=seller.tenant_id)


def opened(app: App, seller: User, reserve: int = 1000, increment: int = 100, hours: int = 1) -> uuid.UUID:
    """A new auction; the worker pass that follows starts its closing run."""
    payload = OpenAuction("Clock", "seller@example.com", reserve, increment, hours)
    auction_id: uuid.UUID = ok_data(app.dispatch(open_auction, payload, user=seller))
    assert app.run_worker(once=True)["started"] == 1
    return auction_id


def bid(app: App, user: User, auction_id: uuid.UUID, amount: int) -> object:
    return app.dispatch(place_bid, PlaceBid(auction_id, f"u{user.id.hex[:8]}@example.com", amount), user=user)


def state(app: App, user: User, auction_id: uuid.UUID) -> Standing:
    found: Standing = ok_data(app.query(standing, AuctionQuery(auction_id), user=user))
    return found


def run_of(app: App, user: User) -> uuid.UUID:
    """The closing run of the one auction ``user``'s tenant opened."""
    (run,) = app.runs(closing, tenant_id=user.tenant_id)
    return run.run_id


def mails(tmp_path: Path) -> list[tuple[str, str]]:
    parsed = [
        email.message_from_bytes(p.read_bytes(), policy=email.policy.default)
        for p in (tmp_path / "mail").rglob("*.eml")
    ]
    return sorted((str(m["To"]), str(m["Subject"])) for m in parsed)


def test_the_highest_bid_wins_and_the_winner_pays(app: App, clock: FakeClock, seller: User, tmp_path: Path) -> None:
    ann, bob = bidder(seller), bidder(seller)
    auction = opened(app, seller)
    run = run_of(app, seller)
    assert bid(app, ann, auction, 1000) == Ok(1000)
    assert bid(app, bob, auction, 1100) == Ok(1100)
    assert bid(app, ann, auction, 1150) == Failure(
        "unprocessable", "the bid is too low", [{"path": "$.amount", "message": "bid at least 1200 cents"}]
    )
    assert bid(app, ann, auction, 1500) == Ok(1500)
    clock.advance(HOUR - timedelta(seconds=1))
    assert app.run_worker(once=True)["resumed"] == 0
    clock.advance(seconds=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert state(app, seller, auction) == Standing("sold", 1500, ann.id, 3, START + HOUR)
    assert bid(app, bob, auction, 2000) == Failure("unprocessable", "the auction has ended")
    # Only the winner pays, and exactly the price.
    assert failure_of(app.dispatch(pay, Pay(auction, 1500), user=bob), "access_denied")
    assert failure_of(app.dispatch(pay, Pay(auction, 1400), user=ann), "unprocessable").details == [
        {"path": "$.amount", "message": "pay exactly 1500 cents"}
    ]
    assert app.dispatch(pay, Pay(auction, 1500), user=ann) == Ok(1500)
    assert app.run_worker(once=True)["resumed"] == 1  # the payment wakes the run at once
    assert app.result(closing, run, user=seller) == Ok(("paid", 1500))
    assert app.dispatch(pay, Pay(auction, 1500), user=ann) == Failure("unprocessable", "the auction is paid")
    app.run_worker(once=True)
    assert mails(tmp_path) == [(f"u{ann.id.hex[:8]}@example.com", "You won Clock")]
    stream = [e.event for e in ok_data(app.read_stream(Auction, auction, user=seller))]
    assert stream == [
        AuctionOpened(auction, seller.id, "seller@example.com", "Clock", 1000, 100, START + HOUR),
        BidPlaced(ann.id, f"u{ann.id.hex[:8]}@example.com", 1000, None),
        BidPlaced(bob.id, f"u{bob.id.hex[:8]}@example.com", 1100, None),
        BidPlaced(ann.id, f"u{ann.id.hex[:8]}@example.com", 1500, None),
        AuctionSold(ann.id, f"u{ann.id.hex[:8]}@example.com", 1500),
        PaymentReceived(auction, 1500),
    ]
    assert ok_data(app.rebuild_projection(Auction, user=seller, verify=True)).matches


def test_no_bid_at_the_reserve_leaves_it_unsold(app: App, clock: FakeClock, seller: User, tmp_path: Path) -> None:
    auction = opened(app, seller, reserve=5000)
    run = run_of(app, seller)
    assert bid(app, bidder(seller), auction, 4999) == Failure(
        "unprocessable", "the bid is too low", [{"path": "$.amount", "message": "bid at least 5000 cents"}]
    )
    clock.advance(HOUR)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(closing, run, user=seller) == Ok(("unsold", None))
    assert state(app, seller, auction) == Standing("unsold", None, None, 0, START + HOUR)
    app.run_worker(once=True)
    assert mails(tmp_path) == [("seller@example.com", "Clock did not sell")]
    assert [e.event for e in ok_data(app.read_stream(Auction, auction, user=seller))][1:] == [AuctionUnsold(0)]


def test_a_late_bid_extends_the_end_at_most_max_extensions_times(app: App, clock: FakeClock, seller: User) -> None:
    ann, bob = bidder(seller), bidder(seller)
    auction = opened(app, seller)
    run = run_of(app, seller)
    # Far from the end: no extension.
    assert bid(app, ann, auction, 1000) == Ok(1000)
    assert state(app, seller, auction).ends_at == START + HOUR
    ends = START + HOUR
    for i in range(MAX_EXTENSIONS):
        clock.advance(ends - clock.now - timedelta(minutes=1))  # a minute before the end
        assert app.run_worker(once=True)["resumed"] == 0  # before the end: the run sleeps
        assert bid(app, (bob, ann)[i % 2], auction, 1100 + 100 * i) == Ok(1100 + 100 * i)
        ends = clock.now + EXTENSION
        assert state(app, seller, auction).ends_at == ends
        clock.advance(minutes=1)  # the end the run waited for: it sees the new end and sleeps on
        assert app.run_worker(once=True)["resumed"] == 1
        assert state(app, seller, auction).status == "open"
    # Extensions used up: a bid a second before the end leaves it.
    clock.advance(ends - clock.now - timedelta(seconds=1))
    assert bid(app, ann, auction, 2000) == Ok(2000)
    assert state(app, seller, auction).ends_at == ends
    clock.advance(seconds=1)
    assert bid(app, bob, auction, 2100) == Failure("unprocessable", "the auction has ended")
    assert app.run_worker(once=True)["resumed"] == 1
    assert state(app, seller, auction) == Standing("sold", 2000, ann.id, 5, ends)
    extended = [
        e.event.extended_to
        for e in ok_data(app.read_stream(Auction, auction, user=seller))
        if isinstance(e.event, BidPlaced)
    ]
    assert sum(t is not None for t in extended) == MAX_EXTENSIONS
    clock.advance(PAY_WITHIN)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(closing, run, user=seller) == Ok(("lapsed", 2000))


def test_an_unpaid_sale_lapses_and_a_late_payment_is_refused(
    app: App, clock: FakeClock, seller: User, tmp_path: Path
) -> None:
    ann = bidder(seller)
    auction = opened(app, seller)
    run = run_of(app, seller)
    assert bid(app, ann, auction, 1200) == Ok(1200)
    clock.advance(HOUR)
    app.run_worker(once=True)
    clock.advance(PAY_WITHIN - timedelta(seconds=1))
    assert app.run_worker(once=True)["resumed"] == 0
    clock.advance(seconds=1)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(closing, run, user=seller) == Ok(("lapsed", 1200))
    assert app.dispatch(pay, Pay(auction, 1200), user=ann) == Failure("unprocessable", "the auction is lapsed")
    events = [e.event for e in ok_data(app.read_stream(Auction, auction, user=seller))]
    assert events[-2:] == [AuctionSold(ann.id, f"u{ann.id.hex[:8]}@example.com", 1200), PaymentLapsed(ann.id)]
    app.run_worker(once=True)
    assert ("seller@example.com", "Clock: the winner did not pay") in mails(tmp_path)


def test_racing_bids_of_one_amount_take_one_and_tell_the_other_the_least_bid(app: App, seller: User) -> None:
    auction = opened(app, seller)
    racers = [bidder(seller) for _ in range(4)]
    answers = together(*(lambda u=u: bid(app, u, auction, 1000) for u in racers))
    assert answers.count(Ok(1000)) == 1
    lost = [a for a in answers if a != Ok(1000)]
    assert (
        lost
        == [
            Failure("unprocessable", "the bid is too low", [{"path": "$.amount", "message": "bid at least 1100 cents"}])
        ]
        * 3
    )
    winner = racers[answers.index(Ok(1000))]
    assert state(app, seller, auction) == Standing("open", 1000, winner.id, 1, START + HOUR)
    bids = [e.event for e in ok_data(app.read_stream(Auction, auction, user=seller)) if isinstance(e.event, BidPlaced)]
    assert [(b.bidder_id, b.amount) for b in bids] == [(winner.id, 1000)]


def test_racing_rising_bids_keep_the_highest_and_every_accepted_bid_beat_the_one_before(app: App, seller: User) -> None:
    auction = opened(app, seller)
    racers = [bidder(seller) for _ in range(6)]
    answers = together(*(lambda u=u, i=i: bid(app, u, auction, 1000 + 100 * i) for i, u in enumerate(racers)))
    accepted = [a.data for a in answers if isinstance(a, Ok)]
    bids = [e.event for e in ok_data(app.read_stream(Auction, auction, user=seller)) if isinstance(e.event, BidPlaced)]
    assert sorted(accepted) == sorted(b.amount for b in bids)
    assert all(later.amount >= earlier.amount + 100 for earlier, later in itertools.pairwise(bids))
    assert 1500 in accepted  # the highest offer always beats whatever was there
    assert state(app, seller, auction).highest == 1500


def test_the_seller_and_another_tenant_cannot_bid_and_nothing_is_written(app: App, seller: User) -> None:
    auction = opened(app, seller)
    assert bid(app, seller, auction, 1000) == Failure("access_denied", "a seller cannot bid on their own auction")
    stranger = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    assert failure_of(bid(app, stranger, auction, 1000), "not_found")
    assert failure_of(app.dispatch(pay, Pay(auction, 1000), user=stranger), "not_found")
    assert failure_of(app.query(standing, AuctionQuery(auction), user=stranger), "not_found")
    assert state(app, seller, auction) == Standing("open", None, None, 0, START + HOUR)
    assert len(ok_data(app.read_stream(Auction, auction, user=seller))) == 1


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"title": "", "seller_email": "s@example.com", "reserve": 1, "increment": 1, "hours": 1}, "$.title"),
        ({"title": "C", "seller_email": "nobody", "reserve": 1, "increment": 1, "hours": 1}, "$.seller_email"),
        ({"title": "C", "seller_email": "s@example.com", "reserve": 0, "increment": 1, "hours": 1}, "$.reserve"),
        ({"title": "C", "seller_email": "s@example.com", "reserve": True, "increment": 1, "hours": 1}, "$.reserve"),
        ({"title": "C", "seller_email": "s@example.com", "reserve": 1, "increment": -5, "hours": 1}, "$.increment"),
        ({"title": "C", "seller_email": "s@example.com", "reserve": 1, "increment": 1, "hours": 0}, "$.hours"),
        ({"title": "C", "seller_email": "s@example.com", "reserve": 1, "increment": 1, "hours": 10**6}, "$.hours"),
    ],
)
def test_an_auction_from_bad_json_is_refused_by_field_and_starts_nothing(
    app: App, seller: User, data: dict[str, object], path: str
) -> None:
    answer = failure_of(app.dispatch_json("auctions:auction:open", data, user=seller), "validation_error")
    assert [d["path"] for d in answer.details or []] == [path], answer
    assert app.run_worker(once=True)["started"] == 0
    assert app.runs(closing) == []
