"""The step rule table: the one place that says which step kinds exist, their tier,
which builders offer them, and how a refusal is worded.

Three readers share it: the runtime boot validation, the mypy plugin and the
builder generator (``scripts/generate_builders.py``).  The plugin loads this file
*by path* without importing the ``kumiko_typed`` package, so it must import nothing
but the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, Literal

__all__ = [
    "BUILDERS",
    "BUILDER_RULES",
    "CODE_ASYNC_RESOLVER",
    "CODE_DUPLICATE_STEP",
    "CODE_DURATION",
    "CODE_FOREIGN_PIPELINE",
    "CODE_NO_RETURN",
    "CODE_OPTIMISTIC_LOCK",
    "CODE_READ_ONLY",
    "CODE_RETURN_IN_SUBPIPELINE",
    "CODE_STARTED_BY_TRIGGER",
    "CODE_STEP_NAME",
    "CODE_TIER",
    "CODE_TRIGGER_PAYLOAD",
    "CODE_UNANALYZABLE",
    "CODE_UNKNOWN_KEY",
    "CODE_WORKFLOW_ONLY",
    "CODE_WORKFLOW_PIPELINE",
    "DURATION",
    "ERROR_CODES",
    "FRAMEWORK_COLUMNS",
    "READ_ONLY_KINDS",
    "RETRY_BODY_BUILDER",
    "RULES_BY_KIND",
    "STEP_RULES",
    "TIER2_KINDS",
    "BuilderRule",
    "KeyShape",
    "StepRule",
    "Tier",
    "allows",
    "duration_number_fix",
    "duration_problem",
    "fixes_result",
    "msg_ambiguous_name",
    "msg_async_iterator_resolver",
    "msg_async_resolver",
    "msg_call_feature_handler",
    "msg_duplicate_step",
    "msg_empty_given_name",
    "msg_empty_step_name",
    "msg_enum_typed_name",
    "msg_fill_key",
    "msg_fill_type",
    "msg_foreign_pipeline",
    "msg_generator_result",
    "msg_literal_choice",
    "msg_no_return",
    "msg_not_a_select",
    "msg_optimistic_lock",
    "msg_plain_enum_name",
    "msg_query_as_write",
    "msg_query_registration",
    "msg_read_only",
    "msg_renamed_kept",
    "msg_renamed_target",
    "msg_resolver_parameters",
    "msg_resolver_result",
    "msg_resolver_type",
    "msg_return_in_subpipeline",
    "msg_run_time_name",
    "msg_several_columns",
    "msg_started_by_trigger",
    "msg_step_name",
    "msg_tier",
    "msg_trigger_payload",
    "msg_unknown_capability",
    "msg_unknown_member_value",
    "msg_unknown_step",
    "msg_wait_keys",
    "msg_workflow_only",
    "msg_workflow_pipeline",
    "negative_duration",
    "number_as_duration",
    "resolver_parameter",
    "retry_times_problem",
    "trigger_call",
]

Tier = Literal[1, 2, 3]

#: How a step contributes to ``c.steps``.
#:  - ``none``: no key;  ``name``: one key named by the first argument;
#:  - ``arms``: keys of the branch arms;  ``body``: keys of a loop body;
#:  - ``retry``: keys of a retry body (plain, the body always completed);
#:  - ``end``: ends the pipeline (``return_``).
KeyShape = Literal["none", "name", "arms", "body", "retry", "end"]


@dataclass(frozen=True)
class StepRule:
    kind: str
    method: str
    tier: Tier
    key: KeyShape
    summary: str


STEP_RULES: Final[tuple[StepRule, ...]] = (
    StepRule("compute", "compute", 1, "name", "Compute a value from the context."),
    StepRule("read.find_one", "find_one", 1, "name", "Read one row, or None when there is none."),
    StepRule("read.get_one", "get_one", 1, "name", "Read one row; no row ends the pipeline with not_found."),
    StepRule("read.find_many", "find_many", 1, "name", "Read a list of rows."),
    StepRule("aggregate.create", "create", 1, "name", "Create an aggregate (event at version 1 + row)."),
    StepRule("aggregate.update", "update", 1, "name", "Change an aggregate with optimistic locking."),
    StepRule("aggregate.append_event", "append_event", 1, "none", "Append a domain event to an aggregate."),
    StepRule(
        "unsafe_projection_upsert",
        "unsafe_projection_upsert",
        1,
        "none",
        "Insert or update a row of a declared projection table.",
    ),
    StepRule(
        "unsafe_projection_delete", "unsafe_projection_delete", 1, "none", "Delete rows of a declared projection table."
    ),
    StepRule("branch", "branch", 1, "arms", "Run one of two sub-pipelines."),
    StepRule("for_each", "for_each", 1, "body", "Run a sub-pipeline once per item."),
    StepRule(
        "guard",
        "guard",
        1,
        "none",
        "Go on only when a condition holds; otherwise end the whole pipeline with a Failure.",
    ),
    StepRule("return", "return_", 1, "end", "End the pipeline with its result."),
    StepRule("mail.send", "send_mail", 2, "none", "Send an e-mail through the outbox."),
    StepRule("webhook.send", "send_webhook", 2, "none", "Send an HTTP request through the outbox."),
    StepRule("call_feature", "call_feature", 2, "name", "Run another feature's write handler in this transaction."),
    StepRule("workflow.wait", "wait", 3, "none", "Suspend the workflow run for a while."),
    StepRule(
        "workflow.wait_for_event",
        "wait_for_event",
        3,
        "name",
        "Suspend the workflow run until a matching event or a timeout.",
    ),
    StepRule("workflow.retry", "retry", 3, "retry", "Run a sub-pipeline again after a delay until it succeeds."),
)

RULES_BY_KIND: Final[dict[str, StepRule]] = {r.kind: r for r in STEP_RULES}
TIER2_KINDS: Final[frozenset[str]] = frozenset(r.kind for r in STEP_RULES if r.tier == 2)


@dataclass(frozen=True)
class BuilderRule:
    name: str
    #: Inside a workflow (tier 3 allowed)?
    workflow: bool
    #: Is ``return_`` offered? (``required`` = a handler must end with it)
    returns: Literal["required", "optional", "refused"]
    #: Builder handed to ``branch``/``for_each`` callbacks.
    nested: str
    description: str
    #: A query's builder: only steps that read (no write, no outbox row, no suspension).
    read_only: bool = False


BUILDER_RULES: Final[tuple[BuilderRule, ...]] = (
    BuilderRule(
        "Pipeline",
        False,
        "required",
        "SubPipeline",
        "A write handler's top level: tier 1, declared tier 2, ends with return_.",
    ),
    BuilderRule(
        "SubPipeline",
        False,
        "refused",
        "SubPipeline",
        "Inside branch/for_each of a handler and inside retry: no return_, no tier-3 step.",
    ),
    BuilderRule(
        "WorkflowPipeline",
        True,
        "optional",
        "WorkflowSubPipeline",
        "A workflow's top level: every step; return_ optional (running off the end completes the run).",
    ),
    BuilderRule(
        "WorkflowSubPipeline",
        True,
        "refused",
        "WorkflowSubPipeline",
        "Inside a workflow's branch/for_each: tier 3 allowed, no return_.",
    ),
    BuilderRule(
        "QueryPipeline",
        False,
        "required",
        "QuerySubPipeline",
        "A query handler's top level: reads, compute, branch, for_each, guard; ends with return_.",
        read_only=True,
    ),
    BuilderRule(
        "QuerySubPipeline",
        False,
        "refused",
        "QuerySubPipeline",
        "Inside branch/for_each of a query handler: reads and compute only, no return_.",
        read_only=True,
    ),
)

#: The step kinds a query (a read-only builder) offers besides ``return``.
READ_ONLY_KINDS: Final = frozenset(
    {"compute", "read.find_one", "read.get_one", "read.find_many", "branch", "for_each", "guard"}
)

BUILDERS: Final[dict[str, BuilderRule]] = {b.name: b for b in BUILDER_RULES}

#: A retry body is a plain SubPipeline: suspending inside an attempt would split it
#: across transactions, so tier 3 is refused there.
RETRY_BODY_BUILDER: Final = "SubPipeline"

#: Columns of an aggregate the framework owns: ``update(changes=...)`` may not name them
#: (the plugin leaves them out of the columns it offers, the runtime refuses them).
FRAMEWORK_COLUMNS: Final = frozenset({"id", "tenant_id", "version", "created_at", "updated_at"})

#: Error codes shared by the plugin (as mypy error codes) and the boot validation.
CODE_STEP_NAME: Final = "kumiko-step-name"
CODE_DUPLICATE_STEP: Final = "kumiko-duplicate-step"
CODE_RETURN_IN_SUBPIPELINE: Final = "kumiko-return-in-subpipeline"
CODE_TIER: Final = "kumiko-tier"
CODE_WORKFLOW_ONLY: Final = "kumiko-workflow-only"
CODE_UNANALYZABLE: Final = "kumiko-unanalyzable"
CODE_NO_RETURN: Final = "kumiko-no-return"
CODE_TRIGGER_PAYLOAD: Final = "kumiko-trigger-payload"
CODE_FOREIGN_PIPELINE: Final = "kumiko-foreign-pipeline"
CODE_OPTIMISTIC_LOCK: Final = "kumiko-optimistic-lock"
CODE_ASYNC_RESOLVER: Final = "kumiko-async-resolver"
CODE_READ_ONLY: Final = "kumiko-read-only"
CODE_FILL: Final = "kumiko-fill"
CODE_RENAMED: Final = "kumiko-renamed"
CODE_WORKFLOW_PIPELINE: Final = "kumiko-workflow-pipeline"
CODE_UNKNOWN_KEY: Final = "kumiko-unknown-key"
CODE_DURATION: Final = "kumiko-duration"
CODE_STARTED_BY_TRIGGER: Final = "kumiko-started-by-trigger"

ERROR_CODES: Final[dict[str, str]] = {
    CODE_STEP_NAME: "A step name is not a string literal or a Final constant.",
    CODE_DUPLICATE_STEP: "Two steps of one pipeline share a name.",
    CODE_RETURN_IN_SUBPIPELINE: "return_ inside branch/for_each/retry.",
    CODE_TIER: "A tier-2 step the feature did not declare in requires=.",
    CODE_WORKFLOW_ONLY: "A tier-3 step outside a workflow pipeline.",
    CODE_UNANALYZABLE: "The plugin could not work out a builder's step keys.",
    CODE_NO_RETURN: "A write handler given a pipeline that does not end with return_.",
    CODE_TRIGGER_PAYLOAD: "A workflow whose trigger payload differs from its pipeline's.",
    CODE_FOREIGN_PIPELINE: "A pipeline built from one feature registered on another.",
    CODE_OPTIMISTIC_LOCK: "An update with neither version= nor skip_optimistic_lock=True.",
    CODE_ASYNC_RESOLVER: "An async function (or one returning an awaitable) given as a resolver.",
    CODE_READ_ONLY: "A step that writes (or sends, or suspends) in a query pipeline.",
    CODE_FILL: "A workflow's fill= names a key no step sets, or returns another type than the key's.",
    CODE_RENAMED: "A workflow's renamed= maps a name it still has, or to a name no step has.",
    CODE_WORKFLOW_PIPELINE: "A workflow given a write or query pipeline, not a workflow pipeline.",
    CODE_UNKNOWN_KEY: "c.steps.get(...), c.scope.get(...) or an `in` test of a key no step (or loop) produced.",
    CODE_DURATION: (
        "A wait's duration or a wait_for_event's timeout written as a text that is no ISO-8601 duration "
        "or as a negative timedelta, or a retry's times= that is no whole number of attempts."
    ),
    CODE_STARTED_BY_TRIGGER: "app.start_workflow given a workflow whose trigger is cron(...) or on_event(...).",
}


#: An ISO-8601 duration (``P1D``, ``PT30M``, ``P1DT2H``, ``P2W``).  Years and months are
#: refused: their length depends on the date, and a wait's length must not.
DURATION: Final = re.compile(
    r"^P(?:(?P<weeks>\d+(?:\.\d+)?)W)?(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def duration_problem(text: str) -> str | None:
    """Why ``text`` is no duration a wait may take, or ``None``: here so that the App's boot
    (through ``_durations.parse_duration``) and the plugin, which reads a literal text, say it
    alike."""
    upper = text.strip().upper()
    match = DURATION.match(upper)
    if match is None or upper in ("P", "PT") or upper.endswith("T"):
        return (
            f"{text!r} is not an ISO-8601 duration such as 'PT30M', 'P1D' or 'P1DT12H' (years and months are refused)"
        )
    try:
        timedelta(**{k: float(v) for k, v in match.groupdict().items() if v is not None})
    except OverflowError:  # else a bare "Python int too large to convert to C int" out of App(...)
        return f"{text!r} is longer than the longest duration, {timedelta.max.days} days"
    return None


def retry_times_problem(times: object) -> str | None:
    """Why ``times`` is no count of attempts a ``retry`` may make, or ``None``: here so that the
    App's boot and the plugin, which reads a literal (``times=0``, ``times=True``), say it alike."""
    if not isinstance(times, int) or isinstance(times, bool):
        return f"retry's times must be a whole number of attempts, not {type(times).__name__}"
    if times < 1:
        return f"retry(times={times}) must try at least once"
    return None


