"""Where the command line's log records go: one line each on stderr, their tracebacks only
with ``-v``.

A command configured no logging, so Python printed WARNING and ERROR records through its
last-resort handler, traceback included: a failed operation on an old database showed the
statement and its values above the command's own one-line error.  The traceback of such a
record is the driver's text (docs/observability.md), so without ``-v`` a record is its first
line and the exception's class; ``-v`` logs INFO and up, ``-vv`` DEBUG, with tracebacks."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["verbosity"]

#: The ``-v`` format: the time, for a worker that runs for days.
_VERBOSE = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HINT = "-v shows its traceback"

FC = TypeVar("FC", bound=Callable[..., Any])


class _OneLine(logging.Formatter):
    """A record as one line: its message's first line, and the class of the exception it
    carries, never the exception's text or traceback."""

    def format(self, record: logging.LogRecord) -> str:
        lines = record.getMessage().splitlines()
        line = f"{record.levelname} {record.name}: {lines[0] if lines else ''}"
        if record.exc_info and record.exc_info[0] is not None:
            line += f" ({record.exc_info[0].__name__}; {_HINT})"
        return line


def _configure(_ctx: click.Context, _param: click.Parameter, count: int) -> int:
    """Before the command loads an application: the handler on the root logger, unless
    something (a ``sitecustomize``) configured logging already."""
    root = logging.getLogger()
    if root.handlers:
        return count
    handler = logging.StreamHandler()  # stderr
    if count:
        handler.setFormatter(logging.Formatter(_VERBOSE))
        root.setLevel(logging.INFO if count == 1 else logging.DEBUG)
    else:
        handler.setFormatter(_OneLine())
        root.setLevel(logging.WARNING)
    root.addHandler(handler)
    return count


def verbosity(text: str = "Log INFO records too, with tracebacks; -vv: DEBUG too.") -> Callable[[FC], FC]:
    """The ``-v`` / ``-vv`` option of a command; it configures logging as it is parsed."""
    return click.option("-v", "--verbose", count=True, expose_value=False, callback=_configure, help=text)
