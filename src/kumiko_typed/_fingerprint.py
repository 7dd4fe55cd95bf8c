"""A workflow definition's fingerprint: its step structure and its resolvers' code.

A run resumed under a different definition would mix old and new steps; comparing
fingerprints turns that into a clear ``workflow_definition_changed`` failure.
"""

from __future__ import annotations

import hashlib
import types
from collections.abc import Iterable
from typing import Any

import attrs

from ._steps import Block, Step


def _code(code: types.CodeType, out: list[bytes]) -> None:
    out.append(code.co_code)
    out.append(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code(const, out)
        else:
            out.append(repr(const).encode())


def _value(value: Any, out: list[bytes]) -> None:
    if isinstance(value, Block):
        _steps(value.steps, out)
    elif isinstance(value, types.FunctionType):
        _code(value.__code__, out)
    elif isinstance(value, type):
        out.append(f"{value.__module__}.{value.__qualname__}".encode())
    else:
        out.append(repr(value).encode())


def _steps(steps: Iterable[Step], out: list[bytes]) -> None:
    for step in steps:
        out.append(f"[{step.kind}".encode())
        for field in attrs.fields(type(step)):
            out.append(field.name.encode())
            _value(getattr(step, field.name), out)
        out.append(b"]")


def fingerprint(steps: Iterable[Step]) -> str:
    parts: list[bytes] = []
    _steps(steps, parts)
    return hashlib.sha256(b"\x00".join(parts)).hexdigest()