def msg_duration_number(method: str, argument: str, value: object) -> str:
    """A number given as a duration (``wait(5)``), in the plugin's words: mypy showed the
    whole type expected, with the callable's context type.  ``value`` is the number (or
    ``bool``) when it is written literally, else ``None``."""
    return f'{argument}= of step "{method}" {number_as_duration(value)}'


def number_as_duration(value: object) -> str:
    """What is wrong with a number given as a duration and what to write instead, after the
    argument's name (``duration= of step "wait"``, ``wait's duration``): the plugin's error
    and the boot's say it alike.  ``value`` is the number, or ``None`` when not known (the
    plugin: not a literal).  A ``bool`` is no number of seconds (mypy accepts it as an
    ``int``), and a negative number is no duration even as seconds."""
    if isinstance(value, bool):
        return f"is {value}, a bool, not a duration: {duration_number_fix(None)}"
    if isinstance(value, int | float) and not value >= 0:  # NaN too
        return (
            f"is {value!r}, a number, which the step does not read as seconds, and a duration is never "
            f"negative: {duration_number_fix(None)}, of zero or more"
        )
    known = repr(value) if isinstance(value, int | float) and value > 0 else None
    return f"is a number, which the step does not read as seconds: {duration_number_fix(known)}"


def duration_number_fix(value: str | None) -> str:
    """What to write for a number given as a duration (``value``, as written, positive;
    ``None``: not known), in the plugin's message and the boot's alike."""
    if value is None:
        return 'write timedelta(seconds=...) or an ISO-8601 text such as "PT30S"'
    return f'write timedelta(seconds={value}) or "PT{value}S"'


