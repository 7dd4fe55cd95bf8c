"""Whether this deploy can rebuild what a suspended run stored: its payload and the values
it carries (steps, scope, loop items) name classes by module and name, and a deploy may
have dropped or changed one.  Such a run is stranded, not failed (DESIGN §8): the worker
asks before it touches the run, the pre-deploy check asks the same of every run that may
name a class (``_run_check``), by these functions, so both give one reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
from sqlalchemy import select
from sqlalchemy.orm import Session

from ._compat import Unreadable
from ._errors import ClassMismatch, NewerFormat, StateError
from ._lazy_parts import Damage, PagedItems, Unread, joined, page_name, pages, paging
from ._serialization import FORMAT, FORMAT_KEY, TAG, Codec
from ._tables import workflow_parts

if TYPE_CHECKING:
    from ._feature import Workflow

__all__ = [
    "PARTS",
    "UNREADABLE",
    "VALUE_PAGES",
    "WOKEN_BY",
    "Rebuilt",
    "expanded",
    "mismatch",
    "parts_of",
    "read_first",
    "read_parts",
    "readable_format",
    "rebuild",
    "unreadable",
    "value_pages",
]

#: What reading a stored run can raise: a class the App no longer registers or has
#: changed (:class:`ClassMismatch`, a StateError), a row damaged or written by another
#: version (a key missing, a value of the wrong kind, a damaged decimal: ``InvalidOperation``
#: is an ArithmeticError, as an OverflowError is; either raised out of every worker pass).
UNREADABLE: Final = (StateError, LookupError, TypeError, ValueError, AttributeError, ArithmeticError)
#: The key of a run's state noting the event that woke it, while its segment (which lost
#: a race) is tried again: the worker reads the event before it resumes the run, and the
#: pre-deploy check reads it as well.
WOKEN_BY: Final = "woken_by"
#: The key of a run's state naming the parts stored beside it (``kumiko_workflow_parts``):
#: ``v/<key>``, a value of ``values`` left out of it; ``l/<path>``, the items of the loop
#: record at ``path`` (stored form 2); ``i/<path>``, the items of a loop record stored as
#: pages ``i/<path>/<k>`` (:mod:`kumiko_typed._lazy_parts`; form 3), which the record's
#: ``pages`` names and counts; ``p/<key>``, the value ``key`` stored as pages
#: ``p/<key>/<k>`` (form 5), which :data:`VALUE_PAGES` counts and a loop over the value
#: reads as its items.  A state without it holds everything (each one before parts).
PARTS: Final = "parts"
#: The key of a run's state giving each value stored as pages (``p/<key>``) the ``pages``
#: of it, as a loop record's (form 5): a loop over a step value stores its items once,
#: as the value's pages, rather than as the value's part and its own pages.
VALUE_PAGES: Final = "value_pages"
#: The prefixes of the names of pages of items (a loop's; a value's): never read whole.
PAGED: Final = ("i/", "p/")


def read_parts(
    session: Session, run_ids: Collection[uuid.UUID], *, names: Collection[str] | None = None, pages: bool = True
) -> dict[uuid.UUID, dict[str, Any]]:
    """The stored parts of ``run_ids``, by run and name (none read for no run): only
    ``names`` if given; without the pages of loop items unless ``pages`` (a reader of
    values: a run's pages are most of its parts, and a worker reads them as it needs)."""
    found: dict[uuid.UUID, dict[str, Any]] = {run_id: {} for run_id in run_ids}
    if run_ids and (names is None or names):
        p = workflow_parts.c
        stmt = select(p.run_id, p.name, p.value).where(p.run_id.in_(list(run_ids)))
        if names is not None:
            stmt = stmt.where(p.name.in_(list(names)))
        if not pages:
            stmt = stmt.where(p.name.not_like("i/%"))
        for run_id, name, value in session.execute(stmt):
            found[run_id][name] = value
    return found


def parts_of(state: object) -> list[str]:
    """The names of the parts a run's state says are stored beside it."""
    names = state.get(PARTS, []) if isinstance(state, Mapping) else []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f'"{PARTS}" is not an array of part names')
    return names


def value_pages(state: object) -> dict[str, tuple[str, int, int]]:
    """The values a run's state stores as pages, by key: their name, count and page size
    (``ValueError`` for a damaged entry)."""
    stored = state.get(VALUE_PAGES, {}) if isinstance(state, Mapping) else {}
    if not isinstance(stored, Mapping):
        raise ValueError(f'"{VALUE_PAGES}" is not an object')
    return {key: paging({"pages": desc}) for key, desc in stored.items()}


def read_first(state: object) -> list[str]:
    """The parts a reader of a run's shape needs (:meth:`Stored.of`): the items of a loop
    stored whole (form 2).  Its values stored as parts and its loops' pages it does not."""
    return [name for name in parts_of(state) if name.startswith("l/")]


