"""Features: the unit that owns handlers and workflows and declares capabilities."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Never, TypeVar, get_args, overload

import attrs
from typing_extensions import TypeVar as DefaultTypeVar

from . import _rules
from ._builders import Pipeline, QueryPipeline, WorkflowPipeline
from ._entity import Entity, default_aggregate_type
from ._finished import Finished, QueryFinished, WorkflowFinished
from ._markers import NoScope, NoSteps
from ._triggers import Trigger

if TYPE_CHECKING:
    from sqlalchemy import Table

__all__ = ["Feature", "QueryHandler", "Upcaster", "Workflow", "WriteHandler"]

#: Turns a stored event payload of one schema version into one of the next.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

# Without requires= (or without the plugin to read it) a feature declares nothing.
C = DefaultTypeVar("C", bound=str, covariant=True, default=Never)
P = TypeVar("P")
D = TypeVar("D")
E = TypeVar("E")
# What a workflow's run completes with (its ``return_``'s data; ``None`` without one).
# Defaulted, so that ``Workflow[P]`` written before results were typed still reads (as
# "any result"), and covariant, so that every ``Workflow[P, D]`` is a ``Workflow[P]``.
R = DefaultTypeVar("R", covariant=True, default=object)
V = TypeVar("V")
# A workflow pipeline's keys, scope and capabilities, taken as they are (see ``workflow``).
_S = TypeVar("_S")
_Sc = TypeVar("_Sc")
_C = TypeVar("_C", bound=str)


class _Named(Generic[P]):
    """What write and query handlers share: a full name and the payload class, read off
    the attrs fields each declares."""

    feature: Feature[Any]
    local_name: str
    pipeline: Finished[P, Any] | QueryFinished[P, Any]

    @property
    def name(self) -> str:
        """The full name, ``"<feature>:<local name>"``, used by ``dispatch_json`` and ``query_json``."""
        return f"{self.feature.name}:{self.local_name}"

    @property
    def payload_type(self) -> type[P]:
        return self.pipeline.payload_type

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


@attrs.frozen(eq=False, repr=False)  # _Named's repr: the kind and the full name
class WriteHandler(_Named[P], Generic[P, D]):
    """A named, role-guarded entry point: dispatching it runs ``pipeline`` in one transaction.

    ``D`` is the ``Ok`` data type, inferred from the pipeline's ``return_``.
    """

    feature: Feature[Any]
    local_name: str
    pipeline: Finished[P, D]
    roles: frozenset[str] | None


@attrs.frozen(eq=False, repr=False)  # _Named's repr: the kind and the full name
class QueryHandler(_Named[P], Generic[P, D]):
    """A named, role-guarded read: ``app.query`` runs ``pipeline`` in one read-only
    transaction, filtered to the user's tenant, and never commits.

    ``D`` is the ``Ok`` data type, inferred from the pipeline's ``return_``.  Query and
    write handlers share one namespace of full names, but neither runs as the other:
    ``dispatch`` refuses a query and ``query`` a write handler.
    """

    feature: Feature[Any]
    local_name: str
    pipeline: QueryFinished[P, D]
    roles: frozenset[str] | None


@attrs.frozen(eq=False)
class Workflow(Generic[P, R]):
    """A durable pipeline started by ``trigger`` and resumed by workers.

    ``R`` is what a completed run returns (``app.result``): the data of the pipeline's
    ``return_``, or ``None`` for a pipeline that ends without one."""

    feature: Feature[Any]
    local_name: str
    trigger: Trigger[P]
    pipeline: WorkflowPipeline[P, Any, Any, Any] | WorkflowFinished[P, R]
    #: The explicit way across a change stored runs could not resume under (docs/workflows.md):
    #: steps renamed since (old name → new), and keys they did not store (key → a function
    #: of the stored ``c.steps`` values giving the key's value).
    renamed: Mapping[str, str] = attrs.field(factory=dict)
    fill: Mapping[str, Callable[[Mapping[str, Any]], object]] = attrs.field(factory=dict)

    @property
    def name(self) -> str:
        return f"{self.feature.name}:{self.local_name}"


class Feature(Generic[C]):
    """A named slice of an application.

    ``requires`` lists the tier-2 step kinds (``"mail.send"``, ``"webhook.send"``,
    ``"call_feature"``) its pipelines may use; the mypy plugin reads the literals and
    the App's boot validation checks them again.  ``projections`` lists the
    non-aggregate tables that ``unsafe_projection_*`` steps may write.  ``value_types``
    lists the feature's own attrs classes (or enums) that its handlers' results (stored
    for an ``idempotency_key``) and its workflows' step values hold, besides its payload,
    event and entity classes: what ``App(value_types=...)`` names, carried by the feature
    so that every App using it can store them.
    """

    def __init__(
        self,
        name: str,
        *,
        requires: Iterable[C] = (),
        projections: Iterable[Table | type[Any]] = (),
        value_types: Iterable[type[Any]] = (),
    ) -> None:
        self.name = name
        self.requires: frozenset[str] = frozenset(requires)
        self.projections: tuple[Table | type[Any], ...] = tuple(projections)
        self.value_types: tuple[type[Any], ...] = tuple(value_types)
        #: Entity class → aggregate type name.
        self.entities: dict[type[Any], str] = {}
        #: Domain event class → stored event type name.
        self.events: dict[type[Any], str] = {}
        #: Domain event class → (its schema version, the upcasters from older ones).
        self.event_schemas: dict[type[Any], tuple[int, dict[int, Upcaster]]] = {}
        #: (entity class, event class) → inline projectors, run in the appending transaction.
        self.projectors: dict[tuple[type[Any], type[Any]], list[Callable[[Any, Any], None]]] = {}
        self.handlers: list[WriteHandler[Any, Any]] = []
        self.queries: list[QueryHandler[Any, Any]] = []
        self.workflows: list[Workflow[Any]] = []
        #: Problems found while declaring, reported by the App's boot validation.
        self.problems: list[str] = []

    def __repr__(self) -> str:
        return f"<Feature {self.name!r}>"

    def entity(self, cls: type[E], *, name: str | None = None) -> type[E]:
        """Own the aggregate ``cls`` (an :class:`Entity` subclass); ``name`` is its
        aggregate type (default: the class name in kebab case, ``StockItem`` → ``stock-item``)."""
        if not (isinstance(cls, type) and issubclass(cls, Entity)):
            self.problems.append(f"feature {self.name!r}: entity({cls!r}) needs a subclass of kumiko_typed.Entity")
            return cls
        self.entities[cls] = name or default_aggregate_type(cls)
        return cls

    def event(
        self,
        cls: type[E],
        *,
        name: str | None = None,
        version: int = 1,
        upcasters: Mapping[int, Upcaster] | None = None,
    ) -> type[E]:
        """Register the domain event ``cls`` (an attrs class) under the stored type ``name``.

        ``version`` is the schema version of ``cls`` that new events are stored with;
        ``upcasters[n]`` turns a stored version-``n`` payload (a JSON dict) into a
        version-``n + 1`` one, so one is needed for each version below ``version``."""
        given: object = cls  # typed a class; callers without mypy may pass Paid | Refunded
        classes = [m for m in get_args(given) if isinstance(m, type) and m is not type(None)]
        members = " and ".join(f"feature.event({m.__name__})" for m in classes) or "one class at a time"
        advice = f"an event is one attrs class; register each member, {members}"
        problem = unclassed("event(...) takes", given, advice)
        if problem is not None:
            self.problems.append(f"feature {self.name!r}: {problem}")
            return cls
        is_attrs = attrs.has(cls)  # not narrowing cls: it is returned as given
        if not is_attrs:
            self.problems.append(f"feature {self.name!r}: event({cls!r}) needs an attrs class")
            return cls
        upcasters = dict(upcasters or {})
        problem = _schema_problem(version, upcasters)
        if problem is not None:
            self.problems.append(f"feature {self.name!r}: event({cls.__name__}): {problem}")
            return cls
        self.events[cls] = name or default_aggregate_type(cls)
        self.event_schemas[cls] = (version, upcasters)
        return cls

    def projector(self, entity: type[E], event: type[V]) -> Callable[[Callable[[E, V], None]], Callable[[E, V], None]]:
        """Decorate ``fn(row, event)``: it updates the aggregate's row whenever ``event``
        is appended to it, in the same transaction."""

        def register(fn: Callable[[E, V], None]) -> Callable[[E, V], None]:
            self.projectors.setdefault((entity, event), []).append(fn)
            return fn

        return register

    def pipeline(self, payload: type[P]) -> Pipeline[P, NoSteps, NoScope, C]:
        """Start a write-handler pipeline whose payload is ``payload``."""
        return Pipeline(self, payload)

    def workflow_pipeline(self, payload: type[P]) -> WorkflowPipeline[P, NoSteps, NoScope, C]:
        """Start a workflow pipeline whose trigger payload is ``payload``."""
        return WorkflowPipeline(self, payload)

    def query_pipeline(self, payload: type[P]) -> QueryPipeline[P, NoSteps, NoScope, C]:
        """Start a query pipeline (reads, compute, branch, for_each, guard) whose payload is ``payload``."""
        return QueryPipeline(self, payload)

    def query_handler(
        self, name: str, pipeline: QueryFinished[P, D], *, roles: Iterable[str] | None = None
    ) -> QueryHandler[P, D]:
        """Register a query: ``app.query`` runs it read-only.  ``roles`` as for
        :meth:`write_handler`."""
        if isinstance(roles, str):
            roles = (roles,)
        query = QueryHandler(self, name, pipeline, None if roles is None else frozenset(roles))
        if query.roles is not None and not query.roles:
            self.problems.append(
                f"query {query.name}: roles=[] admits nobody; "
                "use roles=None for any authenticated user, or name the roles"
            )
        given: object = pipeline  # typed, but callers without mypy may pass anything
        if not isinstance(given, QueryFinished):
            self.problems.append(f"query {query.name}: {_rules.msg_query_registration(type(pipeline).__name__)}")
        elif (unclassed := _unclassed_handler_payload("query_pipeline", pipeline.payload_type)) is not None:
            # Not kept, as a workflow's: nothing may structure, store or run a union as a payload.
            self.problems.append(f"query {query.name}: {unclassed}")
            return query
        self.queries.append(query)
        return query

    def write_handler(
        self, name: str, pipeline: Finished[P, D], *, roles: Iterable[str] | None = None
    ) -> WriteHandler[P, D]:
        """Register a handler.  ``roles=None`` admits any authenticated user; otherwise
        the user needs at least one of ``roles``."""
        if isinstance(roles, str):
            roles = (roles,)
        handler = WriteHandler(self, name, pipeline, None if roles is None else frozenset(roles))
        if handler.roles is not None and not handler.roles:
            self.problems.append(
                f"handler {handler.name}: roles=[] admits nobody; "
                "use roles=None for any authenticated user, or name the roles"
            )
        given: object = pipeline  # typed, but callers without mypy may pass anything
        if not isinstance(given, Finished):
            self.problems.append(f"handler {handler.name}: {_rules.msg_no_return(type(pipeline).__name__)}")
        elif (unclassed := _unclassed_handler_payload("pipeline", pipeline.payload_type)) is not None:
            self.problems.append(f"handler {handler.name}: {unclassed}")
            return handler
        self.handlers.append(handler)
        return handler

    @overload
    def workflow(
        self,
        name: str,
        *,
        trigger: Trigger[P],
        pipeline: WorkflowFinished[P, D],
        renamed: Mapping[str, str] | None = None,
        fill: Mapping[str, Callable[[Mapping[str, Any]], object]] | None = None,
    ) -> Workflow[P, D]: ...
    @overload
    def workflow(
        self,
        name: str,
        *,
        trigger: Trigger[P],
        # Type variables, not Any: pyright solves a step's type variables from the type
        # expected of its result first, and WorkflowPipeline[P, Any, ...] made the event
        # wait_for_event hands event_key= Any when that step ends the pipeline.
        pipeline: WorkflowPipeline[P, _S, _Sc, _C],
        renamed: Mapping[str, str] | None = None,
        fill: Mapping[str, Callable[[Mapping[str, Any]], object]] | None = None,
    ) -> Workflow[P, None]: ...
    def workflow(
        self,
        name: str,
        *,
        trigger: Trigger[P],
        pipeline: WorkflowPipeline[P, Any, Any, Any] | WorkflowFinished[P, Any],
        renamed: Mapping[str, str] | None = None,
        fill: Mapping[str, Callable[[Mapping[str, Any]], object]] | None = None,
    ) -> Workflow[P, Any]:
        """Register a workflow; the trigger's payload type must be the pipeline's.  Its
        result type is the ``return_``'s data (``None`` for a pipeline without one).
        ``renamed`` and ``fill`` carry runs stored under an earlier definition across a
        change they could not resume under otherwise (checked at boot)."""
        workflow = Workflow(self, name, trigger, pipeline, dict(renamed or {}), dict(fill or {}))
        given: object = pipeline  # typed, but callers without mypy may pass a handler's pipeline
        if not isinstance(given, (WorkflowPipeline, WorkflowFinished)):
            # Not kept: nothing may read a pipeline of another kind as a workflow's.
            self.problems.append(f"workflow {workflow.name}: {_rules.msg_workflow_pipeline(type(given).__name__)}")
            return workflow
        unclassed = _unclassed_payload(trigger, pipeline.payload_type)
        if unclassed is not None:
            # Not kept: a run's payload is stored and read back by its class's name.
            self.problems.append(f"workflow {workflow.name}: {unclassed}")
            return workflow
        if pipeline.payload_type is not trigger.payload_type:
            message = _rules.msg_trigger_payload(trigger.payload_type.__name__, pipeline.payload_type.__name__)
            self.problems.append(f"workflow {workflow.name}: {message}")
        self.workflows.append(workflow)
        return workflow


def unclassed(where: str, given: object, advice: str) -> str | None:
    """Why ``given``, typed a class where ``where`` names it, is none (a union such as
    ``Paid | Refunded``, which only a caller without mypy can pass), and ``advice``;
    ``None`` for a class.  One wording for every place a class is due (also ``_boot``)."""
    if isinstance(given, type):
        return None
    return f"{where} {given!r}, which is no class: {advice}"


def _unclassed_payload(trigger: Trigger[Any], pipeline_payload: object) -> str | None:
    """A union (``Paid | Refunded``) where a run's payload class belongs: typed a class, so
    only a caller without mypy gets here, and a run could not be stored or started."""
    given: tuple[tuple[str, object], ...] = (
        (f"its trigger {'on_event' if trigger.kind == 'event' else trigger.kind}(...) gives", trigger.payload_type),
        ("its pipeline workflow_pipeline(...) takes", pipeline_payload),
    )
    advice = (
        "a run's payload is one class (to start on either of two events, "
        "register one event class that says which, and append it for both)"
    )
    for where, payload in given:
        problem = unclassed(where, payload, advice)
        if problem is not None:
            return problem
    return None


def _unclassed_handler_payload(builder: str, payload: object) -> str | None:
    """A union (``Paid | Refunded``, ``Optional[Paid]``) given as a handler's or query's
    payload: ``type[P]`` takes one class, so mypy refuses it and types ``c.payload`` as one
    member; at runtime the codec could not store it for an idempotency key, and JSON that
    fits two members would be taken as whichever is written first.  Refused at boot."""
    advice = (
        "a payload is one class (for either of two shapes, give one class a field typed as the union, "
        "each member with a Literal tag field such as kind: Literal['paid'], or give one class a kind field)"
    )
    return unclassed(f"its pipeline {builder}(...) takes", payload, advice)


def _schema_problem(version: object, upcasters: Mapping[Any, object]) -> str | None:
    """Why an event's ``version=``/``upcasters=`` cannot read every stored version, if so."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return f"version={version!r} must be an integer of at least 1"
    needed = set(range(1, version))
    if set(upcasters) != needed or not all(callable(fn) for fn in upcasters.values()):
        wanted = ", ".join(f"{n}: fn" for n in sorted(needed)) or "none"
        return f"upcasters= needs one function per older version ({wanted}), not {sorted(upcasters, key=str)}"
    return None
