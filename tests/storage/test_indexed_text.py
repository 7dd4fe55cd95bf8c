"""A text too long for an index of its column is the same ``validation_error`` on both
databases.  PostgreSQL's B-tree index holds at most about 2,700 bytes of a row (a text
that compresses may be longer), SQLite's any length: a 10,000-character token in a unique
column (an aggregate's, or the key of a projection upsert) was stored on SQLite and an
``internal_error`` (``OperationalError``, naming nothing) on PostgreSQL."""

from __future__ import annotations

import random
import string
from collections.abc import Callable

import attrs
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]


class ItToken(Entity):
    __tablename__ = "it_token"
    token: Mapped[str] = mapped_column(sa.Text, unique=True)
    note: Mapped[str] = mapped_column(sa.Text, default="")
    tag: Mapped[str] = mapped_column(sa.Text, index=True, default="")  # a plain (not unique) index


_meta = sa.MetaData()
#: A read model keyed by two text columns: each may hold half of the index's row.
PAIRS = sa.Table(
    "it_pairs",
    _meta,
    sa.Column("a", sa.Text, primary_key=True),
    sa.Column("b", sa.Text, primary_key=True),
    sa.Column("n", sa.Integer, nullable=False),
)


@attrs.frozen
class Token:
    token: str
    note: str = ""
    tag: str = ""


@attrs.frozen
class Pair:
    a: str
    b: str


tokens = Feature("it", projections=[PAIRS])
tokens.entity(ItToken)
save = tokens.write_handler(
    "save",
    tokens.pipeline(Token)
    .create("t", ItToken, data=lambda c: ItToken(token=c.payload.token, note=c.payload.note, tag=c.payload.tag))
    .return_(lambda c: ok(None)),
)
pair = tokens.write_handler(
    "pair",
    tokens.pipeline(Pair)
    .unsafe_projection_upsert(PAIRS, on=["a", "b"], row=lambda c: {"a": c.payload.a, "b": c.payload.b, "n": 1})
    .return_(lambda c: ok(None)),
)


def _random_text(length: int) -> str:
    """Text no compression shortens (PostgreSQL compresses an index's long values)."""
    pick = random.Random(length).choice
    return "".join(pick(string.ascii_letters + string.digits) for _ in range(length))


def test_a_text_too_long_for_its_index_is_a_validation_error_on_both(app_on: AppOn, admin: User) -> None:
    app = app_on([tokens])
    _meta.create_all(app.engine)
    refused = failure_of(app.dispatch(save, Token(_random_text(10_000)), user=admin), "validation_error")
    assert refused.details == [
        {
            "path": "$.token",
            "message": "must be at most 2600 bytes long in UTF-8 (an index of it holds no more), not 10000",
            "column": "it_token.token",
            "step": '0 aggregate.create "t"',
        }
    ]
    ok_data(app.dispatch(save, Token(_random_text(2_600), note=_random_text(50_000)), user=admin))  # no index
    # Multi-byte text counts in bytes: 700 characters of 4 bytes each.
    failure_of(app.dispatch(save, Token("😀" * 700), user=admin), "validation_error")

    failure_of(app.dispatch(pair, Pair(_random_text(1_301), "b"), user=admin), "validation_error")
    ok_data(app.dispatch(pair, Pair(_random_text(1_300), _random_text(1_300)), user=admin))


def test_a_text_too_long_for_a_plain_index_of_its_column_is_a_validation_error_on_both(
    app_on: AppOn, admin: User
) -> None:
    """Not only a unique or primary key: any index of the column (a mutation run found the
    plain index untested)."""
    app = app_on([tokens])
    refused = failure_of(app.dispatch(save, Token("t", tag=_random_text(10_000)), user=admin), "validation_error")
    assert refused.details is not None
    assert [(d["path"], d["column"]) for d in refused.details] == [("$.tag", "it_token.tag")]
    ok_data(app.dispatch(save, Token("u", tag=_random_text(2_600)), user=admin))
