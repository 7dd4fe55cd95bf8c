"""Boot validation: the plugin's rules, checked again when an App is built.

A user without mypy gets the same problems, worded the same way (the messages come
from ``_rules``), at start-up — all of them at once, in one ``BootError``.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs
from sqlalchemy import Index, Table, UniqueConstraint

from . import _rules
from ._compat import across_problems, ambiguous_names
from ._delivery import url_problem
from ._durations import parse_duration
from ._errors import ProjectorFailed, StepRefused
from ._feature import Feature, QueryHandler, WriteHandler, unclassed
from ._finished import Finished, Program, QueryFinished
from ._outbox_types import HEADER_NAME, Auth, RetryPolicy
from ._registered_names import name_problem
from ._steps import (
    AppendEvent,
    CallFeature,
    Create,
    FindMany,
    Fn,
    ForEach,
    NamedStep,
    Path,
    ProjectionDelete,
    ProjectionUpsert,
    Retry,
    SendMail,
    SendWebhook,
    Step,
    Update,
    Wait,
    WaitForEvent,
    address,
    locate,
    walk,
)
from ._tables import MAX_STEP_PATH, table_of

if TYPE_CHECKING:
    from ._triggers import Trigger

__all__ = ["check_pipeline", "validate"]


class _AppTables:
    """Which tables are aggregates, and which entity classes the App knows."""

    def __init__(self, features: Sequence[Feature[Any]], out: list[str]) -> None:
        self.entities: dict[type[Any], str] = {}
        self.entity_tables: dict[Table, str] = {}
        self.events: set[type[Any]] = set()
        #: Feature → the tables its ``projections=`` declares (the entries that are tables).
        self.projections: dict[Feature[Any], set[Table]] = {}
        self.handlers = {id(h) for f in features for h in f.handlers}
        self.queries = {id(q) for f in features for q in f.queries}
        for feature in features:
            self.events |= set(feature.events)
            declared = self.projections.setdefault(feature, set())
            for i, projection in enumerate(feature.projections):
                try:
                    declared.add(table_of(projection))
                except StepRefused as exc:
                    out.append(f"feature {feature.name!r}: projections=[...] entry {i}: {exc}")
            for entity in feature.entities:
                self.entities[entity] = feature.name
                try:
                    table = table_of(entity)
                except StepRefused as exc:
                    out.append(f"feature {feature.name!r}: entity {entity.__name__}: {exc} (is it abstract?)")
                    continue
                owner = self.entity_tables.get(table)
                if owner is not None and owner != feature.name:
                    out.append(
                        f"feature {feature.name!r}: entity table {table.name!r} is already owned by feature "
                        f"{owner!r}; an aggregate belongs to one feature (call it through call_feature)"
                    )
                self.entity_tables[table] = feature.name
        self._check_aggregate_types(features, out)
        self._check_event_names(features, out)
        for feature in features:
            for event, (_version, upcasters) in feature.event_schemas.items():
                out.extend(
                    _async_function(f"feature {feature.name!r}: event({event.__name__}): the upcaster from version {n}")
                    for n, fn in upcasters.items()
                    if _is_async(fn)
                )
            for (entity, event), projectors in feature.projectors.items():
                out.extend(
                    _async_function(
                        f"feature {feature.name!r}: the projector {ProjectorFailed.name_of(p)} of {entity.__name__} "
                        f"for {event.__name__}"
                    )
                    for p in projectors
                    if _is_async(p)
                )
                if entity not in self.entities:
                    out.append(
                        f"feature {feature.name!r}: projector for {entity.__name__}, which no feature registered "
                        "with feature.entity(...)"
                    )
                if event not in self.events:
                    out.append(
                        f"feature {feature.name!r}: projector for {event.__name__}, which no feature registered "
                        "with feature.event(...)"
                    )

    def _check_aggregate_types(self, features: Sequence[Feature[Any]], out: list[str]) -> None:
        """An aggregate type must lead back to one entity class: streams are read by it, so
        two classes sharing one (``shop.Order`` and ``billing.Order``, both ``"order"`` by
        default) read each other's streams, and a rebuild copies one's rows into the other's table."""
        owners: dict[str, type[Any]] = {}
        for feature in features:
            for cls, name in feature.entities.items():
                owner = owners.setdefault(name, cls)
                if owner is not cls:
                    out.append(
                        f"feature {feature.name!r}: entity {cls.__module__}.{cls.__qualname__} takes the aggregate "
                        f"type {name!r} of {owner.__module__}.{owner.__qualname__}; give one of them another name="
                    )

    def _check_event_names(self, features: Sequence[Feature[Any]], out: list[str]) -> None:
        """A stored type name must lead back to one class (reading a stream looks it up)."""
        reserved = {
            f"{name}.{what}" for f in features for name in f.entities.values() for what in ("created", "updated")
        }
        owners: dict[str, type[Any]] = {}
        for feature in features:
            for cls, name in feature.events.items():
                if name in reserved:
                    out.append(
                        f"feature {feature.name!r}: event {cls.__name__} takes the framework's type name {name!r}"
                    )
                elif owners.setdefault(name, cls) is not cls:
                    out.append(
                        f"feature {feature.name!r}: event {cls.__name__} takes the type name {name!r} "
                        f"of {owners[name].__name__}; give one of them another name="
                    )


