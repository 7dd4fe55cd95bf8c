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
from ._serialization import FORMAT, FORMAT_KEY, Codec
from ._tables import workflow_parts

if TYPE_CHECKING:
    from ._feature import Workflow

__all__ = [
    "PARTS",
    "UNREADABLE",
    "WOKEN_BY",
    "Rebuilt",
    "convert_loops",
    "expanded",
    "mismatch",
    "parts_of",
    "read_parts",
    "readable_format",
    "rebuild",
    "unreadable",
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
#: record at ``path``.  A state without it holds everything (each one before this form).
PARTS: Final = "parts"


def read_parts(session: Session, run_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    """The stored parts of ``run_ids``, by run and name (none read for no run)."""
    found: dict[uuid.UUID, dict[str, Any]] = {run_id: {} for run_id in run_ids}
    if run_ids:
        p = workflow_parts.c
        stmt = select(p.run_id, p.name, p.value).where(p.run_id.in_(list(run_ids)))
        for run_id, name, value in session.execute(stmt):
            found[run_id][name] = value
    return found


def parts_of(state: object) -> list[str]:
    """The names of the parts a run's state says are stored beside it."""
    names = state.get(PARTS, []) if isinstance(state, Mapping) else []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f'"{PARTS}" is not an array of part names')
    return names


def expanded(state: object, parts: Mapping[str, Any]) -> Any:
    """A run's state as one holding everything stores it: its parts put back where they
    were left out (``parts``: the run's, by name).  Every reader of a state reads this
    form, which a state without parts already is.  A part named but missing raises."""
    names = parts_of(state)
    if not names:
        return state
    assert isinstance(state, Mapping)  # parts_of found names in it
    full = dict(state)
    for name in names:
        if name not in parts:
            raise LookupError(f"its part {name} is missing from {workflow_parts.name}")
    values = full.get("values")
    left_out = [name[2:] for name in names if name.startswith("v/")]
    if left_out:
        if not isinstance(values, Mapping) or not isinstance(values.get("v"), Mapping):
            raise ValueError('"values" is not an encoded dict of values')
        inline = values["v"]
        order = values.get("k", [*inline, *left_out])
        if not isinstance(order, list):
            raise ValueError('"values" has no order of its keys')
        full["values"] = {**values, "v": {k: inline[k] if k in inline else parts[f"v/{k}"] for k in order}}
    loops = full.get("loops")
    in_parts = {name[2:] for name in names if name.startswith("l/")}
    if in_parts:
        if not isinstance(loops, Mapping):
            raise ValueError('"loops" is not an object')
        full["loops"] = {
            at: {**record, "items": parts[f"l/{at}"]} if at in in_parts else record for at, record in loops.items()
        }
    return full


def convert_loops(convert: Callable[[Any], Any], loops: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """A run's loop records with their items (and shadowed scope) encoded or decoded."""
    return {
        path: {**loop, "items": convert(loop["items"]), "shadowed": convert(loop["shadowed"])}
        for path, loop in loops.items()
    }


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
    #: Each part the state names, by name, as stored (encoded): a segment whose value
    #: still encodes to it does not write it again (``_workflow_engine``).
    stored: dict[str, Any] = attrs.Factory(dict)


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
    codec: Codec, workflow: Workflow[Any], payload: object, state: Mapping[str, Any], parts: Mapping[str, Any]
) -> Rebuilt:
    """Decode everything a resumed run reads, once: the worker resumes the run with it,
    the check looks only for its errors (:class:`ClassMismatch` for a class this App
    does not have as stored, or a payload of a class ``workflow`` no longer takes, or a
    state a newer release wrote; the codec's others for a damaged row).  ``state`` as
    stored in the run's row, ``parts`` the run's (:func:`read_parts`)."""
    readable_format(state)
    decoded = codec.decode(payload)
    takes = workflow.trigger.payload_type
    if not isinstance(decoded, takes):  # its resolvers would read fields it has not
        raise ClassMismatch(
            f"its payload is a {type(decoded).__name__}, and workflow {workflow.name} now takes {takes.__name__}"
        )
    full = expanded(state, parts)
    loops = convert_loops(codec.decode, full.get("loops", {}))
    decoded_parts = {part: codec.decode(full[part]) for part in ("values", "scope") if part in full}
    stored = {name: parts[name] for name in parts_of(state)}
    return Rebuilt(decoded, loops, decoded_parts, state, stored)


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
