"""The type of the plugin's App factories; their keywords are the App's own ``AppSettings``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from typing_extensions import Unpack

from .._app import App, AppSettings
from .._feature import Feature

__all__ = ["AppFactory"]


class AppFactory(Protocol):
    """What the plugin's ``kumiko_*_app`` fixtures give: ``factory([feature], clock=...)`` builds
    an App on the fixture's database with its tables created, disposed after the test."""

    def __call__(self, features: Sequence[Feature[Any]], /, **settings: Unpack[AppSettings]) -> App: ...