def _check_trigger(where: str, expression: str | None) -> list[str]:
    if expression is None:
        return []
    from croniter import CroniterBadDateError, croniter

    if not croniter.is_valid(expression):
        return [f"{where}: {expression!r} is not a valid cron expression (minute hour day month weekday)"]
    try:  # else every worker pass would raise at its cron step, before the due runs
        croniter(expression, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterBadDateError:
        return [f"{where}: {expression!r} names no date that ever comes (February 30th, April 31st)"]
    return []


def _check_durations(step: Step) -> str | None:
    """A wait's duration, a ``wait_for_event``'s timeout and a retry's ``base_delay`` are
    checked here, not when a run first reaches them: a value of another type, a negative
    one, or a text that is no ISO-8601 duration."""
    if isinstance(step, Wait):
        what, value, kinds = "wait's duration", step.duration, "a timedelta, an ISO-8601 duration or a function"
    elif isinstance(step, WaitForEvent):
        what, value, kinds = (
            f"wait_for_event {step.name!r}: timeout",
            step.timeout,
            "a timedelta, an ISO-8601 duration or a function",
        )
    elif isinstance(step, Retry):
        # Else a text or None raised a bare TypeError out of App(...), and a float, a bool or
        # a misspelt backoff booted and failed each run at its first failed attempt.
        times_problem = _rules.retry_times_problem(step.times)  # the plugin says it of a literal alike
        if times_problem is not None:
            return times_problem
        if step.backoff not in ("exponential", "linear"):
            return f"retry's backoff must be 'exponential' or 'linear', not {step.backoff!r}"
        what, value, kinds = "retry's base_delay", step.base_delay, "a timedelta"
    else:
        return None
    if isinstance(value, str) and not isinstance(step, Retry):
        try:
            parse_duration(value)
        except ValueError as exc:
            return str(exc)
    elif isinstance(value, timedelta):
        negative = _rules.negative_duration(value)  # the plugin says it of a literal alike
        if negative is not None:
            return f"{what} {negative}"
    elif not (callable(value) and isinstance(step, (Wait, WaitForEvent))):
        number: object = value  # typed as a duration, given anything by a caller without a checker
        if isinstance(number, int | float) and not isinstance(step, Retry):
            # A number meant as seconds (or a bool): what to write, as the plugin says at the argument.
            return f"{what} {_rules.number_as_duration(number)}"
        return f"{what} must be {kinds}, not {type(value).__name__}"
    return None


def _unregistered_event(step: Step, tables: _AppTables) -> str | None:
    """A ``wait_for_event`` on a class no feature registers: no event of it can ever be
    appended, and a run could not even note what it waits for."""
    if not isinstance(step, WaitForEvent) or step.event in tables.events:
        return None
    advice = (
        "a wait is for one registered event class "
        "(for either of two outcomes, register one class that says which, and append it for both)"
    )
    problem = unclassed("it waits for", step.event, advice)
    if problem is not None:
        return problem
    name = step.event.__name__
    return (
        f"it waits for {name}, which is not a registered event; register it with "
        f"feature.event({name}) in a feature of this App"
    )


def _unregistered_trigger(where: str, trigger: Trigger[Any], tables: _AppTables) -> list[str]:
    """An ``on_event`` trigger of a class no feature registers: no such event is ever
    appended, so the workflow would never start.  Checked here so that it is one of the
    boot's listed problems; the worker's event feed raised a bare ``UnregisteredError``
    naming no workflow from inside ``App(...)``.  (A union is the feature's own problem.)"""
    event = trigger.payload_type
    if trigger.kind != "event" or not isinstance(event, type) or event in tables.events:
        return []
    name = event.__name__
    return [
        f"{where}: its trigger on_event({name}) names {name}, which is not a registered event; register it "
        f"with feature.event({name}) in a feature of this App"
    ]


def _resolver_problems(step: Step) -> list[str]:
    """Resolvers that cannot run: a coroutine function (called synchronously, it would
    only create a coroutine that never runs), or no function at all where the step calls
    one (a list for ``over=``, possible without mypy: every dispatch would raise)."""
    if not attrs.has(type(step)):
        return []
    method = _rules.RULES_BY_KIND[step.kind].method
    problems = []
    for field in attrs.fields(type(step)):
        value = getattr(step, field.name)
        called = _called(value)
        if _is_async(value):
            problems.append(_rules.msg_async_resolver(method, field.name))
        elif inspect.isasyncgenfunction(value) or inspect.isasyncgenfunction(called):
            problems.append(_rules.msg_async_iterator_resolver(method, field.name))
        elif field.type in _CALLED and not callable(value) and not (value is None and field.type in _OPTIONAL):
            problems.append(
                f'{field.name}= of step "{method}" must be a function of the context, not a '
                f"{type(value).__name__}; write {field.name}=lambda c: ... instead"
            )
    return problems


def _is_async(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(_called(fn))


def _async_function(what: str) -> str:
    """An ``async def`` projector, upcaster or ``fill=`` would only create a coroutine,
    never run: the row would not change, the payload or value would be the coroutine."""
    return (
        f"{what} is async: it runs synchronously inside the transaction and its coroutine would never run; "
        "make it a plain (non-async) function"
    )


def _called(value: object) -> object:
    """What calling ``value`` runs: an object runs its class's ``__call__``, which inspect's
    tests of the object itself do not look at."""
    if inspect.isroutine(value) or isinstance(value, type):
        return value
    return inspect.getattr_static(type(value), "__call__", None)


#: The annotations of the fields a step calls with the context: as ``_steps`` writes
#: them (postponed, so strings), and as they evaluate.
_CALLED: frozenset[object] = frozenset({"Fn", "Fn | None", Fn, Fn | None})
_OPTIONAL: frozenset[object] = frozenset({"Fn | None", Fn | None})


def _mail_problem(step: SendMail) -> str | None:
    to = step.to
    if isinstance(to, list | tuple):
        others = [type(t).__name__ for t in to if not isinstance(t, str)]
        given = f"a {type(to).__name__} holding {others[0]}" if others else None
    else:
        given = None if isinstance(to, str) or callable(to) else type(to).__name__
    if given is not None:  # to=None was an internal_error at every dispatch, to=[5] sent to "5"
        return f"send_mail to= takes an address, a list of addresses or a function of the context, not {given}"
    for name in ("subject", "body", "sender", "html", "reply_to"):
        value = getattr(step, name)
        if (value is not None or name in ("subject", "body")) and not isinstance(value, str) and not callable(value):
            # Else its repr was stored: html=5 sent "5", a list of replies one bad address.
            return f"send_mail {name}= takes a text or a function of the context, not {type(value).__name__}"
    return None


def _check_data_step(feature: Feature[Any], step: Step, tables: _AppTables) -> str | None:
    duration_problem = _check_durations(step)
    if duration_problem is not None:
        return duration_problem
    if isinstance(step, SendMail):
        return _mail_problem(step)
    if isinstance(step, SendWebhook) and step.auth is not None and not isinstance(step.auth, Auth):
        # auth="KEY" (the name signed() takes) was an internal_error at every dispatch.
        return (
            "send_webhook auth= takes bearer(ref), header_auth(name, ref) or signed(ref), "
            f"not {type(step.auth).__name__}"
        )
    if isinstance(step, SendWebhook) and step.retry is not None and not isinstance(step.retry, RetryPolicy):
        return f"send_webhook retry= takes a RetryPolicy, not {type(step.retry).__name__}"
    if isinstance(step, SendWebhook) and not HEADER_NAME.fullmatch(str(step.method)):
        return (
            f"send_webhook method={step.method!r} is not an HTTP method (a token: letters, digits and "
            '!#$%&\'*+-.^_`|~); give e.g. "POST"'
        )
    if isinstance(step, SendWebhook) and isinstance(step.url, str):
        url_refused = url_problem(step.url)
        if url_refused is not None:
            return f"send_webhook url=: {url_refused}"
    if isinstance(step, FindMany) and step.limit is not None and not (type(step.limit) is int and step.limit >= 0):
        return f"find_many limit={step.limit!r} must be 0 or more (an int), or None for no limit"
    if isinstance(step, Update) and step.version is None and not step.skip_optimistic_lock:
        return _rules.msg_optimistic_lock(step.name)
    if isinstance(step, (Create, Update, AppendEvent)):
        entity: object = step.entity  # typed a class; not so without mypy (a name, an instance)
        if not isinstance(entity, type):  # the checks below read its __name__
            return f"the entity must be an Entity class, not a {type(entity).__name__}; pass the class itself"
        owner = tables.entities.get(step.entity)
        if owner is None:
            return f"{step.entity.__name__} is not an entity of any feature; register it with feature.entity(...)"
        if owner != feature.name:
            return (
                f"{step.entity.__name__} belongs to feature {owner!r}; change it through one of that "
                "feature's handlers with call_feature"
            )
    if isinstance(step, CallFeature):
        target: object = step.handler  # typed a handler; not so without mypy
        if not isinstance(target, (WriteHandler, QueryHandler)):  # the checks below read its name
            return (
                f"call_feature targets a {type(target).__name__}, not a write handler; "
                "pass the handler that feature.write_handler(...) returned"
            )
        if id(step.handler) in tables.queries:
            return (
                f"call_feature targets {step.handler.name}, a query handler; call_feature runs write handlers "
                "only: read what the pipeline needs with find_one/get_one/find_many"
            )
        if id(step.handler) not in tables.handlers:
            return f"call_feature targets {step.handler.name}, which is not a handler of any feature of this App"
    if isinstance(step, (ProjectionUpsert, ProjectionDelete)):
        try:
            table = table_of(step.table)
        except StepRefused as exc:
            return str(exc)
        if table in tables.entity_tables:
            return (
                f"{table.name!r} is an aggregate's table, written only through events; "
                "use create/update/append_event with a projector"
            )
        if table not in tables.projections.get(feature, set()):
            return (
                f"table {table.name!r} is not declared by feature {feature.name!r}; "
                "add it to Feature(..., projections=[...])"
            )
        if isinstance(step, ProjectionUpsert):
            return _conflict_key_problem(table, step.on)
    return None


def _partial(index: Index) -> bool:
    """A unique index with a ``WHERE`` (``postgresql_where=``, ``sqlite_where=``) is no
    conflict target: ON CONFLICT infers it only when told that predicate."""
    return any(value is not None for key, value in index.dialect_kwargs.items() if key.endswith("_where"))


def _conflict_key_problem(table: Table, on: tuple[str, ...]) -> str | None:
    """An upsert's ``on=`` must be the columns of the table's primary key or of one of its
    unique constraints or (whole-table) unique indexes: ``ON CONFLICT`` matches nothing
    else, and both databases refused the statement at every dispatch, an
    ``internal_error`` saying only ``OperationalError``.  A column the table lacks was
    refused at every dispatch too, as a row "lacking" it.  Both are known at boot."""
    columns = list(table.c.keys())
    unknown = [name for name in on if name not in columns]
    if unknown:
        return f"unsafe_projection_upsert on={list(on)}: table {table.name!r} has no column {unknown[0]!r}"
    keys = [{c.name for c in table.primary_key.columns}]
    keys += [{c.name for c in k.columns} for k in table.constraints if isinstance(k, UniqueConstraint)]
    keys += [{c.name for c in i.columns} for i in table.indexes if i.unique and not _partial(i)]
    if on and set(on) in keys and len(set(on)) == len(on):
        return None
    shown = " or ".join(str(sorted(k)) for k in keys if k) or "none"
    return (
        f"unsafe_projection_upsert on={list(on)}: the conflict columns must be the table's primary key or a unique "
        f"constraint of {table.name!r} (ON CONFLICT matches nothing else); its keys are {shown} (a unique index "
        "your migrations made is read from the Table: declare it there, UniqueConstraint(...) or "
        "Index(..., unique=True))"
    )


def _name_problem(step: Step, name: object) -> str | None:
    """A step's or a loop item's name that is no string, or empty, worded as the plugin words it."""
    rule = _rules.RULES_BY_KIND.get(step.kind)
    method = rule.method if rule is not None else step.kind
    if isinstance(name, enum.Enum) and not isinstance(name, str):
        value = name.value if isinstance(name.value, str) else None
        return _rules.msg_plain_enum_name(method, type(name).__name__, name.name, value)
    if not isinstance(name, str):
        return _rules.msg_step_name(method)
    return _rules.msg_empty_step_name(method) if not name else None


def _given_name_problem(step: Step) -> str | None:
    """A ``name=`` (a wait's, a branch's, a retry's) that is no string, or empty.  A stored
    run finds its step by it: an empty one made an empty path part, and the definition
    that stored the run could not resume it (stranded, "an empty step path")."""
    name: object = step.step_name
    if name is None or isinstance(step, (NamedStep, ForEach)):  # no name=, or a key or an item
        return None
    rule = _rules.RULES_BY_KIND.get(step.kind)
    method = rule.method if rule is not None else step.kind
    if not isinstance(name, str):
        return f'name= of step "{method}" must be a string, not {type(name).__name__}'
    if not name:
        return _rules.msg_empty_given_name(method)
    return None


def _named_path(steps: Sequence[Step], path: str) -> str:
    """A workflow's step as its runs name it (``RunInfo.path``, a failed run's error:
    ``choose/on_true/@wait``), not by index; by index where its names cannot make one
    (a name that is no string or empty, reported beside it)."""
    try:
        named = locate(steps, Path.parse(path), named=False).by_name
    except (LookupError, ValueError, AttributeError, TypeError):
        return path
    # An empty name= makes an empty part ("", "~2" for a sibling): by index, then.
    return path if any(not part or part.startswith("~") for part in named.parts) else str(named)


def _check_names(
    steps: Sequence[Step], visible: set[str], where: str, path: str, out: list[str], shown: Callable[[str], str]
) -> set[str]:
    """Report duplicate step names; arms of one branch may set the same key."""
    defined: set[str] = set()
    for i, step in enumerate(steps):
        here = f"{path}{i}"
        if isinstance(step, ForEach) and (problem := _name_problem(step, step.item)) is not None:
            out.append(f"{where}, step {shown(here)} ({step.kind}): {problem}")  # an item name is no key: no duplicate
        if (problem := _given_name_problem(step)) is not None:
            out.append(f"{where}, step {shown(here)} ({step.kind}): {problem}")
        if isinstance(step, NamedStep):
            if (problem := _name_problem(step, step.name)) is not None:
                out.append(f"{where}, step {shown(here)} ({step.kind}): {problem}")
            elif step.name in visible:
                out.append(f"{where}, step {shown(here)} ({step.describe()}): {_rules.msg_duplicate_step(step.name)}")
            else:
                visible.add(step.name)
                defined.add(step.name)
        children = list(step.children())
        branch_keys: set[str] = set()
        for label, child in children:
            branch_keys |= _check_names(child.steps, set(visible), where, f"{here}/{label}/", out, shown)
        visible |= branch_keys
        defined |= branch_keys
    return defined


def check_pipeline(
    feature: Feature[Any], where: str, steps: tuple[Step, ...], builder: str, tables: _AppTables
) -> list[str]:
    out: list[str] = []
    # A workflow's runs name their steps by name, a handler's failures by index.
    shown = functools.partial(_named_path, steps) if builder == "WorkflowPipeline" else str
    for path, step, inside in walk(steps, builder):
        prefix = f"{where}, step {shown(path)} ({step.describe()})"
        rule = _rules.RULES_BY_KIND.get(step.kind)
        if rule is None:
            out.append(f"{prefix}: {_rules.msg_unknown_step(step.kind)}")
            continue
        if not _rules.allows(inside, step.kind):
            if rule.key == "end":
                out.append(f"{prefix}: {_rules.msg_return_in_subpipeline(inside)}")
            elif _rules.BUILDERS[inside].read_only:
                out.append(f"{prefix}: {_rules.msg_read_only(step.kind, rule.method, inside)}")
            else:
                out.append(f"{prefix}: {_rules.msg_workflow_only(step.kind, rule.method, inside)}")
        elif rule.tier == 2 and step.kind not in feature.requires:
            out.append(f"{prefix}: {_rules.msg_tier(step.kind, rule.method, set(feature.requires))}")
        for problem in (_check_data_step(feature, step, tables), _unregistered_event(step, tables)):
            if problem is not None:
                out.append(f"{prefix}: {problem}")
        out.extend(f"{prefix}: {problem}" for problem in _resolver_problems(step))
    _check_names(steps, set(), where, "", out, shown)
    return out


#: The steps a run can be suspended at, storing the path to them, with the shortest
#: part a suspension there adds (a retry's next attempt, ``r/#2``).
_SUSPENDING = {"workflow.wait": "", "workflow.wait_for_event": "", "workflow.retry": "/#2"}
#: The shortest iteration part of a loop's body (``item/do/#0/...``, ``r/do/#1/...``).
_FIRST_ITERATION = {"for_each": "#0/", "workflow.retry": "#1/"}


def long_paths(steps: Sequence[Step], where: str, shown: str = "", stored: str = "") -> list[str]:
    """Steps whose stored path (:func:`address` parts, by name) is too long for the runs'
    column in a loop's first iteration already: every run reaching one failed there with
    ``unstorable_state``, which a boot error says before the first run starts.  (A longer
    iteration number can still outgrow it: that run fails then, alike on both databases.)
    A step is named by its path as boot's other problems name it, shortened."""
    out: list[str] = []
    if not all(isinstance(step.step_name, str | None) for step in steps):
        return out  # a name that is no text has no address: reported as such
    for i, step in enumerate(steps):
        part = address(steps, i)
        here, named = f"{shown}{part}", f"{stored}{part}"
        least = len(named) + len(_SUSPENDING.get(step.kind, ""))
        if step.kind in _SUSPENDING and least > MAX_STEP_PATH:
            short = here if len(here) <= 80 else f"{here[:40]}...{here[-37:]}"
            out.append(
                f"{where}, step {short} ({step.kind}): a run suspended here stores its path by the names "
                f"of the steps leading to it, at least {least} characters, and at most {MAX_STEP_PATH} fit; "
                "shorten those names (a key, or name= of a wait, branch or retry)"
            )
        iteration = _FIRST_ITERATION.get(step.kind, "")
        for label, child in step.children():
            out.extend(long_paths(child.steps, where, f"{here}/{label}/", f"{named}/{label}/{iteration}"))
    return out


def value_type_problems(where: str, value_types: Iterable[object]) -> list[str]:
    """A ``value_types`` entry the codec cannot store: it keeps attrs classes and enums
    only, and dropped anything else unsaid, so a value of a named dataclass failed as
    ``unstorable_state`` at run time, telling to name what was named."""
    return [
        f"{where}: value_types lists {t!r}, which cannot be stored; name attrs classes and enums only"
        for t in value_types
        if not (isinstance(t, type) and (attrs.has(t) or issubclass(t, enum.Enum)))
    ]


def _not_features(features: object) -> list[str]:
    """A new user's ``App(todo)`` or ``App([add_task])``: each was an AttributeError or a
    TypeError from inside the App ("'WriteHandler' object has no attribute 'handlers'")."""
    wanted = "features must be a list of Feature objects"
    if isinstance(features, Feature):
        return [f"{wanted}, not one Feature: App([{features.name}], ...) with the brackets"]
    if isinstance(features, (str, bytes)) or not isinstance(features, Iterable):
        return [f"{wanted}, not {type(features).__name__}"]
    problems = []
    for i, item in enumerate(features):
        if isinstance(item, Feature):
            continue
        owner = getattr(item, "feature", None)
        its = f"; pass its feature, {owner.name!r}, instead" if isinstance(owner, Feature) else ""
        problems.append(f"features[{i}] is a {type(item).__name__}, not a Feature{its}")
    return problems


def validate(features: Sequence[Feature[Any]]) -> list[str]:
    problems = _not_features(features)
    if problems:
        return problems  # nothing more can be asked of them
    tables = _AppTables(features, problems)
    seen_features: set[str] = set()
    seen_handlers: set[str] = set()
    for feature in features:
        if (problem := name_problem("feature", feature.name)) is not None:
            problems.append(f"feature {feature.name!r}: {problem}")
        if feature.name in seen_features:
            problems.append(f"feature {feature.name!r} is listed twice; feature names must be unique")
        seen_features.add(feature.name)
        for kind in sorted(feature.requires - _rules.TIER2_KINDS):
            problems.append(f"feature {feature.name!r}: {_rules.msg_unknown_capability(kind)}")
        problems.extend(feature.problems)
        problems.extend(value_type_problems(f"feature {feature.name!r}", feature.value_types))
        # Write handlers and queries share one namespace of full names; a query says so.
        entries: list[tuple[str, str, str, object, type[Program[Any, Any]], str]] = [
            ("handler", h.name, h.local_name, h.pipeline, Finished, "handler names") for h in feature.handlers
        ]
        entries += [
            ("query", q.name, q.local_name, q.pipeline, QueryFinished, "handler and query names")
            for q in feature.queries
        ]
        for kind, name, local_name, pipeline, finished, names in entries:
            where = f"{kind} {name}"
            if (problem := name_problem(kind, local_name, full=name)) is not None:
                problems.append(f"{kind} {name!r}: {problem}")  # the name itself may be what is wrong
            if name in seen_handlers:
                problems.append(f"{where}: the name is registered twice; {names} must be unique")
            seen_handlers.add(name)
            if isinstance(pipeline, finished):
                if pipeline.feature is not feature:
                    starter = "query_pipeline" if kind == "query" else "pipeline"
                    message = _rules.msg_foreign_pipeline(pipeline.feature.name, feature.name, starter)
                    problems.append(f"{where}: {message}")
                problems.extend(check_pipeline(feature, where, pipeline.steps, pipeline.builder, tables))
        for workflow in feature.workflows:
            where = f"workflow {workflow.name}"
            if (problem := name_problem("workflow", workflow.local_name, full=workflow.name)) is not None:
                problems.append(f"workflow {workflow.name!r}: {problem}")
            problems.extend(_check_trigger(where, workflow.trigger.cron))
            problems.extend(_unregistered_trigger(where, workflow.trigger, tables))
            if workflow.pipeline.feature is not feature:
                message = _rules.msg_foreign_pipeline(workflow.pipeline.feature.name, feature.name, "workflow_pipeline")
                problems.append(f"{where}: {message}")
            steps = workflow.pipeline.steps
            problems.extend(check_pipeline(feature, where, steps, "WorkflowPipeline", tables))
            across = across_problems(steps, "WorkflowPipeline", workflow.renamed, workflow.fill)
            if isinstance(workflow.fill, Mapping):
                fills = workflow.fill.items()
                problems.extend(_async_function(f'{where}: fill= for "{k}"') for k, fn in fills if _is_async(fn))
            problems.extend(f"{where}: {problem}" for problem in [*ambiguous_names(steps), *across])
            problems.extend(long_paths(steps, where))
    return problems
