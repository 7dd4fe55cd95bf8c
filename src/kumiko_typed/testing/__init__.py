"""The testing kit: a clock the test moves, a mail transport that keeps what it sent, and a
pytest plugin (loaded by the ``pytest11`` entry point) with Apps on a temporary SQLite file
and on a throw-away PostgreSQL.  See docs/testing-handlers.md.

The PostgreSQL harness is :mod:`kumiko_typed.testing.postgres` (its servers need psycopg:
the ``testing`` extra); nothing here imports it, so the kit works without psycopg.  The
names below are imported when first read, as ``kumiko_typed``'s are: loading the plugin,
which imports this package, imports none of the library.
"""

import typing as _typing

from .._lazy_exports import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:  # what mypy and pyright read; at run time _WHERE below says the same
    from .._app import AppSettings as AppSettings
    from ._clock import FakeClock as FakeClock
    from ._memory_mail import MemoryMail as MemoryMail
    from ._settings import AppFactory as AppFactory

#: The kit's public names and their modules (see kumiko_typed._WHERE).
_WHERE = {
    "AppFactory": "._settings",
    "AppSettings": ".._app",
    "FakeClock": "._clock",
    "MemoryMail": "._memory_mail",
}

__all__ = ["AppFactory", "AppSettings", "FakeClock", "MemoryMail"]

if not _typing.TYPE_CHECKING:  # a __getattr__ the checkers saw would make any name valid to them
    __getattr__, __dir__ = _lazy_exports(__name__, globals(), _WHERE)
