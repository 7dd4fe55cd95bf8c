"""The testing kit: a clock the test moves, a mail transport that keeps what it sent, and a
pytest plugin (loaded by the ``pytest11`` entry point) with Apps on a temporary SQLite file
and on a throw-away PostgreSQL.  See docs/testing-handlers.md.

The PostgreSQL harness is :mod:`kumiko_typed.testing.postgres` (its servers need psycopg:
the ``testing`` extra); nothing here imports it, so the kit works without psycopg.
"""

from .._app import AppSettings
from ._clock import FakeClock
from ._memory_mail import MemoryMail
from ._settings import AppFactory

__all__ = ["AppFactory", "AppSettings", "FakeClock", "MemoryMail"]
