"""Reading an ``internal_error``: a client-safe message and details that carry an error
id; the exception's text and traceback are in the log under that id."""

from __future__ import annotations

import re
from typing import Any

from kumiko_typed import Failure

_ERROR_ID = re.compile(r" \(error id ([0-9a-f]{32})\)$")


def error_id(failure: Failure) -> str:
    """The id the message ends with; the details carry the same one."""
    found = _ERROR_ID.search(failure.message)
    assert found is not None, failure
    assert isinstance(failure.details, dict) and failure.details.get("error_id") == found.group(1), failure
    return found.group(1)


def located(failure: Failure) -> dict[str, Any]:
    """The details of a crash without its error id: where it happened."""
    error_id(failure)
    assert isinstance(failure.details, dict)
    return {k: v for k, v in failure.details.items() if k != "error_id"}


def said(failure: Failure) -> str:
    """The message without its error id."""
    return _ERROR_ID.sub("", failure.message) if error_id(failure) else failure.message