def negative_duration(value: timedelta) -> str | None:
    """Why ``value`` is no duration a wait (or a retry's delay) may take, after the argument's
    name, or ``None``: the boot says it of any ``timedelta``, the plugin of one written
    literally (``timedelta(seconds=-1)``)."""
    if value >= timedelta(0):
        return None
    return f"must not be negative, got {value.total_seconds():g} seconds"


def trigger_call(kind: str, payload: str, expression: str | None, timezone: str | None) -> str:
    """A trigger as it is written (``cron("0 9 * * *")``, ``on_event(SignedUp)``): how the
    App's refusal of a start by hand and the plugin's error name the trigger alike.  An
    expression the plugin cannot read is ``None`` (``cron(...)``); a timezone of ``UTC``
    or ``None`` is left out."""
    if kind != "cron":
        return f"{'on_event' if kind == 'event' else kind}({payload})"
    zone = "" if timezone in (None, "UTC") else f", timezone={timezone!r}"
    return "cron(...)" if expression is None else f'cron("{expression}"{zone})'


def msg_started_by_trigger(trigger: str) -> str:
    """``app.start_workflow`` given a workflow that a worker starts (by its ``trigger``, as
    :func:`trigger_call` writes it): a start by hand would add a second run for a tick, or
    one for an event never appended.  Said by the App's refusal and the plugin alike."""
    started = "a worker starts one run per tick" if trigger.startswith("cron(") else "a worker starts one run per event"
    return (
        f"is started by its trigger, {trigger}, not by start_workflow ({started}); "
        "a workflow you start yourself has trigger=manual(...)"
    )


