"""The plugin class: hooks looked up by full name in dicts built from the rule table.

Nothing here holds state between calls (mypy's parallel workers and the daemon each
load the plugin); every fact the hooks produce lives in the types they return.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import final

from mypy.plugin import FunctionContext, MethodContext, MethodSigContext, Plugin, ReportConfigContext
from mypy.types import CallableType, Type

from ._features import (
    across,
    arm_narrowing,
    bodies,
    branches,
    called_handlers,
    capabilities,
    durations,
    enum_keys,
    given_names,
    key_gets,
    key_typos,
    loop_items,
    loops,
    one_sided,
    open_steps,
    payloads,
    placement,
    read_rows,
    readonly_steps,
    registration,
    resolver_results,
    resolvers,
    results,
    retry_times,
    sibling_names,
    start,
    started,
    step_keys,
    updates,
    wait_keys,
)
from ._lambda_errors import keeping_lambda_errors
from ._names import FEATURE, SOME_STEPS, method
from ._rules import rules
from ._subclasses import feature_method, inherits_init

MethodHook = Callable[[MethodContext], Type]

#: Steps whose query selects one value per row (read_rows).
_READS = frozenset({"read.find_one", "read.get_one", "read.find_many"})


def _chain(hooks: list[MethodHook]) -> MethodHook:
    if len(hooks) == 1:
        return hooks[0]

    def run(ctx: MethodContext) -> Type:
        for hook in hooks:
            ctx = ctx._replace(default_return_type=hook(ctx))
        return ctx.default_return_type

    return run


def _method_hooks() -> dict[str, MethodHook]:
    table: dict[str, MethodHook] = {
        f"{FEATURE}.write_handler": registration.check_handler_pipeline,
        f"{FEATURE}.workflow": _chain(
            [registration.check_workflow_pipeline, across.check_fill, across.check_renamed, started.carry_trigger]
        ),
        "kumiko_typed._app.App.start_workflow": started.check_start,
        f"{FEATURE}.pipeline": _chain([start.empty_keys, registration.carry_brand]),
        f"{FEATURE}.workflow_pipeline": _chain([start.empty_keys, registration.carry_brand]),
        f"{FEATURE}.query_pipeline": _chain([start.empty_keys, registration.carry_brand]),
        f"{FEATURE}.query_handler": registration.check_query_pipeline,
        f"{SOME_STEPS}.__getitem__": open_steps.read_key,
    }
    for builder in rules.BUILDER_RULES:
        for rule in rules.STEP_RULES:
            hooks: list[MethodHook] = []
            if not rules.allows(builder.name, rule.kind):
                if rule.key == "end":
                    # Moved to the top level, its resolver must still take c and return ok(...) or a Failure.
                    refuse = _chain(
                        [
                            partial(resolvers.explain_parameters, rule.kind),
                            partial(resolver_results.explain, rule.kind),
                            partial(placement.refuse_return, builder.name),
                        ]
                    )
                elif builder.read_only:
                    refuse = partial(placement.refuse_read_only, builder.name, rule.kind)
                else:
                    refuse = partial(placement.refuse_workflow_only, builder.name, rule.kind)
                table[method(builder.name, rule.method)] = refuse
                continue
            hooks += [partial(resolvers.refuse_async, rule.kind), partial(resolvers.explain_parameters, rule.kind)]
            hooks.append(partial(resolver_results.explain_typed, rule.kind))
            if rule.kind in resolver_results.KINDS:
                hooks.append(partial(resolver_results.explain, rule.kind))
            if rule.tier == 2:
                hooks.append(partial(capabilities.check_tier, rule.kind))
            if rule.kind in _READS:
                hooks.append(partial(read_rows.hint, rule.method))
            if rule.kind == "aggregate.update":
                hooks += [updates.check_lock, updates.name_columns]
            if rule.kind == "call_feature":
                hooks.append(called_handlers.explain)
            if rule.kind == "workflow.wait_for_event":
                hooks.append(wait_keys.check)
            if rule.kind == "workflow.retry":
                hooks.append(retry_times.check)
            if rule.method in durations.ARGUMENTS:
                hooks.append(partial(durations.check, rule.method))
            if rule.method in given_names.METHODS:
                hooks.append(partial(given_names.refuse_empty, rule.method))
            if builder.workflow:
                hooks.append(sibling_names.check)
            if rule.key == "name":
                hooks.append(partial(step_keys.add_step, rule.method))
            elif rule.key == "arms":
                hooks.append(branches.merge_arms)
            elif rule.key == "body":
                hooks.append(loops.loop_keys)
            elif rule.key == "retry":
                hooks.append(loops.retry_keys)
            else:
                hooks.append(partial(step_keys.check_receiver, rule.method))
            if rule.key == "end":
                hooks.append(results.typed_result)
            if builder.returns != "refused":  # a pipeline that may be registered
                hooks.append(registration.carry_brand)
            table[method(builder.name, rule.method)] = _chain(hooks)
    return table


def _amending(hook: MethodHook) -> MethodHook:
    """``hook``, then the fixes it adds to mypy's errors in its call: the closest keys of an
    unknown key (key_typos), why a key one side of a conditional sets is none (one_sided),
    a loop item read after its loop (loop_items), ReadOnly for a resolver's own TypedDict
    (readonly_steps); and the unknown keys its lambdas test with ``in``, of which mypy
    says nothing (key_gets)."""

    def run(ctx: MethodContext) -> Type:
        result = hook(ctx)
        key_typos.suggest(ctx)
        one_sided.explain(ctx)
        loop_items.explain(ctx)
        readonly_steps.hint(ctx)
        key_gets.check_tests(ctx)
        return result

    return run


# Each hook also amends mypy's errors in its call (_amending) and keeps its call's lambda
# errors under dmypy (see _lambda_errors).
METHOD_HOOKS: dict[str, MethodHook] = {
    **{name: keeping_lambda_errors(_amending(h)) for name, h in _method_hooks().items()},
    # Every ``Mapping.get`` of the program: mypy's own typing, plus an error for an unknown
    # key of a pipeline's steps or scope (the step around it suggests the closest).
    "typing.Mapping.get": key_gets.checked_get,
}

SignatureHook = Callable[[MethodSigContext], CallableType]

_SIGNATURE_HOOKS: dict[str, SignatureHook] = {
    **{method(b.name, "for_each"): loops.scope_signature for b in rules.BUILDER_RULES},
    **{method(b.name, "update"): updates.changes_signature for b in rules.BUILDER_RULES},
    **{
        method(b.name, "branch"): lambda ctx: bodies.detach_arms(
            ctx._replace(default_signature=arm_narrowing.narrow_arms(ctx))
        )
        for b in rules.BUILDER_RULES
    },
    **{method(b.name, "retry"): bodies.detach_body for b in rules.BUILDER_RULES},
    **{method(b.name, "guard"): arm_narrowing.narrow_after_guard for b in rules.BUILDER_RULES},
    **{method(b.name, "compute"): bodies.detach_result for b in rules.BUILDER_RULES},
    **{method(b.name, "return_"): results.detach_data for b in rules.BUILDER_RULES},
    f"{FEATURE}.write_handler": registration.accept_unfinished,
    f"{FEATURE}.workflow": lambda ctx: across.stored_values(
        ctx._replace(default_signature=registration.accept_other_pipelines(ctx))
    ),
    f"{FEATURE}.query_handler": registration.accept_unfinished,
    **dict.fromkeys(payloads.APP_METHODS, payloads.payload_of_handler),
}


def _by_value_first(hook: SignatureHook | None) -> SignatureHook:
    """``enum_keys.by_value`` on the call's lambdas before they are checked, then ``hook``."""

    def run(ctx: MethodSigContext) -> CallableType:
        ctx = ctx._replace(default_signature=enum_keys.by_value(ctx))
        return hook(ctx) if hook is not None else ctx.default_signature

    return run


