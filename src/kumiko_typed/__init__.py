"""kumiko-typed: event-sourced write-side pipelines that mypy checks.

Build a pipeline from a :class:`Feature`, end it with ``return_``, register it as a
write handler and dispatch it through an :class:`App`.  See the README.

The public names are imported when first read (PEP 562): ``import kumiko_typed`` alone,
which the kit's pytest plugin does in every pytest run of an environment the library is
installed in, imports neither the library's modules nor SQLAlchemy.
"""

import typing as _typing
from importlib import metadata as _metadata

from ._lazy_exports import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:  # what mypy and pyright read; at run time _WHERE below says the same
    from ._app import App as App
    from ._builders import Pipeline as Pipeline
    from ._builders import QueryPipeline as QueryPipeline
    from ._builders import QuerySubPipeline as QuerySubPipeline
    from ._builders import SubPipeline as SubPipeline
    from ._builders import WorkflowPipeline as WorkflowPipeline
    from ._builders import WorkflowSubPipeline as WorkflowSubPipeline
    from ._ctx import Command as Command
    from ._ctx import Ctx as Ctx
    from ._ctx import User as User
    from ._entity import Entity as Entity
    from ._errors import BootError as BootError
    from ._errors import DeliveryError as DeliveryError
    from ._feature import Feature as Feature
    from ._feature import QueryHandler as QueryHandler
    from ._feature import Workflow as Workflow
    from ._feature import WriteHandler as WriteHandler
    from ._finished import Finished as Finished
    from ._finished import QueryFinished as QueryFinished
    from ._finished import WorkflowFinished as WorkflowFinished
    from ._mail import MaildirTransport as MaildirTransport
    from ._mail import MailMessage as MailMessage
    from ._mail import MailTransport as MailTransport
    from ._mail import SmtpTransport as SmtpTransport
    from ._mail_address import mail_address as mail_address
    from ._outbox_types import Auth as Auth
    from ._outbox_types import OutboxItem as OutboxItem
    from ._outbox_types import RetryPolicy as RetryPolicy
    from ._outbox_types import bearer as bearer
    from ._outbox_types import header_auth as header_auth
    from ._outbox_types import signed as signed
    from ._results import HTTP_STATUS as HTTP_STATUS
    from ._results import Failure as Failure
    from ._results import FailureCode as FailureCode
    from ._results import Ok as Ok
    from ._results import WriteResult as WriteResult
    from ._results import fail as fail
    from ._results import ok as ok
    from ._run_check import Incompatible as Incompatible
    from ._runs import RunInfo as RunInfo
    from ._saved import Saved as Saved
    from ._streams import AggregateCreated as AggregateCreated
    from ._streams import AggregateUpdated as AggregateUpdated
    from ._streams import ProjectionReport as ProjectionReport
    from ._streams import StoredEvent as StoredEvent
    from ._triggers import CronTick as CronTick
    from ._triggers import Trigger as Trigger
    from ._triggers import cron as cron
    from ._triggers import manual as manual
    from ._triggers import on_event as on_event

#: THE table of public names: each is imported from its module when first read.  The
#: checkers' imports above and ``__all__`` (a literal list: mypy reads no other for
#: ``import *``) must name the same; tests/tooling/test_public_api.py holds them to it.
_WHERE = {
    "App": "._app",
    "Pipeline": "._builders",
    "QueryPipeline": "._builders",
    "QuerySubPipeline": "._builders",
    "SubPipeline": "._builders",
    "WorkflowPipeline": "._builders",
    "WorkflowSubPipeline": "._builders",
    "Command": "._ctx",
    "Ctx": "._ctx",
    "User": "._ctx",
    "Entity": "._entity",
    "BootError": "._errors",
    "DeliveryError": "._errors",
    "Feature": "._feature",
    "QueryHandler": "._feature",
    "Workflow": "._feature",
    "WriteHandler": "._feature",
    "Finished": "._finished",
    "QueryFinished": "._finished",
    "WorkflowFinished": "._finished",
    "MaildirTransport": "._mail",
    "MailMessage": "._mail",
    "MailTransport": "._mail",
    "SmtpTransport": "._mail",
    "mail_address": "._mail_address",
    "Auth": "._outbox_types",
    "OutboxItem": "._outbox_types",
    "RetryPolicy": "._outbox_types",
    "bearer": "._outbox_types",
    "header_auth": "._outbox_types",
    "signed": "._outbox_types",
    "HTTP_STATUS": "._results",
    "Failure": "._results",
    "FailureCode": "._results",
    "Ok": "._results",
    "WriteResult": "._results",
    "fail": "._results",
    "ok": "._results",
    "Incompatible": "._run_check",
    "RunInfo": "._runs",
    "Saved": "._saved",
    "AggregateCreated": "._streams",
    "AggregateUpdated": "._streams",
    "ProjectionReport": "._streams",
    "StoredEvent": "._streams",
    "CronTick": "._triggers",
    "Trigger": "._triggers",
    "cron": "._triggers",
    "manual": "._triggers",
    "on_event": "._triggers",
}

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

if not _typing.TYPE_CHECKING:  # a __getattr__ the checkers saw would make any name valid to them
    __getattr__, __dir__ = _lazy_exports(__name__, globals(), _WHERE)

try:
    __version__ = _metadata.version("kumiko-typed")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
