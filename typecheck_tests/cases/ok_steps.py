"""Every key-producing step kind, with the exact type a later step reads."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from sqlalchemy import select

from kumiko_typed import Feature, fail, manual, ok

from _models import EmailVerified, Order, Product, SignedUp

shop = Feature("shop", requires=["call_feature", "mail.send"])
reveal_type(shop)  # R: kumiko_typed._feature.Feature[Literal['call_feature'] | Literal['mail.send']] # PR: Feature[str]

TOTAL: Final = "total"

reserve = shop.write_handler(
    "reserve",
    shop.pipeline(Order).compute("n", lambda c: len(c.payload.lines)).return_(lambda c: ok(c.steps["n"] * 2)),
)
reveal_type(reserve)  # R: kumiko_typed._feature.WriteHandler[_models.Order, int] # PR: WriteHandler[Order, int]

place = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute(TOTAL, lambda c: float(c.steps["count"]))
    .find_one("maybe", lambda c: select(Product).where(Product.id == c.payload.id))
    .get_one("product", lambda c: select(Product).where(Product.id == c.payload.id))
    .find_many("all", lambda c: select(Product), limit=10)
    .create("created", Product, data=lambda c: Product(id=c.payload.id, name="x", stock=c.steps["count"]))
    .update("updated", Product, id=lambda c: c.payload.id, changes=lambda c: {"stock": 1}, version=lambda c: 1)
    .call_feature("reserved", reserve, payload=lambda c: c.payload)
    .return_(lambda c: ok(c.steps))
)
reveal_type(place)  # R: kumiko_typed._finished.Finished[_models.Order, TypedDict({'count'=: int, 'total'=: float, 'maybe'=: _models.Product | None, 'product'=: _models.Product, 'all'=: list[_models.Product], 'created'=: kumiko_typed._saved.Saved[_models.Product], 'updated'=: kumiko_typed._saved.Saved[_models.Product], 'reserved'=: int})] # PR: Finished[Order, Keys[Key[Literal['count'], int], Key[Literal['total'], float], Key[Literal['maybe'], Product | None], Key[Literal['product'], Product], Key[Literal['all'], list[Product]], Key[Literal['created'], Saved[Product]], Key[Literal['updated'], Saved[Product]], Key[Literal['reserved'], int]]]

# A named creation event: event= reads the steps before it; the key's type stays Saved[E].
listed = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .create(
        "created",
        Product,
        data=lambda c: Product(id=c.payload.id, name="x", stock=c.steps["count"]),
        event=lambda c: (reveal_type(c.steps["count"]), EmailVerified(c.payload.id))[1],  # R: int # PR: int
    )
    .return_(lambda c: ok(c.steps["created"]))
)
reveal_type(listed)  # R: kumiko_typed._finished.Finished[_models.Order, kumiko_typed._saved.Saved[_models.Product]] # PR: Finished[Order, Saved[Product]]

onboarding = shop.workflow(
    "onboarding",
    trigger=manual(SignedUp),
    pipeline=shop.workflow_pipeline(SignedUp)
    .wait(timedelta(days=1))
    .wait_for_event(
        "verified",
        EmailVerified,
        key=lambda c: c.payload.user_id,
        event_key=lambda e: e.user_id,
        timeout=timedelta(days=7),
    )
    .retry(times=3, do=lambda b: b.compute("attempted", lambda c: c.steps["verified"] is not None))
    .compute("seen", lambda c: (reveal_type(c.steps["verified"]), reveal_type(c.steps["attempted"])))  # R: _models.EmailVerified | None # R: bool # PR: EmailVerified | None # PR: bool
    .send_mail(to=lambda c: c.payload.email, subject="Welcome", body="Hello"),
)
reveal_type(onboarding)  # R: kumiko_typed._feature.Workflow[_models.SignedUp, None] # PR: Workflow[SignedUp, None]

# A handler whose return_ only refuses (a stub, or one that always fails once its guard
# passes) has no Ok data: Never, instead of mypy's "Need type annotation" and pyright's Unknown.
refusing = shop.write_handler("refusing", shop.pipeline(Order).return_(lambda c: fail("conflict", "closed")))
reveal_type(refusing)  # R: kumiko_typed._feature.WriteHandler[_models.Order, Never] # PR: WriteHandler[Order, Never]
querying = shop.query_handler("querying", shop.query_pipeline(Order).return_(lambda c: fail("not_found", "gone")))
reveal_type(querying)  # R: kumiko_typed._feature.QueryHandler[_models.Order, Never] # PR: QueryHandler[Order, Never]


class Stored:
    """Pipelines kept as class attributes, one extended by reassigning its name: mypy checks
    such an assignment twice, the second time with the name already extended (a false
    kumiko-duplicate-step for "count")."""

    base = shop.pipeline(Order)
    base = base.compute("count", lambda c: len(c.payload.lines))
    base = (
        base
        .compute("total", lambda c: 2.0 * c.steps["count"])
        .compute("label", lambda c: str(c.steps["total"]))
    )
    done = base.return_(lambda c: ok((reveal_type(c.steps["count"]), c.steps["label"])))  # R: int # PR: int


DETAILED = True


class StoredIf:
    """Reassigned in ``if``, ``with``, ``try`` and ``match`` blocks of the class body: mypy checks
    those assignments twice as well."""

    base = shop.pipeline(Order)
    base = base.compute("count", lambda c: len(c.payload.lines))
    if DETAILED:
        base = base.compute("total", lambda c: 2.0 * c.steps["count"])
    else:
        base = base.compute("total", lambda c: 0.0)
    with open("/dev/null"):
        base = base.compute("label", lambda c: "x")
    try:
        base = base.compute("extra", lambda c: 1)
    except ValueError:
        pass
    match DETAILED:
        case True:
            base = base.compute("matched", lambda c: 2)
        case _:
            pass
    done = base.return_(lambda c: ok(reveal_type(c.steps["count"])))  # R: int # PR: int
