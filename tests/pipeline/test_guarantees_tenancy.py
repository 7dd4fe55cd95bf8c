"""Tenancy guarantees (DESIGN §5, §6) that no other test would notice losing, on SQLite and
PostgreSQL (issue 20): workflow reads are filtered to the run's tenant (a cron run's to
none), an entity of another tenant that the transaction already holds is still not
writable, and ``create`` stamps the dispatching user's tenant whatever ``data=`` set."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import NewDoc, Wrote, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, CronTick, Entity, Failure, Feature, Ok, User, cron, manual, ok
from kumiko_typed._tables import events
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)


class GttDoc(Entity):
    __tablename__ = "gtt_doc"
    title: Mapped[str] = mapped_column(sa.String(100))


DOCS: sa.Table = GttDoc.__table__  # type: ignore[assignment]


@attrs.frozen
class DocRef:
    id: uuid.UUID


@attrs.frozen
class Forged:
    """Create a document whose ``data=`` sets ``tenant_id`` to ``tenant``."""

    title: str
    tenant: uuid.UUID


def _feature() -> tuple[Feature[Any], Any]:
    f: Feature[Any] = Feature("gtt", requires=["call_feature"])
    f.entity(GttDoc)
    f.event(Wrote, name="gtt-wrote")
    create = f.write_handler(
        "create",
        f.pipeline(NewDoc)
        .create("doc", GttDoc, data=lambda c: GttDoc(title=c.payload.title))
        .return_(lambda c: ok(c.steps["doc"].id)),
    )
    return f, create


def _snapshot(app: App) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every document row and every event, committed."""
    with app.engine.connect() as conn:
        docs = [dict(r._mapping) for r in conn.execute(sa.select(DOCS).order_by(DOCS.c.title))]
        evs = [dict(r._mapping) for r in conn.execute(sa.select(events).order_by(events.c.position))]
    return docs, evs


def _by_id(c: Any) -> sa.Select[tuple[GttDoc]]:
    return sa.select(GttDoc).where(GttDoc.id == c.payload.id)


# --- 1. workflow reads are tenant-filtered ----------------------------------------------------


