"""Full names of the library objects the plugin hooks into."""

from __future__ import annotations

from typing import Final

BUILDERS_MODULE: Final = "kumiko_typed._builders"
MARKERS_MODULE: Final = "kumiko_typed._markers"
FEATURE: Final = "kumiko_typed._feature.Feature"
WRITE_HANDLER: Final = "kumiko_typed._feature.WriteHandler"
#: A resolver's parameter; a workflow's is its subclass ``WorkflowCtx``: look it up with ``has_base``.
CTX: Final = "kumiko_typed._ctx.Ctx"
FINISHED: Final = "kumiko_typed._finished.Finished"
QUERY_FINISHED: Final = "kumiko_typed._finished.QueryFinished"
WORKFLOW_FINISHED: Final = "kumiko_typed._finished.WorkflowFinished"
#: The base of the three ended pipelines above.
PROGRAM: Final = "kumiko_typed._finished.Program"
TRIGGER: Final = "kumiko_typed._triggers.Trigger"
HANDLER_BUILDER: Final = f"{BUILDERS_MODULE}.Pipeline"
QUERY_BUILDER: Final = f"{BUILDERS_MODULE}.QueryPipeline"
WORKFLOW_BUILDER: Final = f"{BUILDERS_MODULE}.WorkflowPipeline"

NO_STEPS: Final = f"{MARKERS_MODULE}.NoSteps"
NO_SCOPE: Final = f"{MARKERS_MODULE}.NoScope"
ADD_STEP: Final = f"{MARKERS_MODULE}.AddStep"
BRANCH: Final = f"{MARKERS_MODULE}.Branch"
LOOP: Final = f"{MARKERS_MODULE}.Loop"
RETRY: Final = f"{MARKERS_MODULE}.Retry"
ADD_SCOPE: Final = f"{MARKERS_MODULE}.AddScope"
#: Markers a step's own hook replaces; one left in a builder's type means the hook never ran.
STEP_MARKERS: Final = frozenset({ADD_STEP, BRANCH, LOOP, RETRY})
SOME_STEPS: Final = f"{MARKERS_MODULE}.SomeSteps"


def method(builder: str, name: str) -> str:
    return f"{BUILDERS_MODULE}.{builder}.{name}"


#: Type-argument positions of a builder ``B[P, S, Sc, C]``.
STEPS_ARG: Final = 1
SCOPE_ARG: Final = 2
CAPS_ARG: Final = 3
BUILDER_CORE: Final = "kumiko_typed._builder.BuilderCore"
MAPPED: Final = "sqlalchemy.orm.base.Mapped"
OK: Final = "kumiko_typed._results.Ok"
FAILURE: Final = "kumiko_typed._results.Failure"
