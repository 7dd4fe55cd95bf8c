"""kumiko-typed: event-sourced write-side pipelines that mypy checks.

Build a pipeline from a :class:`Feature`, end it with ``return_``, register it as a
write handler and dispatch it through an :class:`App`.  See the README.
"""

from importlib import metadata as _metadata

from ._app import App
from ._builders import Pipeline, QueryPipeline, QuerySubPipeline, SubPipeline, WorkflowPipeline, WorkflowSubPipeline
from ._ctx import Command, Ctx, User
from ._entity import Entity
from ._errors import BootError, DeliveryError
from ._feature import Feature, QueryHandler, Workflow, WriteHandler
from ._finished import Finished, QueryFinished, WorkflowFinished
from ._mail import MaildirTransport, MailMessage, MailTransport, SmtpTransport
from ._mail_address import mail_address
from ._outbox_types import Auth, OutboxItem, RetryPolicy, bearer, header_auth, signed
from ._results import HTTP_STATUS, Failure, FailureCode, Ok, WriteResult, fail, ok
from ._run_check import Incompatible
from ._runs import RunInfo
from ._saved import Saved
from ._streams import AggregateCreated, AggregateUpdated, ProjectionReport, StoredEvent
from ._triggers import CronTick, Trigger, cron, manual, on_event

__all__ = [
    "HTTP_STATUS",
    "AggregateCreated",
    "AggregateUpdated",
    "App",
    "Auth",
    "BootError",
    "Command",
    "CronTick",
    "Ctx",
    "DeliveryError",
    "Entity",
    "Failure",
    "FailureCode",
    "Feature",
    "Finished",
    "Incompatible",
    "MailMessage",
    "MailTransport",
    "MaildirTransport",
    "Ok",
    "OutboxItem",
    "Pipeline",
    "ProjectionReport",
    "QueryFinished",
    "QueryHandler",
    "QueryPipeline",
    "QuerySubPipeline",
    "RetryPolicy",
    "RunInfo",
    "Saved",
    "SmtpTransport",
    "StoredEvent",
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
    "mail_address",
    "manual",
    "ok",
    "on_event",
    "signed",
]

try:
    __version__ = _metadata.version("kumiko-typed")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