def allows(builder: str, kind: str) -> bool:
    """Does ``builder`` offer step ``kind`` (ignoring tier-2 declarations)?"""
    rule = RULES_BY_KIND[kind]
    b = BUILDERS[builder]
    if rule.key == "end":
        return b.returns != "refused"
    if b.read_only:
        return kind in READ_ONLY_KINDS
    if rule.tier == 3:
        return b.workflow
    return True


# --- wording shared by mypy errors and BootError entries ---------------------------


def msg_step_name(method: str) -> str:
    """A loop's name is its item's, read from ``c.scope``; every other step's is its key."""
    read = 'c.scope["..."]' if method == "for_each" else 'c.steps["..."]'
    return (
        f'The name of step "{method}" must be a string literal, a Final constant or a StrEnum member: '
        f"the plugin types {read} from it"
    )


def msg_run_time_name(method: str) -> str:
    """A ``str`` name mypy cannot read (a loop variable, an f-string): what to write instead."""
    if method == "for_each":
        fix = 'an item needs no name chosen at run time: name it with a literal, .for_each("item", ...)'
    else:
        fix = (
            "for values named at run time (in a loop, by an f-string), compute one key holding them by name, "
            '.compute("totals", lambda c: {n: ... for n in names})'
        )
    return f"{msg_step_name(method)}; {fix}"


def msg_literal_choice(method: str, names: list[str]) -> str:
    """A name typed as a union of literals (``Literal["y", "z"]``): every one is a literal, but
    which one names the key only the run knows, so no key read after it could be checked."""
    if method == "for_each":
        what, fix = (
            "item",
            f'name the item with one literal, .for_each("{names[0]}", ...): the body reads it by that name',
        )
    else:
        what = "key"
        fix = (
            f"name the step with one literal; to add one key or the other, use a branch step, .branch(when=..., "
            f'on_true=lambda b: b.{method}("{names[0]}", ...), on_false=lambda b: b.{method}("{names[1]}", ...)), '
            "after which each key is T | None"
        )
    listed = ", ".join(f'"{name}"' for name in names)
    return (
        f'The name of step "{method}" may be any of {listed} (its type is a union of literals), so the {what} '
        f"it adds has no one name the plugin can type; {fix}"
    )


