"""Boot validation: the plugin's rules, checked again when an App is built.

A user without mypy gets the same problems, worded the same way (the messages come
from ``_rules``), at start-up — all of them at once, in one ``BootError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import _rules
from ._finished import Finished
from ._steps import NamedStep, NotYetSupported, Step, walk

if TYPE_CHECKING:
    from ._feature import Feature

#: Step kinds this release can execute; the others are typed but refused at boot.
RUNNABLE_KINDS = frozenset({"compute", "branch", "for_each", "return"})


def _check_names(steps: Sequence[Step], visible: set[str], where: str, path: str, out: list[str]) -> set[str]:
    """Report duplicate step names; arms of one branch may set the same key."""
    defined: set[str] = set()
    for i, step in enumerate(steps):
        here = f"{path}{i}"
        if isinstance(step, NamedStep):
            if not isinstance(step.name, str) or not step.name:
                out.append(f"{where}, step {here} ({step.kind}): {_rules.msg_step_name(step.kind)}")
            elif step.name in visible:
                out.append(f"{where}, step {here} ({step.describe()}): {_rules.msg_duplicate_step(step.name)}")
            else:
                visible.add(step.name)
                defined.add(step.name)
        children = list(step.children())
        branch_keys: set[str] = set()
        for label, child in children:
            branch_keys |= _check_names(child, set(visible), where, f"{here}/{label}/", out)
        visible |= branch_keys
        defined |= branch_keys
    return defined


def check_pipeline(feature: Feature[Any], where: str, steps: tuple[Step, ...], builder: str) -> list[str]:
    out: list[str] = []
    for path, step, inside in walk(steps, builder):
        rule = _rules.RULES_BY_KIND[step.kind]
        prefix = f"{where}, step {path} ({step.describe()})"
        if not _rules.allows(inside, step.kind):
            if rule.key == "end":
                out.append(f"{prefix}: {_rules.msg_return_in_subpipeline(inside)}")
            else:
                out.append(f"{prefix}: {_rules.msg_workflow_only(step.kind, rule.method, inside)}")
        elif rule.tier == 2 and step.kind not in feature.requires:
            out.append(f"{prefix}: {_rules.msg_tier(step.kind, rule.method, set(feature.requires))}")
        if step.kind not in RUNNABLE_KINDS:
            out.append(f"{prefix}: {NotYetSupported.__doc__} ({step.kind!r})")
    _check_names(steps, set(), where, "", out)
    return out


def validate(features: Iterable[Feature[Any]]) -> list[str]:
    problems: list[str] = []
    seen_features: set[str] = set()
    seen_handlers: set[str] = set()
    for feature in features:
        if feature.name in seen_features:
            problems.append(f"feature {feature.name!r} is listed twice; feature names must be unique")
        seen_features.add(feature.name)
        for kind in sorted(feature.requires - _rules.TIER2_KINDS):
            problems.append(f"feature {feature.name!r}: {_rules.msg_unknown_capability(kind)}")
        problems.extend(feature.problems)
        for handler in feature.handlers:
            where = f"handler {handler.name}"
            if handler.name in seen_handlers:
                problems.append(f"{where}: the name is registered twice; handler names must be unique")
            seen_handlers.add(handler.name)
            if isinstance(handler.pipeline, Finished):
                problems.extend(check_pipeline(feature, where, handler.pipeline.steps, handler.pipeline.builder))
        for workflow in feature.workflows:
            where = f"workflow {workflow.name}"
            problems.append(f"{where}: workflows have no runtime in this release")
            steps = workflow.pipeline.steps
            problems.extend(check_pipeline(feature, where, steps, "WorkflowPipeline"))
    return problems
