"""The ``eventsourcing`` library's content-management (wiki) example, ported: pages with a
title, a slug and a body, edited by users; a page is found by its slug, a slug names one
page of a tenant, and renaming a page moves its slug; every page is listed in a log.

In ``eventsourcing`` the slug index is an aggregate of its own (its id made from the slug)
and the log a sequence of ``PageLogged`` events.  Here the page's row is its events'
projection, so a unique ``(tenant_id, slug)`` constraint on it is the index (a taken slug is
``unique_violation``), and the log is a read-model table the handlers keep.  The page rows
are rebuilt from the events with ``app.rebuild_projection``; the log is not an aggregate's
projection, so nothing replays it (it is written by ``unsafe_projection_upsert``).

A body edit states the version of the page it was made on: an edit of a page someone
changed meanwhile is a ``version_conflict``, not a lost update.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import attrs
from sqlalchemy import DateTime, String, Text, UniqueConstraint, select
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from kumiko_typed import Entity, Feature, ok

_SLUG = attrs.validators.matches_re(r"[a-z0-9]+(-[a-z0-9]+)*")
_TITLE: Callable[[Any, Any, str], None] = attrs.validators.and_(
    attrs.validators.min_len(1), attrs.validators.max_len(200)
)


class Page(Entity):
    __tablename__ = "wiki_page"
    __table_args__ = (UniqueConstraint("tenant_id", "slug"),)
    slug: Mapped[str] = mapped_column(String(100), default="")
    title: Mapped[str] = mapped_column(String(200), default="")
    body: Mapped[str] = mapped_column(Text, default="")
    modified_by: Mapped[uuid.UUID | None] = mapped_column(nullable=True, default=None)


class WikiReadModels(MappedAsDataclass, DeclarativeBase):
    """Tables that are no aggregate's."""


class PageLog(WikiReadModels):
    """Every page of a tenant, as the wiki's index page lists them."""

    __tablename__ = "wiki_page_log"
    page_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(index=True)
    slug: Mapped[str] = mapped_column(String(100))
    title: Mapped[str] = mapped_column(String(200))
    logged_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class PageCreated:
    slug: str
    title: str
    body: str
    created_by: uuid.UUID


@attrs.frozen
class TitleUpdated:
    title: str
    updated_by: uuid.UUID


@attrs.frozen
class SlugUpdated:
    slug: str
    updated_by: uuid.UUID


@attrs.frozen
class BodyUpdated:
    body: str
    updated_by: uuid.UUID


# --- payloads ------------------------------------------------------------------------------


@attrs.frozen
class CreatePage:
    slug: str = attrs.field(validator=attrs.validators.and_(attrs.validators.max_len(100), _SLUG))
    title: str = attrs.field(validator=_TITLE)
    body: str = attrs.field(default="", validator=attrs.validators.max_len(100_000))


@attrs.frozen
class Rename:
    slug: str
    new_slug: str = attrs.field(validator=attrs.validators.and_(attrs.validators.max_len(100), _SLUG))
    title: str = attrs.field(validator=_TITLE)


@attrs.frozen
class EditBody:
    slug: str
    body: str = attrs.field(validator=attrs.validators.max_len(100_000))
    #: The page's version the edit was made on.
    version: int


@attrs.frozen
class BySlug:
    slug: str


@attrs.frozen
class PageView:
    slug: str
    title: str
    body: str
    version: int


@attrs.frozen
class NoArgs:
    pass


# --- the feature ---------------------------------------------------------------------------

wiki = Feature("wiki", projections=[PageLog])
wiki.entity(Page)
wiki.event(PageCreated, name="page-created")
wiki.event(TitleUpdated, name="title-updated")
wiki.event(SlugUpdated, name="slug-updated")
wiki.event(BodyUpdated, name="body-updated")


@wiki.projector(Page, PageCreated)
def _created(row: Page, event: PageCreated) -> None:
    row.slug, row.title, row.body, row.modified_by = event.slug, event.title, event.body, event.created_by