def msg_enum_typed_name(method: str, enum: str, member: str) -> str:
    """A name typed as an enum class rather than one member (a constant declared ``Final[Item]``,
    a parameter ``item: Item``): mypy keeps such a constant's type only, not the member it
    holds (nor does its cache), so no key can be read from it."""
    what = "item" if method == "for_each" else "key"
    return (
        f'The name of step "{method}" is typed as the enum {enum}, not as one of its members, so the {what} it '
        f"adds has no one name the plugin can type (a constant declared Final[{enum}] is typed so: mypy keeps "
        f"its type, not the member it holds); declare it without the type, NAME: Final = {enum}.{member}, or "
        f"pass the member itself, {enum}.{member}"
    )


def msg_plain_enum_name(method: str, enum: str, member: str, value: str | None) -> str:
    """A name that is a member of an enum that is no ``str`` (``class Item(enum.Enum)``): a
    key is a string, looked up by its value, and no such member is one (the run refuses it,
    and a ``StrEnum`` member is one)."""
    what = "item" if method == "for_each" else "key"
    literal = f'its value, "{value}"' if value is not None else "a string literal"
    return (
        f'The name of step "{method}" is {enum}.{member}, a member of an Enum that is not a str, and the {what} '
        f"it adds must be named by a string; make {enum} a StrEnum (class {enum}(enum.StrEnum)), or name the "
        f"step with {literal}"
    )


def msg_unknown_member_value(method: str) -> str:
    return (
        f'The name of step "{method}" is an enum member whose value mypy cannot know (an auto() '
        "of an enum with its own _generate_next_value_, or of a str mix-in Enum, which counts); "
        'give the member a string value (TOTAL = "total") or name the step with a string literal'
    )


def msg_empty_step_name(method: str) -> str:
    if method == "for_each":
        return f'The name of step "{method}" is empty; name the item it puts in c.scope, e.g. "line"'
    return f'The name of step "{method}" is empty; name the key it adds, e.g. "total"'


def msg_empty_given_name(method: str) -> str:
    """An empty ``name=`` of a wait, a branch or a retry: a stored run finds its step by it."""
    return f'name= of step "{method}" is empty; give it a name such as "cool-off", or leave name= out'


def msg_fill_key(key: str) -> str:
    return f'fill= fills "{key}", which no step of this workflow sets; fill a key one of its steps sets'


def msg_fill_type(key: str, wanted: str, given: str) -> str:
    return (
        f'fill= for "{key}" returns "{given}", but step "{key}" sets "{wanted}"; '
        f'return a "{wanted}" computed from the stored values'
    )


def msg_renamed_kept(old: str) -> str:
    return (
        f'renamed= maps "{old}", which is still a step of this workflow (a stored path is ambiguous); '
        "map only names the workflow no longer has"
    )


def msg_renamed_target(old: str, new: str) -> str:
    return (
        f'renamed= maps "{old}" to "{new}", which is no step of this workflow; '
        "map it to the name of the step that replaces it"
    )


def msg_duplicate_step(name: str) -> str:
    return f'Step name "{name}" is already used in this pipeline; give each step a unique name'


def msg_ambiguous_name(first: str, second: str, name: str, renamed: str) -> str:
    """Two sibling steps of a workflow named ``name``, one of them by its ``name=``;
    ``first``/``second`` say which (boot: ``1 (workflow.wait "cool")``), ``renamed`` is the
    kind of the step whose ``name=`` to change (the other may have no ``name=``: a key)."""
    return (
        f'steps {first} and {second} have the same name "{name}": a stored run\'s path would be ambiguous; '
        f'give the {renamed} another name=, e.g. "{name}-2"'
    )


def msg_return_in_subpipeline(builder: str) -> str:
    """Names the places ``builder`` is handed to (only a handler's SubPipeline is also a
    retry body), and the fix for the two reasons to write it there: the result, or
    stopping early."""
    where = "branch arm, for_each or retry body" if builder == RETRY_BODY_BUILDER else "branch arm or for_each body"
    return (
        f"return_ is not allowed inside a sub-pipeline ({builder}: a {where}); end the top-level "
        "pipeline with .return_(...) instead, reading what the arm or body set from c.steps; "
        "to stop early with a failure, use .guard(check, otherwise=lambda c: fail(...))"
    )


def msg_tier(kind: str, method: str, declared: frozenset[str] | set[str]) -> str:
    have = ", ".join(f'"{k}"' for k in sorted(declared)) or "nothing"
    return (
        f'Step "{method}" needs the tier-2 capability "{kind}", which this feature does not '
        f'declare (it declares {have}); add "{kind}" to Feature(..., requires=[...])'
    )


def msg_unknown_capability(kind: str) -> str:
    known = ", ".join(f'"{k}"' for k in sorted(TIER2_KINDS))
    return f'"{kind}" in requires= is not a tier-2 step kind; use one of {known}'


