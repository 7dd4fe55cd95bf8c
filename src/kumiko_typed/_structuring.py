"""Untrusted JSON-like input → payload instances, strictly.

cattrs does the structuring; the hooks here refuse the silent coercions its
defaults allow (``"5"`` → ``5``, ``1`` → ``"1"``, ``True`` → ``1``), reject extra
keys, matches a ``Literal`` or an enum as JSON spells it (``true`` is not ``1``), and every problem,
a payload validator's too (:mod:`._field_checks`), becomes one ``{"path", "message"}``
detail.  Before cattrs sees
the data, it is walked once for what no field type can be trusted to catch: a lone
surrogate or a NUL in any string or key, NaN or infinity, nesting without end.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
import re
from collections import abc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from enum import Enum, Flag
from typing import Any, Final, Literal, TypeVar, get_args, get_origin
from uuid import UUID, SafeUUID

import attrs
import cattrs
from cattrs.cols import mapping_structure_factory
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)

from ._any_fields import changed_under_any
from ._errors import Problem
from ._field_checks import json_type, listed, said, with_validator_problems
from ._field_types import field_types
from ._jsonable import bytes_from_text
from ._limits import decimal_problem, json_problems, moment_problem, path_children, path_step, source_path
from ._union_reads import changed_in_union
from ._unions import is_mixed_union, is_union, union_hook

__all__ = ["MAX_DETAILS", "Detail", "Hook", "make_converter", "structure", "unkeyable", "unreadable"]

T = TypeVar("T")
Detail = dict[str, str]


class _Invalid(ValueError):
    pass


def _expect(value: object, accepted: tuple[type, ...], wanted: str) -> None:
    if isinstance(value, bool) and bool not in accepted:
        raise _Invalid(f"expected {wanted}, got {json_type(value)}")
    if not isinstance(value, accepted):
        raise _Invalid(f"expected {wanted}, got {json_type(value)}")


def _str(value: object, _: object) -> str:
    _expect(value, (str,), "a string")
    return value  # type: ignore[return-value]


def _int(value: object, _: object) -> int:
    _expect(value, (int,), "an integer")
    return value  # type: ignore[return-value]


def _float(value: object, _: object) -> float:
    _expect(value, (int, float), "a number")
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:
        raise _Invalid("expected a number in the range of a double") from None
    if not math.isfinite(number):
        raise _Invalid("expected a finite number, got NaN or infinity")
    return number


def _datetime(value: str) -> dt.datetime:
    parsed = dt.datetime.fromisoformat(value)
    if parsed.tzinfo is None:  # which zone it meant, only the client knows
        raise _Invalid(f"expected an ISO-8601 datetime with a UTC offset, got {_shown(value)}")
    if moment_problem(parsed) is not None:  # stored in UTC, it could never be read back
        raise _Invalid(f"expected an ISO-8601 datetime within years 1 to 9999 in UTC, got {_shown(value)}")
    return parsed


#: A decimal written as text, as the payload schema states it: ASCII digits, no spaces
#: or underscores.  ``Decimal()`` also reads " 1 ", "1_000", Arabic-Indic "١٢" and
#: full-width "１", which a proxy or client validating against the schema refuses.
DECIMAL_TEXT: Final = r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?"
_DECIMAL_TEXT: Final = re.compile(DECIMAL_TEXT)


def _decimal(value: str) -> Decimal:
    parsed = Decimal(value)
    if not parsed.is_finite():
        raise _Invalid(f"expected a finite decimal, got {_shown(value)}")
    if _DECIMAL_TEXT.fullmatch(value) is None:
        raise ValueError(value)
    problem = decimal_problem(parsed)
    if problem is not None:
        raise _Invalid(problem)
    return parsed


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bool(value: object, _: object) -> bool:
    _expect(value, (bool,), "true or false")
    return value  # type: ignore[return-value]


def _parsed(kind: str, parse: Callable[[str], T], *, numbers: bool = False) -> Callable[[object, object], T]:
    def hook(value: object, _: object) -> T:
        accepted: tuple[type, ...] = (str, int, float) if numbers else (str,)
        _expect(value, accepted, f"{kind} string")
        try:
            return parse(value if isinstance(value, str) else repr(value))
        except _Invalid:
            raise
        except (ValueError, InvalidOperation):
            raise _Invalid(f"expected {kind} string, got {_shown(value)}") from None

    return hook


def _uuid(value: object, _: object) -> UUID:
    """``UUID(value)`` for a UUID field, the same texts read and refused: the steps of its
    constructor's ``hex=`` branch (CPython 3.11 to 3.14), the value set as its ``int=``
    branch sets it, without its checks of which of five forms it was given.  Parsing was
    the largest single cost of loading an event whose payload holds a UUID (a workflow's
    key, an order's id), which the feed does for each event of a type a run waits for:
    this hook takes 12,200 CPU instructions where ``_parsed`` took 14,500 (callgrind)."""
    if not isinstance(value, str):
        raise _Invalid(f"expected a UUID string, got {json_type(value)}")
    digits = value.replace("urn:", "").replace("uuid:", "").strip("{}").replace("-", "")
    try:
        if len(digits) != 32:
            raise ValueError(digits)
        number = int(digits, 16)
    except ValueError:
        raise _Invalid(f"expected a UUID string, got {_shown(value)}") from None
    made = _new_object(UUID)
    _set_slot(made, "int", number)  # what UUID(int=...) sets: the value, and that its safety is unknown
    _set_slot(made, "is_safe", SafeUUID.unknown)
    return made


_new_object: Final = object.__new__
_set_slot: Final = object.__setattr__

Hook = Callable[[Any, Any], Any]

_LISTS = frozenset({list, abc.MutableSequence})
_SEQUENCES = frozenset({abc.Sequence, abc.Collection, abc.Iterable})
_SETS = frozenset({set, abc.MutableSet})
_FROZENSETS = frozenset({frozenset, abc.Set})
_MAPPINGS = frozenset({dict, abc.Mapping, abc.MutableMapping})


def _origin(t: Any) -> Any:
    return get_origin(t) or t


def _guarded(inner: Hook, accepted: tuple[type, ...], wanted: str) -> Hook:
    """Check the JSON type before cattrs' own hook runs: its container hooks iterate
    whatever they get (a string would become a list of characters, an object the
    list of its keys) and its class hooks fail with Python's wording."""

    def hook(value: object, cl: object) -> object:
        _expect(value, accepted, wanted)
        return inner(value, cl)

    return hook


def _validated(conv: cattrs.Converter, t: Any) -> Hook:
    """cattrs' hook for an attrs class, with every field's validator failure reported (not
    only the constructor's first) when structuring the class fails."""
    inner = conv.gen_structure_attrs_fromdict(t)

    def hook(value: Mapping[str, Any], cl: object) -> object:
        try:
            return inner(value, cl)
        except ClassValidationError as exc:
            raise with_validator_problems(conv, exc, _origin(t), value) from None

    return hook


_LITERAL: Any = Literal  # typed as a special form, which mypy will not compare with an origin


def _same(value: object, allowed: object) -> bool:
    """``value`` is the literal ``allowed`` as JSON spells it: ``true`` is not ``1``, ``1.0`` not ``1``."""
    if isinstance(allowed, Enum):
        allowed = allowed.value
    return json_type(value) == json_type(allowed) and not isinstance(value, float) and value == allowed


def _one_of(choices: Sequence[object]) -> Hook:
    """One of a ``Literal``'s values or an enum's members, compared strictly (cattrs' own
    checks take ``True`` for ``1`` and word a miss with Python's repr of the value); an
    enum member is sent as its value."""
    spelled = [c.value if isinstance(c, Enum) else c for c in choices]
    wanted = f"expected one of {listed(spelled)}"
    types = {json_type(c) for c in spelled}

    def hook(value: object, _: object) -> object:
        for choice in choices:
            if _same(value, choice):
                return choice
        raise _Invalid(wanted if json_type(value) in types else f"{wanted}, got {json_type(value)}")

    return hook


@functools.cache
def _members(cl: type[Enum]) -> Hook:
    return _one_of(list(cl))


def _or_members(hook: Hook) -> Hook:
    """``hook`` for ``str``, ``int`` or ``float``, which cattrs (by ``singledispatch``) also
    picks for their enums (``IntEnum``, ``class Size(str, Enum)``): ``hook`` returned any
    string for those, not a member."""

    def either(value: object, cl: Any) -> object:
        return _members(cl)(value, cl) if _plain_enum(cl) else hook(value, cl)

    return either


def _plain_enum(t: Any) -> bool:
    """An enum whose values are its members (a ``Flag`` also takes their combinations)."""
    return isinstance(t, type) and issubclass(t, Enum) and not issubclass(t, Flag)


def _guard_containers(conv: cattrs.Converter) -> None:
    array: tuple[type, ...] = (list, tuple)
    obj: tuple[type, ...] = (Mapping,)

    def is_homogeneous_tuple(t: Any) -> bool:
        args = get_args(t)
        return _origin(t) is tuple and (not args or (len(args) == 2 and args[1] is Ellipsis))

    def is_hetero_tuple(t: Any) -> bool:
        return _origin(t) is tuple and not is_homogeneous_tuple(t)

    factories: list[tuple[Callable[[Any], bool], Callable[[Any], Hook], tuple[type, ...], str]] = [
        (lambda t: _origin(t) in _LISTS, lambda t: _items(conv, t, list), array, "an array"),
        (
            lambda t: _origin(t) in _SEQUENCES or is_homogeneous_tuple(t),
            lambda t: _items(conv, t, tuple),
            array,
            "an array",
        ),
        (is_hetero_tuple, conv.gen_structure_hetero_tuple, array, "an array"),
        (lambda t: _origin(t) in _SETS, lambda t: _items(conv, t, set), array, "an array"),
        (lambda t: _origin(t) in _FROZENSETS, lambda t: _items(conv, t, frozenset), array, "an array"),
        (lambda t: _origin(t) in _MAPPINGS, lambda t: _mapping(conv, t), obj, "a JSON object"),
        (attrs.has, lambda t: _validated(conv, t), obj, "a JSON object"),
    ]
    for predicate, factory, accepted, wanted in factories:
        conv.register_structure_hook_factory(
            predicate,
            lambda t, factory=factory, accepted=accepted, wanted=wanted: _guarded(factory(t), accepted, wanted),
        )


def _items(conv: cattrs.Converter, t: Any, into: Callable[[list[Any]], object]) -> Hook:
    """The hook for a list, a ``tuple[X, ...]``, a set or a frozenset of ``X``: each item
    structured, and every failure reported, as cattrs' own hooks do, but the exceptions of
    at most :data:`MAX_DETAILS` items kept, the rest only counted.  cattrs kept one per
    wrong item, each with its traceback: refusing a megabyte of wrong items (a body the
    HTTP adapter takes) cost seconds of CPU, the garbage collector walking all of them
    again and again (200,000 items: 10.7 s, against 0.4 s to read them right)."""
    args = get_args(t)
    item = args[0] if args else Any
    if item is Any:
        return lambda value, _: into(list(value))
    try:
        handler = conv.get_structure_hook(item)
    except RecursionError:  # a type that holds itself: look its hook up at each item
        handler = conv.structure

    def hook(value: Iterable[Any], _: object) -> object:
        made: list[Any] = []
        errors: list[Exception] = []
        unlisted = 0
        for index, each in enumerate(value):
            try:
                made.append(handler(each, item))
            except Exception as exc:
                if len(errors) == MAX_DETAILS:
                    unlisted += _details(exc, "", None)
                    continue
                note = IterableValidationNote(f"Structuring {t} @ index {index}", index, item)
                exc.__notes__ = [*getattr(exc, "__notes__", []), note]
                errors.append(exc)
        if errors:
            error = IterableValidationError(f"While structuring {t!r}", errors, t)
            setattr(error, _UNLISTED, unlisted)
            raise error
        return into(made)

    return hook


#: The failures of items an :func:`_items` hook counted but did not keep.
_UNLISTED: Final = "kumiko_unlisted"


#: An integer as JSON writes an object key: canonical decimal text (not ``"01"``, ``"+1"``,
#: ``"-0"``), of at most 100 digits (``int()`` of thousands would raise).
_INT_KEY: Final = re.compile(r"0|-?[1-9][0-9]{0,99}")


def _mapping(conv: cattrs.Converter, t: Any) -> Hook:
    """cattrs' hook for a mapping (into a ``dict``, as its own is); one whose keys are
    integers (``int``, an ``IntEnum``, a ``Literal`` of ints) first reads each key from its
    text, the only form JSON has for an object's key (``{1: "a"}`` is stored as ``{"1":
    "a"}``), as an ISO string is read as a UUID: such a field of an event was refused at
    every append, and one of a payload could only be given ``{}``.

    Made by cattrs' factory, not the converter's ``gen_structure_mapping``, which also
    registers the bare hook for the type: the next class with a field of that type got it
    without the JSON-type check (a string read as "'str' object has no attribute 'items'")."""
    inner = mapping_structure_factory(t, conv, dict)
    if not _integer_keys(t):
        return inner

    def hook(value: Mapping[Any, Any], cl: object) -> object:
        keys = (int(k) if isinstance(k, str) and _INT_KEY.fullmatch(k) else k for k in value)
        return inner(dict(zip(keys, value.values(), strict=True)), cl)

    return hook


def _integer_keys(t: Any) -> bool:
    key = (get_args(t) or (Any,))[0]
    if get_origin(key) is _LITERAL:
        return all(_is_integer(c) for c in get_args(key))
    return isinstance(key, type) and issubclass(key, int) and not issubclass(key, bool)


def make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    _guard_containers(conv)
    conv.register_structure_hook_factory(lambda t: get_origin(t) is _LITERAL, lambda t: _one_of(get_args(t)))
    conv.register_structure_hook_factory(_plain_enum, lambda t: _one_of(list(t)))
    conv.register_structure_hook_factory(is_mixed_union, lambda t: union_hook(t, conv.structure, _Invalid))
    conv.register_structure_hook(str, _or_members(_str))
    conv.register_structure_hook(int, _or_members(_int))
    conv.register_structure_hook(float, _or_members(_float))
    conv.register_structure_hook(bool, _bool)
    conv.register_structure_hook(UUID, _uuid)
    conv.register_structure_hook(dt.datetime, _parsed("an ISO-8601 datetime", _datetime))
    conv.register_structure_hook(dt.date, _parsed("an ISO-8601 date", dt.date.fromisoformat))
    conv.register_structure_hook(Decimal, _parsed("a decimal", _decimal, numbers=True))
    conv.register_structure_hook(bytes, _bytes)
    return conv


def _bytes(value: object, _: object) -> bytes:
    """Bytes travel in JSON as base64 text, as an event stores them (``jsonable``): a
    digest or a signature in an event is read back, and a client sends one so."""
    if isinstance(value, (bytes, bytearray)):  # a Python caller's own
        return bytes(value)
    _expect(value, (str,), "a base64 string")
    assert isinstance(value, str)
    try:
        return bytes_from_text(value)
    except ValueError:
        raise _Invalid(f"expected a base64 string, got {_shown(value)}") from None


def unreadable(converter: cattrs.Converter, cls: type[Any]) -> str | None:
    """Why JSON can never be structured into ``cls`` (a field type with no hook, an
    annotation naming an unknown type), or ``None``: asked at boot, so that a payload
    type nothing can fill fails there and not at every call with a message for Python."""
    try:
        converter.get_structure_hook(cls)
    except cattrs.errors.StructureHandlerNotFoundError as exc:
        if exc.type_ is cls and isinstance(cls, type) and not dataclasses.is_dataclass(cls):
            # The class itself, not a field of it: a plain class, whose fields no one declared.
            return f"{cls.__name__} is neither an attrs class nor a dataclass; declare its fields with @attrs.frozen"
        name = _type_name(exc.type_)
        return f"no JSON value can be read into {name}; use JSON-shaped field types (docs/http.md#payload-schemas)"
    except NameError as exc:
        return f"an annotation names an unknown type ({exc}); import it where the class is defined"
    return None


def unkeyable(cls: type[Any]) -> list[str]:
    """The mapping fields of ``cls`` (or of a class it holds) whose keys JSON cannot give
    back: an object's keys are text, and a ``bool`` or ``float`` (or ``None``, a tuple, a
    class) is never read from text.  Asked at boot of an event class, whose events are
    stored as JSON and must read back: such a field could hold only ``{}``, and an event
    with one non-empty was refused at every append."""
    problems = []
    for owner, field, t in field_types([cls]):
        if _origin(t) in _MAPPINGS and not _read_from_text((get_args(t) or (Any,))[0]):
            problems.append(
                f"field {owner.__qualname__}.{field} is keyed by {_type_name(get_args(t)[0])}, which no JSON object "
                "key (text) gives back, so only {} would be stored: key it by str, int, UUID, date, datetime, "
                "Decimal or an enum of text or integer values"
            )
    return list(dict.fromkeys(problems))


def _read_from_text(key: Any) -> bool:
    """Whether a mapping's key of type ``key`` is read from text, the only JSON key: text
    itself, a type read from its string (a UUID, a date), an integer (``_mapping``), an
    enum or ``Literal`` with a text or integer value, a union with such a member; a type
    this cannot tell (a ``NewType``, a ``TypeVar``) is left to the read."""
    if key is Any:
        return True
    origin = get_origin(key)
    if origin is _LITERAL:
        return any(isinstance(c, (str, Enum)) or _is_integer(c) for c in get_args(key))
    if is_union(key):
        return any(_read_from_text(m) for m in get_args(key))
    key = origin or key
    if not isinstance(key, type):
        return True
    if issubclass(key, Enum) and not issubclass(key, int):
        return any(isinstance(m.value, str) for m in key)
    return issubclass(key, _TEXT_KEYS) and not issubclass(key, bool)


#: The key types read from an object key's text (``datetime`` is a ``date``).
_TEXT_KEYS: Final = (str, int, UUID, dt.date, Decimal)


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(t: Any) -> str:
    return t.__qualname__ if isinstance(t, type) else str(t)


def _message(exc: BaseException) -> str:
    if isinstance(exc, _Invalid):
        return str(exc)
    if isinstance(exc, KeyError):
        return "required field is missing"
    return said(exc)  # a payload's validators and converters, in their own words


def _details(exc: BaseException, path: str, out: list[Detail] | None) -> int:
    """``exc``'s failures as details, added to ``out``; returns how many it did not add:
    those an :func:`_items` hook counted without keeping them and, when ``out`` is None,
    all of them (the count alone, for the items past the hundred an ``_items`` hook
    keeps: one walk, so the count and the listed details follow the same rules)."""
    if isinstance(exc, ForbiddenExtraKeysError):
        if out is None:
            return len(exc.extra_fields)
        # Sorted as written: keys of a dict given in Python may be of types that do not compare.
        steps = sorted(map(path_step, exc.extra_fields))
        out.extend({"path": path + step, "message": "unknown field"} for step in steps)
        return 0
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        unlisted = int(getattr(exc, _UNLISTED, 0))
        for sub in exc.exceptions:
            unlisted += _details(sub, path if out is None else _sub_path(sub, path), out)
        return unlisted
    if out is None:
        return 1
    out.append({"path": path, "message": _message(exc)})
    return 0


def _sub_path(sub: BaseException, path: str) -> str:
    """The path of ``sub``, one failure of a class or an iterable at ``path``: its last
    field or index note's step added, or ``path`` itself if it has none."""
    notes = [
        n for n in getattr(sub, "__notes__", ()) if isinstance(n, (AttributeValidationNote, IterableValidationNote))
    ]
    if not notes:
        return path
    note = notes[-1]
    if isinstance(note, AttributeValidationNote):
        return f"{path}.{note.name}"
    return path + path_step(note.index, bracketed=True)


def read_back_problems(
    converter: cattrs.Converter, stored: object, event: object, column: str, payload: object
) -> list[Problem]:
    """What keeps ``stored``, the JSON an event is about to be stored as, from being read back
    into the event's class by the reader of ``read_stream``, replays and triggers (a naive
    datetime, a decimal NaN, bytes), or read back as another value (``changed_under_any``):
    refused at the append, where the call can change it, since a stored event is never
    rewritten and would be unreadable (or read otherwise) for good.  Messages name the
    event's field, never its value."""
    read = structure(converter, stored, type(event))
    if not isinstance(read, list):
        problems = any_field_problems(event, column, payload)
        if problems:
            return problems
        if (changed := changed_in_union(event, read)) is None:
            return []
        where, given = changed
        message = (
            f"{given}: JSON stores both as text, and a union of text and another type reads it as one "
            "of them; type the field with the one it holds"
        )
        read = [{"path": where, "message": message}]
    return _read_back_refusals(read, event, column, payload)


def any_field_problems(event: object, column: str, payload: object) -> list[Problem]:
    """The refusal of a value under ``Any`` in ``event`` that JSON would not give back as it
    is, without converting the event first: a tuple key there is converted to a list, no
    key at all, and the conversion raised ``TypeError`` (an ``internal_error``)."""
    changed = changed_under_any(event)
    if changed is None:
        return []
    where, given = changed
    message = f"a field typed Any gives back JSON's own values only, not {given}; type the field to hold it"
    return _read_back_refusals([{"path": where, "message": message}], event, column, payload)


def _read_back_refusals(read: list[dict[str, Any]], event: object, column: str, payload: object) -> list[Problem]:
    name = type(event).__name__
    return [
        {
            "path": _payload_path(payload, event, d["path"]),
            "message": f"{name} could not read it back: {d['message'].partition(', got ')[0]} (at {d['path']})",
            "column": column,
        }
        for d in read
    ]


#: ``_field`` could not follow the path: no value to look for in the payload.
_UNFOLLOWED = object()


def _payload_path(payload: object, event: object, path: str) -> str:
    """The payload field the event's value at ``path`` came from; ``$`` if not found."""
    value = _field(event, path)
    return "$" if value is _UNFOLLOWED else source_path(payload, value)


def _field(event: object, path: str) -> object:
    """The value at ``path`` (``$.a[0].b``, as ``_details`` and ``changed_under_any``
    write it) of ``event``, or ``_UNFOLLOWED``: a guess (``None``) would name the first
    ``None`` in the payload.  Each step is matched against the steps ``path_step`` writes
    for the node's children rather than parsed: a key such as ``a-b``, ``a b`` or ``a]b``
    is written as it is and could not be parsed back (the detail named ``$``)."""
    node, at = event, 1  # past the ``$``
    while at < len(path):
        found: tuple[object, int] | None = None
        for step, child in _steps(node):
            end = at + len(step)
            # The longest step that ends at a step boundary: ``.a.b`` is the key "a.b" if there is one.
            if (
                path.startswith(step, at)
                and (end == len(path) or path[end] in ".[")
                and (found is None or end > found[1])
            ):
                found = child, end
        if found is None:
            return _UNFOLLOWED
        node, at = found
    return node


def _steps(node: object) -> Iterator[tuple[str, object]]:
    """The path steps of ``node``'s children in both ways a key is written (``.k``, ``['k']``)."""
    yield from path_children(node, "")
    if isinstance(node, Mapping):
        for key, child in node.items():
            yield path_step(key, bracketed=True), child


def structure(converter: cattrs.Converter, data: object, cls: type[T]) -> T | list[Detail]:
    """Structure ``data`` into ``cls``; on failure return the list of problems instead
    (at most :data:`MAX_DETAILS`, then one that counts the rest)."""
    if not isinstance(data, Mapping):
        return [{"path": "$", "message": f"expected a JSON object, got {json_type(data)}"}]
    unsafe = [{"path": path, "message": problem} for path, problem, _ in json_problems(data)]
    if unsafe:
        return _capped(unsafe)
    try:
        return converter.structure(data, cls)
    except Exception as exc:  # a payload's own attrs validators may raise anything
        details: list[Detail] = []
        unlisted = _details(exc, "$", details)
        return _capped(details, unlisted)


#: Most problems a payload's ``validation_error`` lists one by one: a body of a megabyte
#: could name a hundred thousand wrong items or unknown fields, an answer ten times its size.
MAX_DETAILS: Final = 100


def _capped(details: list[Detail], unlisted: int = 0) -> list[Detail]:
    if len(details) <= MAX_DETAILS and not unlisted:
        return details
    more = max(len(details) - MAX_DETAILS, 0) + unlisted
    return [*details[:MAX_DETAILS], {"path": "$", "message": f"and {more} more, not listed"}]
