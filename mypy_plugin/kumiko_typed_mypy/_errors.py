"""The plugin's error codes (``kumiko-*``), described in docs/errors.md."""

from __future__ import annotations

from mypy.errorcodes import ErrorCode

from ._rules import rules

_CATEGORY = "kumiko"

CODES: dict[str, ErrorCode] = {
    code: ErrorCode(code, description, _CATEGORY) for code, description in rules.ERROR_CODES.items()
}

STEP_NAME = CODES[rules.CODE_STEP_NAME]
DUPLICATE_STEP = CODES[rules.CODE_DUPLICATE_STEP]
RETURN_IN_SUBPIPELINE = CODES[rules.CODE_RETURN_IN_SUBPIPELINE]
TIER = CODES[rules.CODE_TIER]
WORKFLOW_ONLY = CODES[rules.CODE_WORKFLOW_ONLY]
UNANALYZABLE = CODES[rules.CODE_UNANALYZABLE]
NO_RETURN = CODES[rules.CODE_NO_RETURN]
TRIGGER_PAYLOAD = CODES[rules.CODE_TRIGGER_PAYLOAD]
FOREIGN_PIPELINE = CODES[rules.CODE_FOREIGN_PIPELINE]
OPTIMISTIC_LOCK = CODES[rules.CODE_OPTIMISTIC_LOCK]
ASYNC_RESOLVER = CODES[rules.CODE_ASYNC_RESOLVER]
READ_ONLY = CODES[rules.CODE_READ_ONLY]
FILL = CODES[rules.CODE_FILL]
RENAMED = CODES[rules.CODE_RENAMED]
WORKFLOW_PIPELINE = CODES[rules.CODE_WORKFLOW_PIPELINE]