def msg_unknown_step(kind: str) -> str:
    return (
        f'"{kind}" is not a step kind of kumiko-typed; build pipelines only with the builders\' methods '
        "(the rule table lists every kind)"
    )


def msg_workflow_only(kind: str, method: str, builder: str) -> str:
    """The fix depends on where the step is; a retry body is a SubPipeline in a workflow
    too, so that builder's message names both places."""
    to_workflow = "build it with feature.workflow_pipeline(P) and register it with feature.workflow(...)"
    if builder != RETRY_BODY_BUILDER:
        return (
            f'Step "{method}" ({kind}) suspends a workflow run and is only allowed in a workflow '
            f"pipeline, not in a {builder}; {to_workflow}"
        )
    return (
        f'Step "{method}" ({kind}) suspends a workflow run, which a {builder} cannot: a write '
        "handler's branch arm or loop body, or a retry body (an attempt must not suspend half-way); "
        f"in a handler, {to_workflow}; in a retry body, move the step before or after the retry"
    )


def msg_read_only(kind: str, method: str, builder: str) -> str:
    """A tier-3 step (a suspension) belongs in a workflow only: a write handler refuses it too."""
    elsewhere = (
        "do it in a workflow built with feature.workflow_pipeline(P)"
        if RULES_BY_KIND[kind].tier == 3
        else "do it in a write handler built with feature.pipeline(P) (or a workflow)"
    )
    return (
        f'Step "{method}" ({kind}) does more than read, and a {builder} only reads (a query runs in a '
        f"read-only transaction); {elsewhere}, and keep the query to reads, compute, branch, for_each and guard"
    )


def msg_query_registration(got: str) -> str:
    """``got`` is the class given: a query pipeline not ended needs ``return_``, anything
    else the other builder."""
    if got == "QueryPipeline":
        return (
            "A query handler needs a pipeline built with feature.query_pipeline(P) and ended with .return_(...), "
            "got a QueryPipeline that is not ended; end it with .return_(lambda c: ok(...))"
        )
    return (
        f"A query handler needs a pipeline built with feature.query_pipeline(P) and ended with .return_(...), "
        f"got {got}; build it with feature.query_pipeline(P) (write handlers take feature.pipeline(P))"
    )


def msg_query_as_write(got: str) -> str:
    return (
        "A write handler needs a pipeline built with feature.pipeline(P), got a query pipeline "
        f"({got}); register it with feature.query_handler(...) and run it with app.query(...)"
    )


def msg_no_return(got: str) -> str:
    """``got`` is the class given: a workflow's or a query's pipeline needs another fix than
    a missing ``return_`` (ending a query pipeline would not make it a write handler's)."""
    if got.startswith("Query"):
        return msg_query_as_write(got)
    if got.startswith("Workflow"):
        return (
            f"A write handler needs a pipeline built with feature.pipeline(P), got a workflow pipeline "
            f"({got}); build it with feature.pipeline(P), or register it with "
            "feature.workflow(name, trigger=..., pipeline=...)"
        )
    return (
        f"A write handler needs a pipeline built with feature.pipeline(P) and ended with .return_(...), "
        f"got {got}; end it with .return_(lambda c: ok(...))"
    )


def msg_trigger_payload(trigger: str, pipeline: str) -> str:
    return (
        f"The trigger gives {trigger} but the workflow pipeline takes {pipeline}; "
        f"build it with feature.workflow_pipeline({trigger})"
    )


def msg_workflow_pipeline(got: str) -> str:
    """``got`` is the class given: a handler's pipeline (``Pipeline``, ``Finished``), a query's, or anything."""
    if got.startswith("Query"):
        given = f"a query pipeline ({got})"
    elif got in ("Pipeline", "Finished"):
        given = f"a write-handler pipeline ({got})"
    else:
        given = got
    return (
        f"A workflow needs a pipeline built with feature.workflow_pipeline(P), got {given}; "
        "build it with feature.workflow_pipeline(P), which offers the same steps and can wait"
    )


def msg_foreign_pipeline(built_by: str, registered_on: str, starter: str = "pipeline") -> str:
    """``starter`` is the feature's method the pipeline was started with (``workflow_pipeline``
    for a workflow's, ``query_pipeline`` for a query's): the fix names the same one."""
    return (
        f"This pipeline was built with {built_by}.{starter}(...) but is registered on {registered_on}; "
        f"build it with {registered_on}.{starter}(...) (its steps and capabilities are that feature's), "
        f"or register it on {built_by}"
    )


def msg_optimistic_lock(step: str) -> str:
    return (
        f'update "{step}" needs version= (the version the caller read, e.g. version=lambda c: c.payload.version) '
        "or skip_optimistic_lock=True to overwrite whatever version is stored"
    )