def expanded(state: object, parts: Mapping[str, Any], *, paged: bool = True, values: bool = True) -> Any:
    """A run's state as one holding everything stores it: its parts put back where they
    were left out (``parts``: the run's, by name).  Every reader of a state reads this
    form, which a state without parts already is.  A part named but missing raises.
    ``paged`` false: the items of a loop stored as pages are not put back (``parts``
    holds none of its pages): the record keeps its ``pages``, for a worker to read them
    as its iterations reach them; ``values`` false: the values stored as parts are not
    put back either, their keys given ``None`` (a reader of keys, :meth:`Stored.of`; a
    worker reads them as steps ask for them)."""
    names = parts_of(state)
    if not names:
        return state
    assert isinstance(state, Mapping)  # parts_of found names in it
    full = dict(state)
    for name in names:
        if name not in parts and not name.startswith(PAGED) and (values or not name.startswith("v/")):
            raise LookupError(f"its part {name} is missing from {workflow_parts.name}")
    paged_values = value_pages(state)
    left_out = [name[2:] for name in names if name.startswith("v/")] + list(paged_values)
    if left_out:
        inline, order = _split_values(full.get("values"), left_out)

        def put(k: str) -> Any:
            if not values:
                return None
            return joined(*paged_values[k], parts.get) if k in paged_values else parts[f"v/{k}"]

        full["values"] = {**full["values"], "v": {k: inline[k] if k in inline else put(k) for k in order}}
    loops = full.get("loops")
    in_parts = {name[2:] for name in names if name.startswith("l/")}
    if in_parts or (paged and loops is not None):
        if not isinstance(loops, Mapping):
            raise ValueError('"loops" is not an object')
        full["loops"] = {at: _put_back(at, record, in_parts, parts, paged=paged) for at, record in loops.items()}
    return full


def _split_values(values: object, left_out: list[str]) -> tuple[Mapping[str, Any], list[str]]:
    """The values a state holds inline, and the order of all its values (``left_out``
    the keys of those stored as parts)."""
    if not isinstance(values, Mapping) or not isinstance(values.get("v"), Mapping):
        raise ValueError('"values" is not an encoded dict of values')
    inline = values["v"]
    order = values.get("k", [*inline, *left_out])
    if not isinstance(order, list) or not all(k in inline or k in left_out for k in order):
        raise ValueError('"values" has no order of its keys')
    return inline, order


def _put_back(at: str, record: Any, in_parts: Collection[str], parts: Mapping[str, Any], *, paged: bool) -> Any:
    """A loop record with its items put back from its part or (if ``paged``) its pages."""
    if at in in_parts:
        return {**record, "items": parts[f"l/{at}"]}
    if not paged or not isinstance(record, Mapping) or "pages" not in record:
        return record
    return {**record, "items": joined(*paging(record), parts.get)}


def _late(decode: Callable[[Any], Any], damage: Damage) -> Callable[[Any], Any]:
    """``decode`` for a page read while a segment runs: what cannot be read is raised as
    :class:`~kumiko_typed._lazy_parts.LateUnreadable` (which no step catches) and noted
    in ``damage``."""

    def decoded(data: Any) -> Any:
        try:
            return decode(data)
        except UNREADABLE as exc:
            raise damage.late(exc) from exc

    return decoded


def _pages_of(
    value: tuple[str, int, int], read_many: Callable[[list[str]], Mapping[str, Any]], damage: Damage
) -> Callable[[str], Any]:
    """How an :class:`Unread` value stored as pages (``value``: their name, count and size)
    reads itself: its pages in one read, joined; a page missing or of the wrong length is
    raised as damage found late, as a loop's page is."""
    name, count, size = value

    def read(_name: str) -> Any:
        found = read_many([page_name(name, k) for k in range(pages(count, size))])
        try:
            return joined(name, count, size, found.get)
        except (LookupError, ValueError) as exc:
            raise damage.late(exc) from exc

    return read


@attrs.frozen
class Rebuilt:
    """What a suspended run stored, decoded: its payload, its loop records (keyed by
    their stored paths), and its ``values`` and ``scope`` as far as it stored them; and
    ``state``, its state as stored.  A resumed segment takes (and changes) the decoded
    values: one ``Rebuilt`` serves one segment."""

    payload: Any
    loops: dict[str, dict[str, Any]]
    parts: dict[str, Any]
    state: Mapping[str, Any]
    #: Each part the state names that was read, by name, as stored (encoded): a segment
    #: whose value still encodes to it does not write it again (``_workflow_engine``).  A
    #: value a worker reads as a step asks (:class:`Unread`) adds itself.  Pages aside:
    stored: dict[str, Any] = attrs.Factory(dict)
    #: Each loop or value stored as pages, by its name (``i/<path>``, ``p/<key>``): how
    #: many pages it has.
    paged: dict[str, int] = attrs.Factory(dict)
    #: Each value stored as pages, by its key as stored: its name, count and page size.
    shared: dict[str, tuple[str, int, int]] = attrs.Factory(dict)
    #: What the segment's reads of pages and values found unreadable, if anything.
    damage: Damage = attrs.Factory(Damage)


