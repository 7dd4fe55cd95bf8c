"""The App's settings as a typed dict, so the plugin's App factories type-check their keywords."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypedDict

import httpx
from typing_extensions import Unpack

from .._app import App
from .._feature import Feature
from .._mail import MailTransport


class AppSettings(TypedDict, total=False):
    """Every keyword of :class:`~kumiko_typed.App` but ``database_url`` (a test keeps it complete)."""

    clock: Callable[[], datetime]
    mail: MailTransport
    secrets: Callable[[str], str | None]
    http: httpx.Client
    value_types: Sequence[type[Any]]
    idempotency_retention: timedelta


class AppFactory(Protocol):
    """What the plugin's ``kumiko_*_app`` fixtures give: ``factory([feature], clock=...)`` builds
    an App on the fixture's database with its tables created, disposed after the test."""

    def __call__(self, features: Sequence[Feature[Any]], /, **settings: Unpack[AppSettings]) -> App: ...