def msg_async_resolver(
    method: str, argument: str, awaitable: str | None = None, *, async_def: bool = True, maybe: bool = False
) -> str:
    """A resolver that returns (or, ``maybe``, may return) a coroutine, or another awaitable
    when ``awaitable`` is the type it returns (``Future[int]``, a class with ``__await__``).
    Only an ``async def`` (``async_def``; all that boot can find) is fixed by making it
    plain: a plain function returning a coroutine calls an async one, and a future or
    another awaitable stands for work that only an event loop would finish.  The run refuses
    each of them: steps run synchronously, and nothing awaits what a resolver returns."""
    returns = "may return" if maybe else "returns"
    if awaitable is not None:
        return (
            f'{argument}= of step "{method}" {returns} an awaitable ("{awaitable}"): resolvers run synchronously '
            "inside the transaction and nothing would await it; return the value itself: await it before "
            "dispatching and pass its result in the payload, or compute it synchronously"
        )
    if async_def:
        fix = "pass a plain (non-async) function"
    else:
        fix = (
            "call no async function in it: await it before dispatching and pass its result in the payload, "
            "or make the function it calls synchronous"
        )
    return (
        f'{argument}= of step "{method}" {returns} a coroutine: resolvers run synchronously inside the '
        f"transaction and the coroutine would never run; {fix}"
    )


def msg_several_columns(method: str, count: int, columns: str) -> str:
    return (
        f'query= of step "{method}" selects {count} columns ({columns}), and a read step keeps one value '
        "per row: select one entity or one column (select(Product), select(Product.sku)), or read such rows "
        "in a compute with c.db.execute(select(...)).all()"
    )


#: What a resolver whose result the step fixes must return, and an example, by step method and
#: argument (the mypy plugin's ``resolver_results`` checks the same arguments).
#: What an arm or a body (a function of the sub-pipeline ``b``) returns: the steps it adds are
#: those of the builder it returns.
_ARM_RESULT: Final = "the sub-pipeline b it is given, with its steps added"
_RESOLVER_RESULTS: Final[dict[tuple[str, str], tuple[str, str]]] = {
    ("return_", "fn"): (
        "ok(value), whose value becomes the handler's result, or a Failure (fail(...))",
        ".return_(lambda c: ok(...))",
    ),
    ("guard", "otherwise"): (
        "a Failure (fail(code, message)), which ends the whole pipeline when the condition is false",
        '.guard(..., otherwise=lambda c: fail("unprocessable", "..."))',
    ),
    ("guard", "when"): (
        "a bool, True to go on (False ends the pipeline with otherwise='s Failure); compare or test the value",
        ".guard(lambda c: len(c.payload.lines) > 0, otherwise=...)",
    ),
    ("branch", "when"): (
        "a bool, True to run on_true (False runs on_false, if given); compare or test the value",
        ".branch(when=lambda c: len(c.payload.lines) > 0, on_true=...)",
    ),
    **{
        (method, argument): (_ARM_RESULT, f"{argument}=lambda b: b.compute(...)")
        for method, argument in (("branch", "on_true"), ("branch", "on_false"), ("for_each", "do"), ("retry", "do"))
    },
}


def fixes_result(method: str, argument: str) -> bool:
    """Whether step ``method`` fixes what its callback ``argument`` returns to one kind of value
    (a ``bool``, a ``Failure``, ``ok(...)``, the sub-pipeline), said by :func:`msg_resolver_result`."""
    return (method, argument) in _RESOLVER_RESULTS


def _resolver(method: str, argument: str) -> str:
    """How a message names a resolver: ``return_``'s and ``compute``'s one function is "the
    resolver", any other by its argument (``when=``)."""
    return f'The resolver of step "{method}"' if argument == "fn" else f'{argument}= of step "{method}"'


def msg_resolver_result(method: str, argument: str, returned: str, *, function: bool = True) -> str:
    """A resolver whose result the step fixes (``return_``'s ``Ok``/``Failure``, ``guard``'s and
    ``branch``'s ``bool``, ``otherwise=``'s ``Failure``) returned something else, or was no
    function: mypy's own error showed the callable type expected, with the whole context
    type (and for ``return_`` an ``Ok[object]`` the user never wrote), and said it again in
    the lambda."""
    must, example = _RESOLVER_RESULTS[method, argument]
    if function:
        what = f'{_resolver(method, argument)} returns "{returned}"'
    elif argument == "fn":
        what = f'Step "{method}" takes a resolver, a function of c, not "{returned}"'
    else:
        one, _ = resolver_parameter(argument)
        what = f'{argument}= of step "{method}" takes a resolver, a function of {one}, not "{returned}"'
    return f"{what}; it must return {must}: {example}"


def msg_resolver_type(method: str, argument: str, returned: str, expected: str) -> str:
    """A resolver whose result type the step fixes otherwise (a mail's ``str``, ``html=``'s
    ``str | None``, an event's ``UUID``) returned another: mypy's own error showed the whole
    callable type expected, and said it again in the lambda."""
    return f'{_resolver(method, argument)} returns "{returned}"; it must return "{expected}"'


