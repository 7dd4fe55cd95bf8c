"""kumiko-typed: event-sourced write-side pipelines that mypy checks.

Build a pipeline from a :class:`Feature`, end it with ``return_``, register it as a
write handler and dispatch it through an :class:`App`.  See the README.
"""

from ._app import App
from ._builders import Pipeline, SubPipeline, WorkflowPipeline, WorkflowSubPipeline
from ._ctx import Command, Ctx, User
from ._entity import Entity
from ._errors import BootError
from ._feature import Feature, Workflow, WriteHandler
from ._finished import Finished, WorkflowFinished
from ._mail import MaildirTransport, MailMessage, MailTransport, SmtpTransport
from ._outbox_types import Auth, OutboxItem, RetryPolicy, bearer, header_auth
from ._results import Failure, Ok, WriteResult, fail, ok
from ._runs import RunInfo
from ._saved import Saved
from ._triggers import CronTick, Trigger, cron, manual, on_event

__all__ = [
    "App",
    "Auth",
    "BootError",
    "Command",
    "CronTick",
    "Ctx",
    "Entity",
    "Failure",
    "Feature",
    "Finished",
    "MailMessage",
    "MailTransport",
    "MaildirTransport",
    "Ok",
    "OutboxItem",
    "Pipeline",
    "RetryPolicy",
    "RunInfo",
    "Saved",
    "SmtpTransport",
    "SubPipeline",
    "Trigger",
    "User",
    "Workflow",
    "WorkflowFinished",
    "WorkflowPipeline",
    "WorkflowSubPipeline",
    "WriteHandler",
    "WriteResult",
    "bearer",
    "cron",
    "fail",
    "header_auth",
    "manual",
    "ok",
    "on_event",
]

__version__ = "0.1.0"