def test_a_workflow_run_reads_only_its_starters_tenant_in_every_segment(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    f, create = _feature()

    def titles(step: str) -> Callable[[Any], list[str]]:
        return lambda c: sorted(d.title for d in c.steps[step])

    look = f.workflow(
        "look",
        trigger=manual(DocRef),
        pipeline=f.workflow_pipeline(DocRef)
        .find_many("first", lambda c: sa.select(GttDoc))
        .compute("first_titles", titles("first"))
        .wait("PT1M")  # the next segments run in a worker pass, as the stored user
        .find_many("later", lambda c: sa.select(GttDoc))
        .compute("later_titles", titles("later"))
        .compute("counted", lambda c: c.db.execute(sa.select(sa.func.count()).select_from(GttDoc)).scalar_one())
        .wait("PT1M")
        .get_one("target", _by_id),
    )
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    alice, bob = make_user(), make_user()
    a_id = ok_data(app.dispatch(create, NewDoc("a-1"), user=alice))
    ok_data(app.dispatch(create, NewDoc("a-2"), user=alice))
    b_id = ok_data(app.dispatch(create, NewDoc("b-1"), user=bob))

    foreign = app.start_workflow(look, DocRef(b_id), user=alice)
    own = app.start_workflow(look, DocRef(a_id), user=alice)
    info = app.get_run(foreign)
    assert info is not None and info.status == "suspended"
    assert info.steps["first_titles"] == ["a-1", "a-2"]

    clock.advance(minutes=1)
    app.run_worker(once=True)
    info = app.get_run(foreign)
    assert info is not None and info.status == "suspended"
    assert (info.steps["later_titles"], info.steps["counted"]) == (["a-1", "a-2"], 2)

    clock.advance(minutes=1)
    app.run_worker(once=True)
    info = app.get_run(foreign)
    assert info is not None
    assert (info.status, info.error) == ("failed", {"code": "not_found", "message": 'step "target": no row matched'})
    mine = app.get_run(own)  # the control: the starter's own document is found
    assert mine is not None and mine.status == "completed"
    assert mine.steps["target"].title == "a-1"


def test_a_cron_started_run_sees_no_tenants_aggregates(app_on: AppOn, make_user: Callable[..., User]) -> None:
    f, create = _feature()
    sweep = f.workflow(
        "sweep",
        trigger=cron("*/5 * * * *"),
        pipeline=f.workflow_pipeline(CronTick)
        .find_many("docs", lambda c: sa.select(GttDoc))
        .compute("count", lambda c: c.db.execute(sa.select(sa.func.count()).select_from(GttDoc)).scalar_one())
        .compute("titles", lambda c: [d.title for d in c.steps["docs"]]),
    )
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    for who in (make_user(), make_user()):
        ok_data(app.dispatch(create, NewDoc("doc"), user=who))
    assert app.run_worker(once=True)["started"] == 0  # the first pass notes the time
    clock.advance(minutes=5)
    assert app.run_worker(once=True)["started"] == 1
    (run,) = app.runs(sweep)
    assert run.status == "completed"
    assert (run.steps["titles"], run.steps["count"]) == ([], 0)


# --- 2. another tenant's entity, already in the transaction, is not writable ------------------


#: How the sysadmin's pipeline gets tenant B's document into its transaction: a nested
#: read, or a nested write (both as a user of tenant B).
INNER = ["get_one", "update"]
#: What the sysadmin's pipeline then does to it as itself.
OUTER = ["update", "append_event"]


@pytest.mark.parametrize("outer", OUTER)
@pytest.mark.parametrize("inner", INNER)
def test_another_tenants_entity_loaded_by_call_feature_as_user_is_not_writable(
    app_on: AppOn, make_user: Callable[..., User], inner: str, outer: str
) -> None:
    f, create = _feature()
    if inner == "get_one":
        fetch_pipeline = f.pipeline(DocRef).get_one("doc", _by_id).return_(lambda c: ok(c.steps["doc"]))
    else:
        fetch_pipeline = (
            f.pipeline(DocRef)
            .update("doc", GttDoc, id=lambda c: c.payload.id, changes=lambda c: {"title": "touched"}, version=1)
            .return_(lambda c: ok(c.steps["doc"].entity))
        )
    fetch = f.write_handler("fetch", fetch_pipeline)
    bob = make_user()
    sysadmin = make_user("sysadmin")
    take = f.pipeline(DocRef).call_feature("b", fetch, payload=lambda c: c.payload, as_user=bob)
    if outer == "update":
        take = take.update(
            "hijack",
            GttDoc,
            id=lambda c: c.steps["b"].id,
            changes=lambda c: {"title": "hijacked"},
            version=lambda c: c.steps["b"].version,
        )
    else:
        take = take.append_event(GttDoc, id=lambda c: c.steps["b"].id, event=lambda c: Wrote(5))
    hijack = f.write_handler("hijack", take.return_(lambda c: ok("written")))
    app = app_on([f])
    b_id = ok_data(app.dispatch(create, NewDoc("b-doc"), user=bob))
    before = _snapshot(app)

    result = app.dispatch(hijack, DocRef(b_id), user=sysadmin)

    assert isinstance(result, Failure), result
    assert (result.code, result.details) == ("not_found", {"entity_id": str(b_id)})
    assert _snapshot(app) == before  # B's row and stream unchanged (the nested write rolled back too)
    # The control: a sysadmin of B's own tenant may write it.
    sysadmin_of_b = User(id=uuid.uuid4(), tenant_id=bob.tenant_id, roles=frozenset({"sysadmin"}))
    assert app.dispatch(hijack, DocRef(b_id), user=sysadmin_of_b) == Ok("written")


# --- 3. create stamps the dispatching user's tenant --------------------------------------------


def test_create_stamps_the_dispatching_users_tenant_over_the_one_data_set(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    f, _create = _feature()

    def forged(c: Any) -> GttDoc:
        doc = GttDoc(title=c.payload.title)
        doc.tenant_id = c.payload.tenant
        return doc

    forge = f.write_handler(
        "forge",
        f.pipeline(Forged).create("doc", GttDoc, data=forged).return_(lambda c: ok(c.steps["doc"].id)),
    )
    see = f.write_handler(
        "see",
        f.pipeline(DocRef)
        .find_many("docs", lambda c: sa.select(GttDoc))
        .return_(lambda c: ok([d.title for d in c.steps["docs"]])),
    )
    app = app_on([f])
    alice, bob = make_user(), make_user()
    doc_id = ok_data(app.dispatch(forge, Forged("forged", bob.tenant_id), user=alice))

    (row,), (event,) = _snapshot(app)
    assert (row["id"], row["tenant_id"]) == (doc_id, alice.tenant_id)
    assert (event["stream_id"], event["type"], event["tenant_id"]) == (doc_id, "gtt-doc.created", alice.tenant_id)
    assert event["payload"]["tenant_id"] == str(alice.tenant_id)
    assert app.dispatch(see, DocRef(doc_id), user=alice) == Ok(["forged"])
    assert app.dispatch(see, DocRef(doc_id), user=bob) == Ok([])
