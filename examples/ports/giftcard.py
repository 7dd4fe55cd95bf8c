"""Gift cards, as in Axon's sample application: issue a card with a value, redeem parts of
it, cancel it; a summary query pages through the cards.

The card's code is the client's (Axon's commands carry the id the client chose); the
aggregate's own id stays the framework's.  Redeeming more than is left is refused at the
``amount`` field, with what is left."""

from __future__ import annotations

import uuid
from datetime import datetime

import attrs
from sqlalchemy import String, UniqueConstraint, func, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Feature, fail, ok


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive")


class GiftCard(Entity):
    __tablename__ = "giftcard_card"
    # Unique per tenant: a code unique across tenants would tell one tenant another's codes.
    __table_args__ = (UniqueConstraint("tenant_id", "code"),)
    code: Mapped[str] = mapped_column(String(40))
    initial_value: Mapped[int]
    remaining_value: Mapped[int]
    cancelled: Mapped[bool] = mapped_column(default=False)


@attrs.frozen
class CardIssued:
    code: str
    amount: int


@attrs.frozen
class CardRedeemed:
    amount: int


@attrs.frozen
class CardCancelled:
    pass


@attrs.frozen
class IssueCard:
    code: str = attrs.field(validator=attrs.validators.matches_re(r"[A-Za-z0-9-]{1,40}"))
    amount: int = attrs.field(validator=_positive)


@attrs.frozen
class RedeemCard:
    code: str
    amount: int = attrs.field(validator=_positive)


@attrs.frozen
class CancelCard:
    code: str


@attrs.frozen
class CardSummaries:
    offset: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    limit: int = attrs.field(default=20, validator=[attrs.validators.ge(1), attrs.validators.le(100)])


@attrs.frozen
class CardSummary:
    code: str
    initial_value: int
    remaining_value: int
    issued_at: datetime
    last_updated: datetime


@attrs.frozen
class Page:
    total: int
    cards: list[CardSummary]


@attrs.frozen
class Redeemed:
    id: uuid.UUID
    remaining_value: int


giftcards = Feature("giftcard")
giftcards.entity(GiftCard)
giftcards.event(CardIssued, name="card-issued")
giftcards.event(CardRedeemed, name="card-redeemed")
giftcards.event(CardCancelled, name="card-cancelled")


@giftcards.projector(GiftCard, CardIssued)
def _issued(row: GiftCard, event: CardIssued) -> None:
    row.code, row.initial_value, row.remaining_value = event.code, event.amount, event.amount


@giftcards.projector(GiftCard, CardRedeemed)
def _redeemed(row: GiftCard, event: CardRedeemed) -> None:
    row.remaining_value -= event.amount


@giftcards.projector(GiftCard, CardCancelled)
def _cancelled(row: GiftCard, event: CardCancelled) -> None:
    row.remaining_value, row.cancelled = 0, True


issue_card = giftcards.write_handler(
    "card:issue",
    giftcards.pipeline(IssueCard)
    .create(
        "card",
        GiftCard,
        data=lambda c: GiftCard(code=c.payload.code, initial_value=c.payload.amount, remaining_value=c.payload.amount),
        event=lambda c: CardIssued(c.payload.code, c.payload.amount),
    )
    .return_(lambda c: ok(c.steps["card"].id)),
)

redeem_card = giftcards.write_handler(
    "card:redeem",
    giftcards.pipeline(RedeemCard)
    .get_one("card", lambda c: select(GiftCard).where(GiftCard.code == c.payload.code))
    .guard(
        lambda c: not c.steps["card"].cancelled,
        otherwise=lambda c: fail(
            "unprocessable", "the card is cancelled", [{"path": "$.code", "message": "cancelled"}]
        ),
    )
    .guard(
        lambda c: c.payload.amount <= c.steps["card"].remaining_value,
        otherwise=lambda c: fail(
            "unprocessable",
            "not enough value left on the card",
            [{"path": "$.amount", "message": f"at most {c.steps['card'].remaining_value} is left"}],
        ),
    )
    .append_event(GiftCard, id=lambda c: c.steps["card"].id, event=lambda c: CardRedeemed(c.payload.amount))
    .return_(lambda c: ok(Redeemed(c.steps["card"].id, c.steps["card"].remaining_value))),
)

cancel_card = giftcards.write_handler(
    "card:cancel",
    giftcards.pipeline(CancelCard)
    .get_one("card", lambda c: select(GiftCard).where(GiftCard.code == c.payload.code))
    .guard(
        lambda c: not c.steps["card"].cancelled,
        otherwise=lambda c: fail("unprocessable", "the card is cancelled already"),
    )
    .append_event(GiftCard, id=lambda c: c.steps["card"].id, event=lambda c: CardCancelled())
    .return_(lambda c: ok(c.steps["card"].version)),
)

card_summaries = giftcards.query_handler(
    "card:summaries",
    giftcards.query_pipeline(CardSummaries)
    .get_one("total", lambda c: select(func.count()).select_from(GiftCard))
    .find_many(
        "cards",
        lambda c: select(GiftCard).order_by(GiftCard.created_at, GiftCard.code).offset(c.payload.offset),
        limit=100,
    )
    .return_(
        lambda c: ok(
            Page(
                c.steps["total"],
                [
                    CardSummary(card.code, card.initial_value, card.remaining_value, card.created_at, card.updated_at)
                    for card in c.steps["cards"][: c.payload.limit]
                ],
            )
        )
    ),
)