def msg_generator_result(method: str, argument: str, expected: str = "") -> str:
    """A lambda with ``yield`` given where the step fixes the result (``return_``'s ``Ok`` or
    ``Failure``, a ``bool`` for ``when=``, an arm's sub-pipeline, ``expected`` for any other:
    a mail's ``str``, a read's select): it is a generator function, so the step would get a
    generator object; mypy said only that a generator function's return type must be a
    ``Generator``, which no fix of the lambda's type makes right."""
    if (method, argument) in _RESOLVER_RESULTS:
        must, example = _RESOLVER_RESULTS[method, argument]
    else:
        one, _ = resolver_parameter(argument)
        must, example = f'"{expected}", the value itself', f"{argument}=lambda {one}: ..."
    return (
        f"{_resolver(method, argument)} is a lambda with yield, so the step would get a generator object, "
        f"not its result; it must return {must}: {example}"
    )


def resolver_parameter(argument: str) -> tuple[str, str]:
    """The one parameter a step calls callback ``argument`` with: its usual name, and what it is."""
    if argument in ("on_true", "on_false", "do"):
        return "b", "the sub-pipeline b to add steps to"
    if argument == "event_key":
        return "e", "the event e"
    return "c", "the context c (c.payload, c.steps)"


def msg_resolver_parameters(method: str, argument: str, count: int, *, keyword_only: bool = False) -> str:
    """A lambda or function of no or several parameters, where the step calls it with one: mypy
    said it cannot infer the lambda's type, and showed the callable type expected.  One whose
    parameters are all keyword-only (``lambda *, c: ...``) has some, none the step can pass."""
    name, what = resolver_parameter(argument)
    takes = "no parameter" if count == 0 else f"{count} parameters"
    if count == 0 and keyword_only:
        takes = "keyword-only parameters alone"
    return f"{_resolver(method, argument)} takes {takes}, but the step calls it with one, {what}: lambda {name}: ..."


def msg_resolver_keywords(method: str, argument: str, names: list[str]) -> str:
    """A lambda or function with a required keyword-only parameter (``lambda c, *, d: ...``): the
    step calls it with one positional argument, so the call would fail; mypy refused it showing
    the whole callable type expected."""
    name, what = resolver_parameter(argument)
    which = f"keyword-only parameters {', '.join(names)}"
    if len(names) == 1:
        which = f"the keyword-only parameter {names[0]}"
    return (
        f"{_resolver(method, argument)} takes {which}, which the step never passes: it calls it with one, "
        f"{what}: lambda {name}: ..."
    )


def msg_call_feature_handler(given: str) -> str:
    """``call_feature`` given a query handler, a workflow or a pipeline for ``handler=``."""
    return (
        f'handler= of step "call_feature" is "{given}"; it must be a write handler '
        "(feature.write_handler(...)), which runs in this transaction; the step's key holds its ok(...) data"
    )


def msg_wait_keys(key: str, event_key: str) -> str:
    """``key=`` and ``event_key=`` of a ``wait_for_event`` returning types no two values of
    which are equal: the run would wait for an event that never matches, until its timeout."""
    return (
        f'event_key= of step "wait_for_event" returns "{event_key}" and key= returns "{key}", '
        "which are never equal: the run waits for an event whose event_key(e) == key(c), so it would "
        "match none and time out; return the same type from both (a UUID and its text are not equal)"
    )


def msg_not_a_select(method: str, returned: str) -> str:
    return (
        f'query= of step "{method}" returns "{returned}", not a select: a read step runs the query its '
        "function returns, e.g. lambda c: select(Product).where(Product.id == c.payload.id); compute "
        "other values with .compute(...)"
    )


def msg_async_iterator_resolver(method: str, argument: str) -> str:
    return (
        f'{argument}= of step "{method}" returns an async iterator (an async generator): resolvers run '
        "synchronously inside the transaction and nothing could iterate it; pass a plain function "
        "returning a list"
    )


def msg_loop_item_after_loop(item: str, line: int, body_keys: list[str]) -> str:
    """What the plugin adds to mypy's unknown-key error for ``c.scope[item]`` read after the
    ``for_each`` whose item it is: mypy says only that no such key exists ("expected one of
    ()"), which reads as a typo."""
    if body_keys:
        results = ", ".join(f'c.steps["{key}"]' for key in body_keys)
        after = (
            f"after the loop read its results by the keys its body set, {results} (T | None: None if it ran no item)"
        )
    else:
        after = "its body sets no key to read after the loop: compute what you need from the item in the body"
    return (
        f'"{item}" is the item of the for_each on line {line}, which exists only inside the loop body: '
        f'read c.scope["{item}"] in do=, and {after}'
    )