@wiki.projector(Page, TitleUpdated)
def _titled(row: Page, event: TitleUpdated) -> None:
    row.title, row.modified_by = event.title, event.updated_by


@wiki.projector(Page, SlugUpdated)
def _moved(row: Page, event: SlugUpdated) -> None:
    row.slug, row.modified_by = event.slug, event.updated_by


@wiki.projector(Page, BodyUpdated)
def _edited(row: Page, event: BodyUpdated) -> None:
    row.body, row.modified_by = event.body, event.updated_by


create_page = wiki.write_handler(
    "page:create",
    wiki.pipeline(CreatePage)
    .create(
        "page",
        Page,
        data=lambda c: Page(slug=c.payload.slug, title=c.payload.title, body=c.payload.body, modified_by=c.user.id),
        event=lambda c: PageCreated(c.payload.slug, c.payload.title, c.payload.body, c.user.id),
    )
    .unsafe_projection_upsert(
        PageLog,
        on=["page_id"],
        row=lambda c: {
            "page_id": c.steps["page"].id,
            "tenant_id": c.tenant_id,
            "slug": c.payload.slug,
            "title": c.payload.title,
            "logged_at": c.steps["page"].entity.created_at,
        },
    )
    .return_(lambda c: ok(c.steps["page"].id)),
)

# Renaming moves the slug: the old one is free at once, the new one must be free.
rename_page = wiki.write_handler(
    "page:rename",
    wiki.pipeline(Rename)
    .get_one("page", lambda c: select(Page).where(Page.slug == c.payload.slug))
    .branch(
        when=lambda c: c.payload.new_slug != c.payload.slug,
        on_true=lambda b: b.append_event(
            Page, id=lambda c: c.steps["page"].id, event=lambda c: SlugUpdated(c.payload.new_slug, c.user.id)
        ),
    )
    .branch(
        when=lambda c: c.payload.title != c.steps["page"].title,
        on_true=lambda b: b.append_event(
            Page, id=lambda c: c.steps["page"].id, event=lambda c: TitleUpdated(c.payload.title, c.user.id)
        ),
    )
    .unsafe_projection_upsert(
        PageLog,
        on=["page_id"],
        row=lambda c: {
            "page_id": c.steps["page"].id,
            "tenant_id": c.tenant_id,
            "slug": c.payload.new_slug,
            "title": c.payload.title,
            "logged_at": c.steps["page"].created_at,
        },
    )
    .return_(lambda c: ok(c.steps["page"].version)),
)

edit_body = wiki.write_handler(
    "page:edit",
    wiki.pipeline(EditBody)
    .get_one("page", lambda c: select(Page).where(Page.slug == c.payload.slug))
    # The body is appended only to the version the editor read: another edit since is a
    # version_conflict, not a lost update.
    .append_event(
        Page,
        id=lambda c: c.steps["page"].id,
        event=lambda c: BodyUpdated(c.payload.body, c.user.id),
        version=lambda c: c.payload.version,
    )
    .return_(lambda c: ok(c.steps["page"].version)),
)

view_page = wiki.query_handler(
    "page:view",
    wiki.query_pipeline(BySlug)
    .get_one("page", lambda c: select(Page).where(Page.slug == c.payload.slug))
    .return_(
        lambda c: ok(
            PageView(c.steps["page"].slug, c.steps["page"].title, c.steps["page"].body, c.steps["page"].version)
        )
    ),
)

# The log holds every tenant's rows and is no aggregate's: the read names the tenant.
list_pages = wiki.query_handler(
    "page:list",
    wiki.query_pipeline(NoArgs)
    .find_many(
        "log",
        lambda c: select(PageLog).where(PageLog.tenant_id == c.tenant_id).order_by(PageLog.logged_at, PageLog.slug),
    )
    .return_(lambda c: ok([(entry.slug, entry.title) for entry in c.steps["log"]])),
)
