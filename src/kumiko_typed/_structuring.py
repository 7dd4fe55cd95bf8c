"""Untrusted JSON-like input → payload instances, strictly.

cattrs does the structuring; the hooks here refuse the silent coercions its
defaults allow (``"5"`` → ``5``, ``1`` → ``"1"``, ``True`` → ``1``), reject extra
keys, and every problem becomes one ``{"path", "message"}`` detail.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar
from uuid import UUID

import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)

T = TypeVar("T")
Detail = dict[str, str]


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


class _Invalid(ValueError):
    pass


def _expect(value: object, accepted: tuple[type, ...], wanted: str) -> None:
    if isinstance(value, bool) and bool not in accepted:
        raise _Invalid(f"expected {wanted}, got {_json_type(value)}")
    if not isinstance(value, accepted):
        raise _Invalid(f"expected {wanted}, got {_json_type(value)}")


def _str(value: object, _: object) -> str:
    _expect(value, (str,), "a string")
    return value  # type: ignore[return-value]


def _int(value: object, _: object) -> int:
    _expect(value, (int,), "an integer")
    return value  # type: ignore[return-value]


def _float(value: object, _: object) -> float:
    _expect(value, (int, float), "a number")
    return float(value)  # type: ignore[arg-type]


def _bool(value: object, _: object) -> bool:
    _expect(value, (bool,), "true or false")
    return value  # type: ignore[return-value]


def _parsed(kind: str, parse: Callable[[str], T], *, numbers: bool = False) -> Callable[[object, object], T]:
    def hook(value: object, _: object) -> T:
        accepted: tuple[type, ...] = (str, int, float) if numbers else (str,)
        _expect(value, accepted, f"{kind} string")
        try:
            return parse(value if isinstance(value, str) else repr(value))
        except (ValueError, InvalidOperation):
            raise _Invalid(f"expected {kind} string, got {value!r}") from None

    return hook


def make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(str, _str)
    conv.register_structure_hook(int, _int)
    conv.register_structure_hook(float, _float)
    conv.register_structure_hook(bool, _bool)
    conv.register_structure_hook(UUID, _parsed("a UUID", UUID))
    conv.register_structure_hook(dt.datetime, _parsed("an ISO-8601 datetime", dt.datetime.fromisoformat))
    conv.register_structure_hook(dt.date, _parsed("an ISO-8601 date", dt.date.fromisoformat))
    conv.register_structure_hook(Decimal, _parsed("a decimal", Decimal, numbers=True))
    return conv


def _message(exc: BaseException) -> str:
    if isinstance(exc, _Invalid):
        return str(exc)
    if isinstance(exc, KeyError):
        return "required field is missing"
    if isinstance(exc, ForbiddenExtraKeysError):
        return "unknown field"
    if isinstance(exc, (TypeError, ValueError)):
        # attrs validators and converters raise these with their own wording.
        return str(exc) or type(exc).__name__
    return f"invalid value ({type(exc).__name__}: {exc})"


def _details(exc: BaseException, path: str, out: list[Detail]) -> None:
    if isinstance(exc, ForbiddenExtraKeysError):
        out.extend({"path": f"{path}.{key}", "message": "unknown field"} for key in sorted(exc.extra_fields))
        return
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        for sub in exc.exceptions:
            notes = [n for n in getattr(sub, "__notes__", ()) if isinstance(n, (AttributeValidationNote, IterableValidationNote))]
            if not notes:
                _details(sub, path, out)
                continue
            note = notes[-1]
            sub_path = f"{path}.{note.name}" if isinstance(note, AttributeValidationNote) else f"{path}[{note.index!r}]"
            _details(sub, sub_path, out)
        return
    out.append({"path": path, "message": _message(exc)})


def structure(converter: cattrs.Converter, data: object, cls: type[T]) -> T | list[Detail]:
    """Structure ``data`` into ``cls``; on failure return the list of problems instead."""
    if not isinstance(data, Mapping):
        return [{"path": "$", "message": f"expected a JSON object, got {_json_type(data)}"}]
    try:
        return converter.structure(data, cls)
    except (ClassValidationError, IterableValidationError, ForbiddenExtraKeysError, TypeError, ValueError, KeyError) as exc:
        details: list[Detail] = []
        _details(exc, "$", details)
        return details


def unstructure(converter: cattrs.Converter, value: Any) -> Any:
    return converter.unstructure(value)
