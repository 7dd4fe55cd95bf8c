"""An English auction, the sample event-sourcing talks and libraries reach for after the bank
account: a seller opens an auction with a reserve price and an end; bidders outbid each
other by at least the increment; a bid in the last minutes extends the end (against
sniping, at most :data:`MAX_EXTENSIONS` times); at the end the auction is sold to the
highest bidder, who has :data:`PAY_WITHIN` to pay, or it lapses.

Bids lock the auction's row, so two bids of the same amount are decided one after the
other (the second is too low), and the run that closes the auction locks it too: a bid
either commits before the close, and the close sees it, or after, and finds the auction
closed.  The run waits for the end the row says when it wakes (an extension moves it), one
round per possible extension; it reads the row rather than counting the bids' events, so a
bid that extends the end while the run sleeps needs no message to it.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import attrs
from sqlalchemy import DateTime, String, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Feature, fail, mail_address, ok, on_event

#: A bid this close to the end moves the end to this long after the bid.
EXTENSION = timedelta(minutes=5)
#: How many times bids may extend one auction.
MAX_EXTENSIONS = 3
#: How long the winner has to pay.
PAY_WITHIN = timedelta(days=3)
#: The longest auction a seller may open.
MAX_HOURS = 24 * 14


def _cents(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive number of cents")


class Auction(Entity):
    __tablename__ = "auc_auction"
    seller_id: Mapped[uuid.UUID]
    seller_email: Mapped[str] = mapped_column(String(254))
    title: Mapped[str] = mapped_column(String(200))
    reserve: Mapped[int]
    increment: Mapped[int]
    ends_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    extensions: Mapped[int] = mapped_column(default=0)
    #: open → sold → paid, or open → unsold, or sold → lapsed.
    status: Mapped[str] = mapped_column(String(10), default="open")
    bids: Mapped[int] = mapped_column(default=0)
    highest: Mapped[int | None] = mapped_column(default=None)
    leader_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    leader_email: Mapped[str | None] = mapped_column(String(254), default=None)


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class AuctionOpened:
    auction_id: uuid.UUID
    seller_id: uuid.UUID
    seller_email: str
    title: str
    reserve: int
    increment: int
    ends_at: datetime


@attrs.frozen
class BidPlaced:
    bidder_id: uuid.UUID
    bidder_email: str
    amount: int
    #: The new end when the bid extends the auction, else ``None``.
    extended_to: datetime | None


@attrs.frozen
class AuctionSold:
    winner_id: uuid.UUID
    winner_email: str
    price: int


@attrs.frozen
class AuctionUnsold:
    bids: int


@attrs.frozen
class PaymentReceived:
    auction_id: uuid.UUID
    amount: int


@attrs.frozen
class PaymentLapsed:
    winner_id: uuid.UUID


# --- payloads ------------------------------------------------------------------------------


@attrs.frozen
class OpenAuction:
    title: str = attrs.field(validator=[attrs.validators.min_len(1), attrs.validators.max_len(200)])
    seller_email: str = attrs.field(validator=mail_address)
    reserve: int = attrs.field(validator=_cents)
    increment: int = attrs.field(validator=_cents)
    hours: int = attrs.field(validator=[attrs.validators.ge(1), attrs.validators.le(MAX_HOURS)])


@attrs.frozen
class PlaceBid:
    auction_id: uuid.UUID
    email: str = attrs.field(validator=mail_address)
    amount: int = attrs.field(validator=_cents)


@attrs.frozen
class Pay:
    auction_id: uuid.UUID
    amount: int = attrs.field(validator=_cents)


@attrs.frozen
class AuctionQuery:
    auction_id: uuid.UUID


@attrs.frozen
class Standing:
    status: str
    highest: int | None
    leader_id: uuid.UUID | None
    bids: int
    ends_at: datetime


# --- the feature ---------------------------------------------------------------------------

auctions = Feature("auctions", requires=["mail.send"])
auctions.entity(Auction)
auctions.event(AuctionOpened, name="auction-opened")
auctions.event(BidPlaced, name="bid-placed")
auctions.event(AuctionSold, name="auction-sold")
auctions.event(AuctionUnsold, name="auction-unsold")
auctions.event(PaymentReceived, name="payment-received")
auctions.event(PaymentLapsed, name="payment-lapsed")


@auctions.projector(Auction, AuctionOpened)
def _opened(row: Auction, event: AuctionOpened) -> None:
    row.seller_id, row.seller_email, row.title = event.seller_id, event.seller_email, event.title
    row.reserve, row.increment, row.ends_at = event.reserve, event.increment, event.ends_at


@auctions.projector(Auction, BidPlaced)
def _bid(row: Auction, event: BidPlaced) -> None:
    row.bids += 1
    row.highest, row.leader_id, row.leader_email = event.amount, event.bidder_id, event.bidder_email
    if event.extended_to is not None:
        row.ends_at = event.extended_to
        row.extensions += 1


@auctions.projector(Auction, AuctionSold)
def _sold(row: Auction, event: AuctionSold) -> None:
    row.status = "sold"


@auctions.projector(Auction, AuctionUnsold)
def _unsold(row: Auction, event: AuctionUnsold) -> None:
    row.status = "unsold"


@auctions.projector(Auction, PaymentReceived)
def _paid(row: Auction, event: PaymentReceived) -> None:
    row.status = "paid"


@auctions.projector(Auction, PaymentLapsed)
def _lapsed(row: Auction, event: PaymentLapsed) -> None:
    row.status = "lapsed"


def least_bid(auction: Auction) -> int:
    """The lowest amount a bid may offer now: the reserve, then the highest plus the increment."""
    return auction.reserve if auction.highest is None else auction.highest + auction.increment


def extended_end(auction: Auction, now: datetime) -> datetime | None:
    """Where a bid at ``now`` moves the end to, or ``None`` when it leaves the end alone."""
    if auction.extensions >= MAX_EXTENSIONS or auction.ends_at - now > EXTENSION:
        return None
    return now + EXTENSION


def sale(auction: Auction) -> AuctionSold:
    """The sale of an auction that has a bid (the run's ``sold`` arm reads it only then)."""
    if auction.leader_id is None or auction.leader_email is None or auction.highest is None:
        raise ValueError(f"auction {auction.id} has no bid to sell to")
    return AuctionSold(auction.leader_id, auction.leader_email, auction.highest)


def _new_auction(auction_id: uuid.UUID, seller_id: uuid.UUID, payload: OpenAuction, ends_at: datetime) -> Auction:
    row = Auction(
        seller_id=seller_id,
        seller_email=payload.seller_email,
        title=payload.title,
        reserve=payload.reserve,
        increment=payload.increment,
        ends_at=ends_at,
    )
    row.id = auction_id
    return row


open_auction = auctions.write_handler(
    "auction:open",
    auctions.pipeline(OpenAuction)
    .compute("id", lambda c: uuid.uuid4())
    .compute("ends_at", lambda c: c.now + timedelta(hours=c.payload.hours))
    .create(
        "auction",
        Auction,
        data=lambda c: _new_auction(c.steps["id"], c.user.id, c.payload, c.steps["ends_at"]),
        event=lambda c: AuctionOpened(
            c.steps["id"],
            c.user.id,
            c.payload.seller_email,
            c.payload.title,
            c.payload.reserve,
            c.payload.increment,
            c.steps["ends_at"],
        ),
    )
    .return_(lambda c: ok(c.steps["id"])),
)

place_bid = auctions.write_handler(
    "auction:bid",
    auctions.pipeline(PlaceBid)
    .get_one("auction", lambda c: select(Auction).where(Auction.id == c.payload.auction_id).with_for_update())
    .guard(
        lambda c: c.steps["auction"].status == "open" and c.now < c.steps["auction"].ends_at,
        otherwise=lambda c: fail("unprocessable", "the auction has ended"),
    )
    .guard(
        lambda c: c.user.id != c.steps["auction"].seller_id,
        otherwise=lambda c: fail("access_denied", "a seller cannot bid on their own auction"),
    )
    .guard(
        lambda c: c.payload.amount >= least_bid(c.steps["auction"]),
        otherwise=lambda c: fail(
            "unprocessable",
            "the bid is too low",
            [{"path": "$.amount", "message": f"bid at least {least_bid(c.steps['auction'])} cents"}],
        ),
    )
    .append_event(
        Auction,
        id=lambda c: c.payload.auction_id,
        event=lambda c: BidPlaced(
            c.user.id, c.payload.email, c.payload.amount, extended_end(c.steps["auction"], c.now)
        ),
    )
    .return_(lambda c: ok(c.payload.amount)),
)

pay = auctions.write_handler(
    "auction:pay",
    auctions.pipeline(Pay)
    .get_one("auction", lambda c: select(Auction).where(Auction.id == c.payload.auction_id).with_for_update())
    .guard(
        lambda c: c.steps["auction"].status == "sold",
        otherwise=lambda c: fail("unprocessable", f"the auction is {c.steps['auction'].status}"),
    )
    .guard(
        lambda c: c.steps["auction"].leader_id == c.user.id,
        otherwise=lambda c: fail("access_denied", "only the winner pays for an auction"),
    )
    .guard(
        lambda c: c.payload.amount == c.steps["auction"].highest,
        otherwise=lambda c: fail(
            "unprocessable",
            "the amount is not the price",
            [{"path": "$.amount", "message": f"pay exactly {c.steps['auction'].highest} cents"}],
        ),
    )
    .append_event(
        Auction,
        id=lambda c: c.payload.auction_id,
        event=lambda c: PaymentReceived(c.payload.auction_id, c.payload.amount),
    )
    .return_(lambda c: ok(c.payload.amount)),
)

standing = auctions.query_handler(
    "auction:standing",
    auctions.query_pipeline(AuctionQuery)
    .get_one("auction", lambda c: select(Auction).where(Auction.id == c.payload.auction_id))
    .return_(
        lambda c: ok(
            Standing(
                c.steps["auction"].status,
                c.steps["auction"].highest,
                c.steps["auction"].leader_id,
                c.steps["auction"].bids,
                c.steps["auction"].ends_at,
            )
        )
    ),
)


closing = auctions.workflow(
    "auction-closing",
    trigger=on_event(AuctionOpened),
    pipeline=auctions.workflow_pipeline(AuctionOpened)
    .wait(lambda c: c.payload.ends_at)
    # One round per extension a bid may have made while the run slept.
    .for_each(
        "round",
        over=lambda c: range(MAX_EXTENSIONS),
        do=lambda d: d.get_one("ending", lambda c: select(Auction).where(Auction.id == c.payload.auction_id)).branch(
            name="extended",
            when=lambda c: c.steps["ending"].ends_at > c.now,
            on_true=lambda b: b.wait(lambda c: c.steps["ending"].ends_at),
        ),
    )
    .get_one("final", lambda c: select(Auction).where(Auction.id == c.payload.auction_id).with_for_update())
    .branch(
        name="sold",
        when=lambda c: c.steps["final"].leader_id is not None,
        on_true=lambda b: (
            b.append_event(
                Auction,
                id=lambda c: c.payload.auction_id,
                event=lambda c: sale(c.steps["final"]),
            )
            .send_mail(
                to=lambda c: sale(c.steps["final"]).winner_email,
                subject=lambda c: f"You won {c.payload.title}",
                body=lambda c: f"Pay {c.steps['final'].highest} cents within {PAY_WITHIN.days} days.",
            )
            .wait_for_event(
                "payment",
                PaymentReceived,
                key=lambda c: c.payload.auction_id,
                event_key=lambda e: e.auction_id,
                timeout=PAY_WITHIN,
            )
            .branch(
                name="lapsed",
                when=lambda c: c.steps["payment"] is None,
                on_true=lambda b: b.append_event(
                    Auction,
                    id=lambda c: c.payload.auction_id,
                    event=lambda c: PaymentLapsed(sale(c.steps["final"]).winner_id),
                ).send_mail(
                    to=lambda c: c.payload.seller_email,
                    subject=lambda c: f"{c.payload.title}: the winner did not pay",
                    body="The auction has lapsed; you may open it again.",
                ),
            )
        ),
        on_false=lambda b: b.append_event(
            Auction,
            id=lambda c: c.payload.auction_id,
            event=lambda c: AuctionUnsold(c.steps["final"].bids),
        ).send_mail(
            to=lambda c: c.payload.seller_email,
            subject=lambda c: f"{c.payload.title} did not sell",
            body="No bid reached the reserve.",
        ),
    )
    .get_one("closed", lambda c: select(Auction).where(Auction.id == c.payload.auction_id))
    .return_(lambda c: ok((c.steps["closed"].status, c.steps["closed"].highest))),
)