def readable_format(state: object) -> None:
    """Raise :class:`NewerFormat` for a run's state a newer release wrote (its payload
    too, written with it): read first, so that none of its tags is taken for damage."""
    written = state.get(FORMAT_KEY) if isinstance(state, Mapping) else None
    if isinstance(written, int) and not isinstance(written, bool) and written > FORMAT:
        raise NewerFormat(
            f"it was stored by a newer release (stored form {written}; this one reads up to {FORMAT}): "
            "a worker of that release resumes it"
        )


def rebuild(
    codec: Codec,
    workflow: Workflow[Any],
    payload: object,
    state: Mapping[str, Any],
    parts: Mapping[str, Any],
    read: Callable[[str], Any] | None = None,
    read_many: Callable[[list[str]], Mapping[str, Any]] | None = None,
) -> Rebuilt:
    """Decode everything a resumed run reads, once: the worker resumes the run with it,
    the check looks only for its errors (:class:`ClassMismatch` for a class this App
    does not have as stored, or a payload of a class ``workflow`` no longer takes, or a
    state a newer release wrote; the codec's others for a damaged row).  ``state`` as
    stored in the run's row, ``parts`` the run's (:func:`read_parts`).  ``read``: how a
    worker reads a part by name, given ``parts`` without pages: a loop's paged items are
    then read as its iterations reach them (:class:`PagedItems`), not here, and a value
    stored as pages when a step asks for it, in one ``read_many`` (parts by name); the
    check passes every part, pages too, and every item is decoded."""
    readable_format(state)
    decoded = codec.decode(payload)
    takes = workflow.trigger.payload_type
    if not isinstance(decoded, takes):  # its resolvers would read fields it has not
        raise ClassMismatch(
            f"its payload is a {type(decoded).__name__}, and workflow {workflow.name} now takes {takes.__name__}"
        )
    full = expanded(state, parts, paged=read is None, values=read is None)
    loops: dict[str, dict[str, Any]] = {}
    paged: dict[str, int] = {}
    damage = Damage()
    for path, loop in full.get("loops", {}).items():
        if "items" in loop:
            items = codec.decode(loop["items"])
        else:
            assert read is not None  # else expanded put them back
            name, count, size = paging(loop)
            items = PagedItems(name, count, size, read, _late(codec.decode, damage), damage)
        if "pages" in loop:
            name, count, size = paging(loop)
            paged[name] = pages(count, size)
        loops[path] = {**loop, "items": items, "shadowed": codec.decode(loop["shadowed"])}
    names = parts_of(state)
    stored = {name: parts[name] for name in names if name in parts}
    paged_values = value_pages(state)
    for name, count, size in paged_values.values():
        paged[name] = pages(count, size)
    left_out = [name[2:] for name in names if name.startswith("v/")] + list(paged_values)
    decoded_parts = {"scope": codec.decode(full["scope"])} if "scope" in full else {}
    if read is not None and left_out:  # the values stored as parts, unread
        assert read_many is not None  # given with read
        inline, order = _split_values(state.get("values"), left_out)
        held = codec.decode({TAG: "dict", "v": inline})
        decode = _late(codec.decode, damage)

        def unread(k: str) -> Unread:
            if k in paged_values:
                name = paged_values[k][0]
                return Unread(name, _pages_of(paged_values[k], read_many, damage), decode, stored, damage)
            return Unread(f"v/{k}", read, decode, stored, damage)

        decoded_parts["values"] = {k: held[k] if k in inline else unread(k) for k in order}
    elif "values" in full:
        decoded_parts["values"] = codec.decode(full["values"])
    return Rebuilt(decoded, loops, decoded_parts, state, stored, paged, paged_values, damage)


def mismatch(path: str | None, exc: ClassMismatch) -> str:
    """Why a run is stranded whose stored values need classes this deploy does not have:
    what the worker marks it with and the check reports, word for word."""
    if isinstance(exc, NewerFormat):
        return f"at step {path}: {exc}"
    return (
        f"at step {path}: the stored state cannot be read: {exc}; "
        "a deploy with the class as the run stored it resumes the run"
    )


def unreadable(exc: Exception) -> Unreadable:
    """Why a run whose stored row is damaged cannot be read (``exc``: one of
    :data:`UNREADABLE` but a :class:`ClassMismatch`): the worker fails the run with it,
    after the run's path, and the check reports it, word for word."""
    return exc if isinstance(exc, Unreadable) else Unreadable(str(exc))
