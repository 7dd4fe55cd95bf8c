"""The ``eventsourcing`` library's wiki, ported (examples/ports/wiki.py), on SQLite and
PostgreSQL: pages found by slug, renamed, edited on the version read; the page rows
rebuilt from the events after a row was changed behind their back; two writers racing
for one slug; another tenant's pages; hostile slugs and titles."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data

from examples.ports.wiki import (
    BodyUpdated,
    BySlug,
    CreatePage,
    EditBody,
    NoArgs,
    Page,
    PageCreated,
    PageView,
    Rename,
    SlugUpdated,
    TitleUpdated,
    create_page,
    edit_body,
    list_pages,
    rename_page,
    view_page,
    wiki,
)
from kumiko_typed import App, Ok, User


@pytest.fixture
def app(app_on: Callable[..., App]) -> App:
    return app_on([wiki])


def _page(app: App, user: User, slug: str, title: str, body: str = "") -> uuid.UUID:
    page: uuid.UUID = ok_data(app.dispatch(create_page, CreatePage(slug, title, body), user=user))
    return page


def test_pages_are_created_renamed_and_edited(app: App, make_user: Callable[..., User]) -> None:
    ann = make_user()
    bob = User(id=uuid.uuid4(), tenant_id=ann.tenant_id)  # another editor of the same wiki
    page = _page(app, ann, "welcome", "Welcome", "Hello")
    _page(app, ann, "rules", "Rules")
    assert app.dispatch(rename_page, Rename("welcome", "welcome-visitors", "Welcome, visitors"), user=bob) == Ok(3)
    assert failure_of(app.query(view_page, BySlug("welcome"), user=ann), "not_found")
    assert app.dispatch(edit_body, EditBody("welcome-visitors", "Hello there", 3), user=ann) == Ok(4)
    view = app.query(view_page, BySlug("welcome-visitors"), user=bob)
    assert view == Ok(PageView("welcome-visitors", "Welcome, visitors", "Hello there", 4))
    assert app.query(list_pages, NoArgs(), user=ann) == Ok(
        [("rules", "Rules"), ("welcome-visitors", "Welcome, visitors")]
    )
    # The old slug is free again.
    _page(app, bob, "welcome", "Another welcome")
    stream = [e.event for e in ok_data(app.read_stream(Page, page, user=ann))]
    assert stream == [
        PageCreated("welcome", "Welcome", "Hello", ann.id),
        SlugUpdated("welcome-visitors", bob.id),
        TitleUpdated("Welcome, visitors", bob.id),
        BodyUpdated("Hello there", ann.id),
    ]
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(Page.modified_by).where(Page.id == page)).scalar_one() == ann.id


def test_an_edit_of_an_older_version_is_a_conflict_not_a_lost_update(app: App, user: User) -> None:
    page = _page(app, user, "draft", "Draft", "v1")
    assert app.dispatch(edit_body, EditBody("draft", "mine", 1), user=user) == Ok(2)
    theirs = failure_of(app.dispatch(edit_body, EditBody("draft", "theirs", 1), user=user), "version_conflict")
    assert theirs.details == {"entity_id": str(page), "expected_version": 1, "current_version": 2}
    assert app.query(view_page, BySlug("draft"), user=user) == Ok(PageView("draft", "Draft", "mine", 2))


def test_a_taken_slug_is_refused_and_nothing_is_written(app: App, user: User) -> None:
    _page(app, user, "a", "A")
    _page(app, user, "b", "B")
    taken = failure_of(app.dispatch(rename_page, Rename("b", "a", "B moved"), user=user), "unique_violation")
    assert taken.details["columns"] == ["tenant_id", "slug"]
    assert failure_of(app.dispatch(create_page, CreatePage("a", "Again"), user=user), "unique_violation")
    assert app.query(list_pages, NoArgs(), user=user) == Ok([("a", "A"), ("b", "B")])
    assert app.query(view_page, BySlug("b"), user=user) == Ok(PageView("b", "B", "", 1))


def test_two_writers_racing_for_one_slug_get_one_page(app: App, user: User) -> None:
    barrier = threading.Barrier(2)
    results: list[object] = []

    def write(title: str) -> None:
        barrier.wait()
        results.append(app.dispatch(create_page, CreatePage("home", title), user=user))

    threads = [threading.Thread(target=write, args=(t,)) for t in ("Mine", "Theirs")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(type(r).__name__ for r in results) == ["Failure", "Ok"], results
    (lost,) = [r for r in results if not isinstance(r, Ok)]
    assert failure_of(lost).code == "unique_violation"
    (logged,) = ok_data(app.query(list_pages, NoArgs(), user=user))
    assert logged[0] == "home" and ok_data(app.query(view_page, BySlug("home"), user=user)).title == logged[1]


def test_the_page_rows_are_rebuilt_from_their_events(app: App, user: User) -> None:
    page = _page(app, user, "faq", "FAQ", "Ask")
    app.dispatch(edit_body, EditBody("faq", "Ask away", 1), user=user)
    with app.engine.begin() as conn:  # a row changed behind the events' back
        conn.execute(sa.update(Page.__table__).where(Page.__table__.c.id == page).values(body="vandalised"))
    check = ok_data(app.rebuild_projection(Page, user=user, verify=True))
    assert check.changed == {page: ("body",)}
    assert ok_data(app.rebuild_projection(Page, user=user)).changed == {page: ("body",)}
    assert ok_data(app.query(view_page, BySlug("faq"), user=user)).body == "Ask away"
    assert ok_data(app.rebuild_projection(Page, user=user, verify=True)).matches


def test_tenants_have_their_own_slugs(app: App, make_user: Callable[..., User]) -> None:
    ann, zed = make_user(), make_user()
    _page(app, ann, "home", "Ann's home", "ann")
    _page(app, zed, "home", "Zed's home", "zed")
    assert ok_data(app.query(view_page, BySlug("home"), user=zed)).body == "zed"
    assert app.query(list_pages, NoArgs(), user=zed) == Ok([("home", "Zed's home")])
    assert app.dispatch(edit_body, EditBody("home", "zed's own", 1), user=zed) == Ok(2)  # zed's page, not ann's
    assert ok_data(app.query(view_page, BySlug("home"), user=ann)).body == "ann"


@pytest.mark.parametrize(
    ("data", "paths"),
    [
        ({"slug": "../etc/passwd", "title": "x"}, ["$.slug"]),
        ({"slug": "Home Page", "title": "x"}, ["$.slug"]),
        ({"slug": "ok", "title": ""}, ["$.title"]),
        ({"slug": "a" * 101, "title": "t" * 201}, ["$.slug", "$.title"]),
        ({"slug": "ok", "title": "nul\u0000"}, ["$.title"]),
        ({"slug": "ok", "title": "x", "owner": "root"}, ["$.owner"]),
    ],
)
def test_hostile_pages_are_refused_at_their_fields(
    app: App, user: User, data: dict[str, object], paths: list[str]
) -> None:
    refused = failure_of(app.dispatch_json("wiki:page:create", data, user=user), "validation_error")
    assert sorted(d["path"] for d in refused.details) == paths
    assert app.query(list_pages, NoArgs(), user=user) == Ok([])
