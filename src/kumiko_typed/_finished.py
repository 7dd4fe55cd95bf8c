"""A pipeline that has been ended with ``return_`` — the only thing a handler accepts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ._steps import Block, Step, sub_keys

if TYPE_CHECKING:
    from ._feature import Feature

__all__ = ["Finished", "Program", "QueryFinished", "WorkflowFinished"]

P = TypeVar("P")
D = TypeVar("D", covariant=True)


class Program(Generic[P, D]):
    """An ended pipeline: payload type ``P``, result data ``D``.

    Built once at import; ``initial_values`` are the keys declared inside
    sub-pipelines, which exist with ``None`` from the start of every run (DESIGN §3.4).
    """

    __slots__ = ("block", "builder", "feature", "initial_values", "payload_type", "steps")

    #: Whether running off the end of the steps completes the run (a workflow) rather
    #: than being a bug (a handler must end in ``return_``).
    ends_without_return: ClassVar[bool] = False

    def __init__(self, feature: Feature[Any], payload_type: type[Any], steps: tuple[Step, ...], builder: str) -> None:
        self.feature = feature
        self.payload_type = payload_type
        self.steps = steps
        self.block = Block(steps)
        #: The rule-table name of the builder that produced the top level.
        self.builder = builder
        self.initial_values: Mapping[str, None] = sub_keys(steps, builder)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.payload_type.__name__}: {len(self.steps)} steps>"


class Finished(Program[P, D]):
    """A write-handler pipeline ended with ``return_`` — what ``write_handler`` takes."""

    __slots__ = ()


class WorkflowFinished(Program[P, D]):
    """A workflow pipeline ended with ``return_`` (optional for workflows).  Not a
    ``Finished``: a pipeline that may suspend cannot be registered as a handler."""

    __slots__ = ()
    ends_without_return = True


class QueryFinished(Program[P, D]):
    """A query pipeline ended with ``return_`` — what ``query_handler`` takes.  Not a
    ``Finished``: a query is run by ``app.query``, in a read-only transaction, and a
    write pipeline cannot be registered as a query (nor this one as a write handler)."""

    __slots__ = ()
