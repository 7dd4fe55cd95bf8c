"""The steps a builder accumulates, one module per family: each step's node and its
runtime together (``execute``, and ``resume`` for steps a workflow run can be
suspended in).  The generated builders refer to the classes through this package.
"""

from ._base import (
    OWN_FIX,
    Fn,
    Located,
    NamedStep,
    Path,
    Result,
    Resume,
    Step,
    StepCrash,
    Suspend,
    address,
    called,
    locate,
    name_part,
    part_label,
    resolve,
    step_at,
    sub_keys,
    unnamed_fix,
    unnamed_siblings,
    walk,
)
from ._block import EMPTY, Block
from .aggregates import AppendEvent, Create, Update
from .call import CallFeature
from .compute import Compute, Return
from .control import Branch, ForEach, Guard
from .outbox import SendMail, SendWebhook
from .projections import ProjectionDelete, ProjectionUpsert
from .reads import FindMany, FindOne, GetOne
from .workflow import EventWait, Retry, Wait, WaitForEvent, event_key

__all__ = [
    "EMPTY",
    "OWN_FIX",
    "AppendEvent",
    "Block",
    "Branch",
    "CallFeature",
    "Compute",
    "Create",
    "EventWait",
    "FindMany",
    "FindOne",
    "Fn",
    "ForEach",
    "GetOne",
    "Guard",
    "Located",
    "NamedStep",
    "Path",
    "ProjectionDelete",
    "ProjectionUpsert",
    "Result",
    "Resume",
    "Retry",
    "Return",
    "SendMail",
    "SendWebhook",
    "Step",
    "StepCrash",
    "Suspend",
    "Update",
    "Wait",
    "WaitForEvent",
    "address",
    "called",
    "event_key",
    "locate",
    "name_part",
    "part_label",
    "resolve",
    "step_at",
    "sub_keys",
    "unnamed_fix",
    "unnamed_siblings",
    "walk",
]
