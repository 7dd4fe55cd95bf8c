"""What running pipelines needs from the App: registries built once at boot, the
tenant filter, and nested dispatch for ``call_feature``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import cattrs
from sqlalchemy import BindParameter, bindparam, event
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker, with_loader_criteria

from ._ctx import User
from ._entity import Entity
from ._errors import ProgramError
from ._interpreter import interpret, start_run
from ._results import Failure, Ok, fail
from ._tenancy import refuse_unscoped

if TYPE_CHECKING:
    from ._feature import Feature, WriteHandler
    from ._interpreter import Run

Projector = Callable[[Any, Any], None]

#: ``session.info`` key holding the tenant every ORM read is filtered to.
TENANT_KEY = "kumiko_tenant"


class UnregisteredError(ProgramError, LookupError):
    """An entity or event class used by a step that no feature of the App registered."""


def deny(handler: WriteHandler[Any, Any], user: object) -> Failure | None:
    """The role check: ``roles=None`` admits any authenticated user."""
    if not isinstance(user, User):
        return fail("access_denied", "an authenticated user is required")
    if handler.roles is not None and not (handler.roles & user.roles):
        return fail("access_denied", f"handler {handler.name} needs one of the roles {sorted(handler.roles)}")
    return None


#: The tenant of a filtered read travels as a parameter, not in the criteria: one
#: criteria object for every read then costs no per-call analysis of a closure.
_TENANT_PARAM: Final = "kumiko_filter_tenant"
_TENANT_VALUE: Final[BindParameter[Any]] = bindparam(_TENANT_PARAM)
_TENANT_CRITERIA: Final = with_loader_criteria(Entity, lambda cls: cls.tenant_id == _TENANT_VALUE, include_aliases=True)


def wrong_payload(handler: WriteHandler[Any, Any], payload: object) -> Failure | None:
    """A structured payload of another class than the handler's (possible without mypy)."""
    if isinstance(payload, handler.payload_type):
        return None
    expected = handler.payload_type.__name__
    return fail(
        "validation_error",
        f"handler {handler.name} takes a {expected}, not a {type(payload).__name__}",
        [{"path": "$", "message": f"expected {expected}"}],
    )


def _tenant_filter(state: ORMExecuteState) -> None:
    tenant = state.session.info.get(TENANT_KEY)
    if tenant is None or not state.is_select or state.execution_options.get("kumiko_all_tenants", False):
        return
    params = state.parameters
    if params is not None and not isinstance(params, Mapping):
        return  # an executemany select does not exist; nothing to filter
    refuse_unscoped(state.statement)
    state.statement = state.statement.options(_TENANT_CRITERIA)
    state.parameters = {**(params or {}), _TENANT_PARAM: tenant}


@contextmanager
def as_tenant(session: Session, tenant_id: uuid.UUID) -> Iterator[None]:
    """Filter the session's reads to ``tenant_id`` inside the block (a nested call or a
    workflow segment may run as another tenant than its surroundings)."""
    previous = session.info.get(TENANT_KEY)
    session.info[TENANT_KEY] = tenant_id
    try:
        yield
    finally:
        session.info[TENANT_KEY] = previous


def install_tenant_filter(factory: sessionmaker[Session]) -> None:
    """Every ORM select in a dispatch sees only the dispatching user's tenant."""
    event.listen(factory, "do_orm_execute", _tenant_filter)


class Runtime:
    def __init__(self, features: Sequence[Feature[Any]], converter: cattrs.Converter) -> None:
        self.converter = converter
        self.aggregate_types: dict[type[Any], str] = {}
        self.event_names: dict[type[Any], str] = {}
        self.projectors: dict[tuple[type[Any], type[Any]], list[Projector]] = {}
        for feature in features:
            self.aggregate_types.update(feature.entities)
            self.event_names.update(feature.events)
            for key, fns in feature.projectors.items():
                self.projectors.setdefault(key, []).extend(fns)

    @property
    def event_classes(self) -> Mapping[str, type[Any]]:
        return {name: cls for cls, name in self.event_names.items()}

    def aggregate_type(self, entity: type[Any]) -> str:
        try:
            return self.aggregate_types[entity]
        except KeyError:
            raise UnregisteredError(
                f"{entity.__name__} is not an entity of any feature of this App; register it with feature.entity(...)"
            ) from None

    def event_name(self, event_type: type[Any]) -> str:
        try:
            return self.event_names[event_type]
        except KeyError:
            raise UnregisteredError(
                f"{event_type.__name__} is not a registered event; register it with feature.event(...)"
            ) from None

    def projectors_for(self, entity: type[Any], event_type: type[Any]) -> list[Projector]:
        return self.projectors.get((entity, event_type), [])

    def call_nested(
        self, handler: WriteHandler[Any, Any], payload: object, user: User, parent: Run
    ) -> Ok[Any] | Failure:
        """Run ``handler`` inside the caller's transaction, in a savepoint."""
        refused = deny(handler, user) or wrong_payload(handler, payload)
        if refused is not None:
            return refused
        session = parent.session
        with as_tenant(session, user.tenant_id):
            savepoint = session.begin_nested()
            run = start_run(
                handler.pipeline,
                runtime=self,
                handler=handler.name,
                payload=payload,
                user=user,
                session=session,
                now=parent.ctx.now,
                correlation_id=parent.ctx.event.correlation_id,
            )
            result = interpret(handler.pipeline, run, handler=handler.name)
            if isinstance(result, Ok):
                savepoint.commit()
            else:
                savepoint.rollback()
            return result