# Every step reads its lambdas' keys by an enum member's value (enum_keys).
SIGNATURE_HOOKS: dict[str, SignatureHook] = {
    **_SIGNATURE_HOOKS,
    **{
        method(b.name, r.method): _by_value_first(_SIGNATURE_HOOKS.get(method(b.name, r.method)))
        for b in rules.BUILDER_RULES
        for r in rules.STEP_RULES
    },
}


def _feature_type(ctx: FunctionContext) -> Type:
    """``Feature(...)``: its capabilities, then its name (which registration reads)."""
    return registration.brand(ctx._replace(default_return_type=capabilities.feature_capabilities(ctx)))


FUNCTION_HOOKS: dict[str, Callable[[FunctionContext], Type]] = {
    FEATURE: _feature_type,
    **started.TRIGGER_FUNCTIONS,
}


def _subclass_type(ctx: FunctionContext) -> Type:
    """A subclass of ``Feature`` constructed by ``Feature.__init__`` (_subclasses)."""
    return registration.brand(ctx._replace(default_return_type=capabilities.subclass_capabilities(ctx)))


#: The names of ``Feature``'s methods that have hooks, which its subclasses inherit.
_FEATURE_METHODS = frozenset(
    name.rpartition(".")[2] for name in (*METHOD_HOOKS, *SIGNATURE_HOOKS) if name.startswith(f"{FEATURE}.")
)


def _fingerprint() -> str:
    """A hash of the plugin's code and the rule table.

    mypy fingerprints only a plugin's entry module; without this, a cache written
    by an older plugin or rule table would be trusted after an upgrade.
    """
    digest = hashlib.sha256()
    files = sorted(Path(__file__).parent.rglob("*.py"))
    if rules.__file__:
        files.append(Path(rules.__file__))
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()


FINGERPRINT = _fingerprint()


@final
class KumikoPlugin(Plugin):
    def report_config_data(self, ctx: ReportConfigContext) -> str:
        return FINGERPRINT

    def get_method_hook(self, fullname: str) -> MethodHook | None:
        hook = METHOD_HOOKS.get(fullname)
        if hook is None and (inherited := feature_method(self, fullname, _FEATURE_METHODS)):
            return METHOD_HOOKS.get(inherited)
        return hook

    def get_method_signature_hook(self, fullname: str) -> SignatureHook | None:
        hook = SIGNATURE_HOOKS.get(fullname)
        if hook is None and (inherited := feature_method(self, fullname, _FEATURE_METHODS)):
            return SIGNATURE_HOOKS.get(inherited)
        return hook

    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        hook = FUNCTION_HOOKS.get(fullname)
        if hook is None and inherits_init(self, fullname):
            return _subclass_type
        return hook
