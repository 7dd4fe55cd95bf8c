"""An App's handlers served over HTTP by Starlette (install the ``asgi`` extra); docs/http.md.

``POST /{feature}/{name}`` runs the write handler ``{feature}:{name}`` through
``App.dispatch_json`` — or the query handler of that name through ``App.query_json`` —
with the JSON body as its payload; ``GET /{feature}/{name}/schema`` answers the payload
class's JSON Schema.  Queries are POSTed too: their payloads are typed JSON (lists,
nested objects, numbers that are not strings), which a query string cannot carry without
coercion the library refuses; they take no ``Idempotency-Key`` (a query changes nothing).
An ``Ok`` is ``200 {"data": ...}``; a ``Failure`` is its ``http_status`` with its public
fields ``{"code", "message", "details"}`` — the adapter's own refusals (no user, a bad header or body, no such path)
have the same shape, and an exception becomes ``internal_error`` with an error id whose
traceback goes to the ``kumiko_typed.asgi`` logger only.

Who calls is the application's business: ``user`` is a function of the request (plain or
``async``) that returns the :class:`~kumiko_typed.User`, or ``None`` for a request that
carries none (``401 unauthenticated``; the handler does not run).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import inspect
import json
import logging
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

import attrs

from .. import App, Entity, Failure, Ok, User, fail
from .._idempotency import key_problem
from .._jsonable import Unjsonable, jsonable
from .._structuring import make_converter
from .schema import payload_schema

try:
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import Response
    from starlette.routing import Route
    from starlette.types import Receive, Scope, Send
except ModuleNotFoundError as exc:  # an extra: say which, not just "No module named 'starlette'"
    if (exc.name or "").partition(".")[0] != "starlette":
        raise
    raise ModuleNotFoundError(
        "kumiko_typed.contrib.asgi serves handlers through Starlette, which is not installed: "
        'pip install "kumiko-typed[asgi]"',
        name=exc.name,
    ) from exc

__all__ = ["Endpoint", "UserDependency", "asgi_app", "endpoints"]

logger = logging.getLogger("kumiko_typed.asgi")

#: The application's answer to "who sends this request?": a User, or None for nobody.
UserDependency = Callable[[Request], "User | Awaitable[User | None] | None"]
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
_JSON: Final = "application/json"


@attrs.frozen
class Endpoint:
    """One served handler: ``POST {path}`` runs it, ``GET {path}/schema`` describes its payload."""

    path: str
    handler: str  #: the full name, as ``dispatch_json`` (or ``query_json``) takes it
    kind: Literal["write", "query"]
    payload_type: type[Any]
    #: ``call(data, user, idempotency_key)``: runs the handler on untrusted JSON data.
    call: Callable[[object, User, str | None], Ok[object] | Failure] = attrs.field(eq=False, repr=False)

    @property
    def schema_path(self) -> str:
        return f"{self.path}/schema"


def endpoints(app: App) -> list[Endpoint]:
    """Everything the adapter serves, one :class:`Endpoint` per write handler and per
    query handler (the two share one namespace of names, so one path each).

    Raises ``ValueError`` for a feature or handler name that cannot be one path segment
    (empty, or containing ``/``)."""
    out: list[Endpoint] = []
    kinds: list[tuple[Literal["write", "query"], Any]] = [
        *(("write", h) for h in app.handlers.values()),
        *(("query", q) for q in app.queries.values()),
    ]
    for kind, handler in kinds:
        segments = (handler.feature.name, handler.local_name)
        if not all(segments) or any("/" in s for s in segments):
            raise ValueError(
                f"handler {handler.name!r} cannot be served as POST /{{feature}}/{{name}}: "
                "a feature or handler name that is empty or contains '/' is not one path segment"
            )
        run = _dispatch_write if kind == "write" else _run_query
        call = functools.partial(run, app, handler.name)
        out.append(Endpoint(f"/{segments[0]}/{segments[1]}", handler.name, kind, handler.payload_type, call))
    return out


def _dispatch_write(app: App, name: str, data: object, user: User, key: str | None) -> Ok[object] | Failure:
    return app.dispatch_json(name, data, user=user, idempotency_key=key)


def _run_query(app: App, name: str, data: object, user: User, key: str | None) -> Ok[object] | Failure:
    if key is not None:
        message = f"a query takes no {IDEMPOTENCY_HEADER} header: it changes nothing, so repeat it freely"
        return _refused(IDEMPOTENCY_HEADER, message)
    return app.query_json(name, data, user=user)


def asgi_app(
    app: App, *, user: UserDependency, www_authenticate: str = "Bearer", max_body: int = 1024 * 1024
) -> Starlette:
    """A Starlette application serving :func:`endpoints` of ``app``; mount it where you like.

    ``user(request)`` runs for every handler request: a plain function in a worker thread
    (it may block), an ``async`` one on the event loop.  Handlers run in worker threads.
    ``www_authenticate`` is the challenge a ``401`` names (HTTP requires one).  A body of
    more than ``max_body`` bytes (1 MiB by default) is refused with ``413``: a payload is
    held in memory whole, three times (bytes, text and parsed).  The refused rest is read
    and dropped (up to 4 MiB more, never kept) so the client reads its ``413``: a server
    that closes on unread bytes sends a reset that can destroy the answer before the client
    reads it.  A body declared longer than that, or passing it while read, is answered then
    (``Connection: close``) and up to 4 MiB more read and dropped before the close; one held
    back after ``Expect: 100-continue`` is answered at once and its connection closed.
    Every other answer given before the body (no user, a bad header, no such path or
    method) reads and drops it first too, to the same length, and leaves a longer one to the
    server."""
    # Typed, but a caller without a checker passing the features, or a user that is no
    # function, met an AttributeError here or a 500 at every request.
    if not isinstance(app, App):
        raise TypeError(f"asgi_app takes the App (App([features], database_url=...)), not {type(app).__name__}")
    if not callable(user):
        raise TypeError(f"user must be a function of the request returning its User or None, not {type(user).__name__}")
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
        raise ValueError(f"max_body must be a positive number of bytes, not {max_body!r}")
    served = {e.path: e for e in endpoints(app)}
    schemas = {e.schema_path: _dumps(payload_schema(e.payload_type)) for e in served.values()}
    # An ASGI app as the route's endpoint answers every method: the adapter says 405 itself.
    adapter = _Adapter(served, schemas, user, www_authenticate, max_body)
    # A request target that is not a path ("OPTIONS *", a proxy's "http://host/...")
    # matches no route: its 404 is JSON too, not Starlette's plain text.
    return Starlette(routes=[Route("/{path:path}", adapter)], exception_handlers={404: adapter.unrouted})


class _Adapter:
    def __init__(
        self,
        served: dict[str, Endpoint],
        schemas: dict[str, bytes],
        user: UserDependency,
        challenge: str,
        max_body: int,
    ) -> None:
        self.served = served
        self.schemas = schemas
        self.user = user
        self.challenge = {"WWW-Authenticate": challenge}
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.respond(Request(scope, receive))
        if response is not None:
            await response(scope, receive, send)

    async def respond(self, request: Request) -> Response | None:
        """The answer; ``None`` when the client went away before its body ended (nothing
        ran, and nobody is left to answer)."""
        checked = await self.check(request)
        if isinstance(checked, Response):
            return await _before_body(request, self.max_body, checked)
        return await self.run(request, *checked)

    async def unrouted(self, request: Request, exc: Exception) -> Response:
        """The 404 of a request target that is no path, its body read first as every answer
        before the body is (sent to nobody if the client went away)."""
        return await _before_body(request, self.max_body, _failure(_NOT_SERVED)) or _failure(_NOT_SERVED)

    async def check(self, request: Request) -> Response | tuple[Endpoint, User, str | None]:
        """What a request is answered before its body is read (no such path, another method,
        a schema, no user, a bad header), or the handler it runs, its user and its key."""
        path = "/" + str(request.path_params["path"])
        if b"%2f" in (request.scope.get("raw_path") or b"").lower():
            # The server decodes %2F into the path's "/": "/shop%2Fplace" would run
            # shop:place, past a proxy rule on "/shop/" that reads the path as sent.  No
            # served name holds a "/" (endpoints refuses one), so no served path has one.
            return _failure(_NOT_SERVED)
        endpoint = self.served.get(path)
        if endpoint is not None:
            return await self.admit(endpoint, request) if request.method == "POST" else _not_allowed("POST")
        schema = self.schemas.get(path)
        if schema is not None:
            # HTTP has every GET resource answer HEAD too (the server sends no body).
            if request.method not in ("GET", "HEAD"):
                return _not_allowed("GET, HEAD")
            return Response(schema, media_type="application/schema+json")
        return _failure(_NOT_SERVED)

    async def admit(self, endpoint: Endpoint, request: Request) -> Response | tuple[Endpoint, User, str | None]:
        """A handler's request that its user and headers let through, or the refusal."""
        try:
            # As an untyped caller's function may return it: checked below, not trusted.
            found: object = await run_in_threadpool(self.user, request)
            if inspect.isawaitable(found):
                found = await found
        except Exception as exc:
            return _crash("the user dependency", exc)
        except asyncio.CancelledError as exc:
            if _cancelling():
                raise
            return _crash("the user dependency", exc)
        if found is None:
            failure = fail("unauthenticated", "the request carries no user; sign in and send it again")
            return _failure(failure, self.challenge)
        if not isinstance(found, User):
            # The application's bug, not the client's: the App refused it as 403
            # access_denied, so a function that said False for an unknown token sent its
            # client away as forbidden, with no challenge to sign in again.
            return _internal(f"the user dependency returned a {type(found).__name__}, not a User or None")
        key = _idempotency_key(request)
        if isinstance(key, Failure):
            return _failure(key)
        refused = _content_type_problem(request)
        if refused is not None:
            return _failure(_refused("Content-Type", refused))
        if _encoded(request):
            message = "the body is read as JSON as sent: send it without a Content-Encoding (not compressed)"
            return _failure(_refused("Content-Encoding", message))
        return endpoint, found, key

    async def run(self, request: Request, endpoint: Endpoint, user: User, key: str | None) -> Response | None:
        """The answer to an admitted handler's request, its body read and the handler run;
        ``None`` when the client went away before its body ended."""
        body = await _body(request, self.max_body, endpoint.handler)
        if body is None:
            return None
        if isinstance(body, _Refused):
            return _too_large(self.max_body, body, request)
        data = _json_body(body)
        if isinstance(data, Failure):
            return _failure(data)
        try:
            result = await run_in_threadpool(endpoint.call, data, user, key)
        except Exception as exc:  # dispatch_json catches the handler's; this is the unforeseen
            return _crash(f"handler {endpoint.handler}", exc)
        if isinstance(result, Failure):
            # A handler's own 401 (a token its steps found expired) names the challenge too: HTTP requires one.
            challenge = self.challenge if result.http_status == 401 else None
            where = f"sending the {result.code} failure of handler {endpoint.handler}"
            return _failure(result, challenge, where=where)
        try:
            return Response(_dumps({"data": _wire(result.data)}), media_type=_JSON)
        except Exception as exc:  # no JSON form (TypeError, ValueError), or one holding itself
            committed = "" if endpoint.kind == "query" else " (its writes are committed)"
            return _crash(f"sending the result of handler {endpoint.handler}{committed}", exc)


_NOT_SERVED: Final = fail("not_found", "no handler is served at this path; handlers are POST /{feature}/{name}")


def _refused(where: str, message: str) -> Failure:
    return fail("validation_error", message, [{"path": where, "message": message}])


def _idempotency_key(request: Request) -> str | Failure | None:
    """The ``Idempotency-Key`` header: absent, or one value of 1 to 255 printable ASCII characters."""
    values = request.headers.getlist(IDEMPOTENCY_HEADER)
    if not values:
        return None
    if len(values) > 1:
        problem: str | None = "send one Idempotency-Key header, not several"
    elif not values[0].isascii():
        # A header is bytes: Starlette reads them as Latin-1, a client may have sent UTF-8
        # (é arrived as 'Ã©') or Latin-1, so one key typed twice could be two keys.
        problem = "an idempotency key sent over HTTP must be ASCII (a UUID, an order number)"
    else:
        problem = key_problem(values[0])
    if problem is not None:
        return _refused(IDEMPOTENCY_HEADER, f"the {IDEMPOTENCY_HEADER} header is refused: {problem}")
    return values[0]


def _content_type_problem(request: Request) -> str | None:
    """Why the body is not read as JSON: one ``Content-Type`` header naming
    application/json is.  Only that: a browser sends a cross-site form or text/plain POST
    without asking first (CORS), never this one.  Two headers are refused, as two
    ``Idempotency-Key``s are: a proxy that reads the other one would see another body."""
    values = request.headers.getlist("content-type")
    if len(values) > 1:
        return "send one Content-Type header, not several"
    if not values or values[0].split(";", 1)[0].strip().lower() != _JSON:
        return f"the Content-Type header must be {_JSON}"
    return None


def _encoded(request: Request) -> bool:
    """Whether the body carries a ``Content-Encoding`` other than ``identity``.  Before, a
    gzip body was called no UTF-8 without naming the header, and a plain body labelled gzip
    ran the handler: a proxy or firewall that decodes the label checked other bytes (or none)."""
    codings = ",".join(request.headers.getlist("content-encoding")).lower().split(",")
    return any(c.strip() not in ("", "identity") for c in codings)


# Past the limit, this much more is read and dropped rather than left unread (Go's server
# drains 256 KiB for the same reason); a body declared longer is answered at once.
_DRAIN: Final = 4 * 1024 * 1024


class _Refused(enum.Enum):
    """A body over the limit: read to its end and dropped, not sent yet (the client waits to
    be told to continue), or too long to drain (its rest unread)."""

    DRAINED = "drained"
    WAITING = "waiting"
    UNREAD = "unread"


def _waiting(request: Request) -> bool:
    """Whether the client asked to be told to continue first: it has sent no body yet.  Not
    over HTTP/1.0, whose clients send the body at once: HTTP has a server ignore the ask
    there, and taken at its word, the body went unread and the close reset the answer."""
    asked = request.headers.get("expect", "").strip().lower() == "100-continue"
    return asked and request.scope.get("http_version") != "1.0"


async def _body(request: Request, limit: int, sent_to: str, *, keep: bool = True) -> bytes | _Refused | None:
    """The body, or why not once it is known to exceed ``limit`` bytes: by its declared
    length, else while reading (chunked, or a length that lies).  Bytes past the limit are
    counted and dropped, never kept, up to ``_DRAIN`` more; without ``keep`` all are
    (``b""``: read to its end).  ``None``: the client went away before its body ended
    (logged naming ``sent_to``, the handler or path the body was sent to)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        if _waiting(request):
            return _Refused.WAITING
        if int(declared) > limit + _DRAIN:
            return _Refused.UNREAD
    try:
        chunks, size = await _read(request, limit if keep else 0, limit + _DRAIN)
    except ClientDisconnect:  # a client's own choice, not the server's error
        logger.debug("the client of %s closed the connection before its body ended", sent_to)
        return None
    if size > limit + _DRAIN:
        return _Refused.UNREAD
    return _Refused.DRAINED if size > limit else b"".join(chunks)


async def _read(request: Request, keep: int, stop: int) -> tuple[list[bytes], int]:
    """The chunks of the body's first ``keep`` bytes, and how much was read: to the body's
    end, or until more than ``stop`` bytes came (the rest is left unread).  Raises
    ``ClientDisconnect`` when the client went away first."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > stop:
            break
        if size <= keep:
            chunks.append(chunk)
    return chunks, size


async def _before_body(request: Request, limit: int, response: Response) -> Response | None:
    """``response``, decided before the body was read: the body is read first and dropped,
    as a refused one is (to ``limit`` and ``_DRAIN`` past it).  Before, a 400, 404 or 405
    went out at once and a server closing the connection after it (the client sent
    ``Connection: close``, as urllib does, or spoke HTTP/1.0) closed on the unread body:
    the reset destroyed the answer before the client read it.  Nothing of it is kept: a
    client without a user must not make the server hold what it sends.  A longer body is
    left to the server, which reads and drops the rest of a connection it keeps (unlike a
    413, such an answer says nothing against the body's size).  A client waiting to be told
    to continue has sent nothing: it is answered at once, closing the connection."""
    if _waiting(request):
        response.headers["Connection"] = "close"
        return response
    return None if await _body(request, limit, request.url.path, keep=False) is None else response


class _RepeatedKey(ValueError):
    pass


class _LongInteger(ValueError):
    pass


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _LongInteger(
            f"the body holds an integer of {len(text.lstrip('-'))} digits, more than the "
            f"{sys.get_int_max_str_digits()} read as a number: send it as a decimal string"
        ) from None


def _long_integer(text: str) -> str | None:
    """Whether a body that did not parse holds an integer of more digits than Python reads,
    said as the client's fix: the parser's own error called the body no JSON and told the
    client to call ``sys.set_int_max_str_digits()``.  Parsed again for it, only on this
    path: a hook on every integer cost a successful parse half as much again."""
    try:
        json.loads(text, parse_int=_integer)
    except _LongInteger as exc:
        return str(exc)
    except (ValueError, RecursionError):
        pass
    return None


def _object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys are all different: with a repeated key, parsers disagree
    on which value counts (Python's takes the last, others the first or refuse), so a
    proxy that checked one value could let another through."""
    made = dict(pairs)
    if len(made) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(f"the body repeats the key {_shown(key)} in one object")
            seen.add(key)
    return made


def _shown(key: str) -> str:
    text = ascii(key)  # a key with a lone surrogate must still make a JSON answer
    return text if len(text) <= 60 else text[:57] + "..."


def _json_body(body: bytes) -> object | Failure:
    """The body read as JSON in UTF-8, the only encoding of JSON between systems (RFC 8259):
    ``json.loads`` of bytes would also guess UTF-16 and UTF-32 (and pass encoded surrogates),
    so a proxy that checked the body as UTF-8 saw other text than the handler gets.  An
    empty, non-UTF-8 or byte-order-marked body is said as the client's fix: the parser's
    own words were "Expecting value" and "decode using utf-8-sig", advice for the server."""
    try:
        text = body.decode()
    except UnicodeDecodeError as exc:
        problem = f"the body is not UTF-8 (at byte {exc.start}): send JSON in UTF-8, whatever a charset says"
        return _refused("$", problem)
    if text.startswith("\ufeff"):
        return _refused("$", "the body starts with a byte order mark: send JSON in UTF-8 without one")
    if not text.strip(" \t\r\n"):  # JSON's whitespace
        return _refused("$", "the body is empty: send the payload as a JSON object ({} for one without fields)")
    try:
        data: object = json.loads(text, object_pairs_hook=_object)
    except RecursionError:
        return _refused("$", "the body is nested too deeply")
    except _RepeatedKey as exc:
        return _refused("$", str(exc))
    except ValueError as exc:  # not JSON, or an integer too long for Python
        return _refused("$", _long_integer(text) or f"the body is not JSON: {exc}")
    return data


def _failure(failure: Failure, headers: dict[str, str] | None = None, *, where: str | None = None) -> Response:
    """The Failure's public fields as JSON.  Details with no JSON form (a NaN, a key that is
    not a string, a lone surrogate) make it the ``internal_error`` of ``where``: every
    answer stays JSON, and the handler's bug is in the log."""
    body = {"code": failure.code, "message": failure.message, "details": failure.details}
    try:
        encoded = _dumps(body, lenient=True)
    except (TypeError, ValueError) as exc:
        if where is None:
            raise
        return _crash(where, exc)
    return Response(encoded, failure.http_status, headers, media_type=_JSON)


def _not_allowed(method: str) -> Response:
    """405 is HTTP's business, not a handler's: it has no Failure code of the library's."""
    body = {"code": "method_not_allowed", "message": f"this path answers {method} only", "details": None}
    return Response(_dumps(body), 405, {"Allow": method}, media_type=_JSON)


def _too_large(limit: int, refused: _Refused, request: Request) -> Response:
    """413, like 405 an HTTP answer with no Failure code of the library's.  With the rest of
    the body unread the connection cannot carry another request: ``Connection: close``, and
    sent before the close as :class:`_Lingering` unless the client sent nothing yet."""
    message = f"the body is larger than {limit} bytes; send a smaller payload"
    body = _dumps({"code": "payload_too_large", "message": message, "details": None})
    if refused is _Refused.DRAINED:
        return Response(body, 413, media_type=_JSON)
    if refused is _Refused.WAITING:
        return Response(body, 413, {"Connection": "close"}, media_type=_JSON)
    return _Lingering(body, request)


class _Lingering(Response):
    """A closing 413 sent whole while the client may still be sending, then up to ``_DRAIN``
    more bytes read and dropped before the response ends and the server closes: a client
    that reads only once its body is sent (``http.client``, urllib) reads the answer, if
    the rest fits, instead of a reset.  Before, the server closed at once on the unread
    bytes, and the reset destroyed the 413 before such a client read it (urllib saw
    ``ConnectionResetError`` for a 6 MiB body).  A longer rest still meets the reset: a
    server that read a refused body to its end, however long, would be anyone's sink."""

    def __init__(self, body: bytes, request: Request) -> None:
        super().__init__(body, 413, {"Connection": "close"}, media_type=_JSON)
        self.request = request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": True})
        with contextlib.suppress(ClientDisconnect):  # it read the answer and left, as asked
            await _read(self.request, 0, _DRAIN)
        await send({"type": "http.response.body", "body": b""})


def _cancelling() -> bool:
    """Whether the task serving the request is being cancelled (the server shutting down,
    a timeout middleware): a ``CancelledError`` is then that cancellation and goes on up,
    never answered.  One that nothing asked for (a dependency that awaited a future someone
    else cancelled, or raised it, in its thread too) is that code's exception: before, it
    escaped the adapter as a plain-text 500 with the server's traceback.  Under another
    event loop than asyncio's (trio), asyncio's ``CancelledError`` is never the task's own."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no asyncio loop runs this
        return False
    return task is not None and task.cancelling() > 0


def _crash(where: str, exc: BaseException) -> Response:
    return _internal(f"{where} raised {type(exc).__name__}", exc)


def _internal(what: str, exc: BaseException | None = None) -> Response:
    """500 ``internal_error``: ``what`` went wrong, under an error id that the log (with the
    traceback of ``exc``) names too."""
    error_id = uuid.uuid4().hex
    logger.error("%s (error id %s)", what, error_id, exc_info=exc)
    return _failure(fail("internal_error", f"{what} (error id {error_id})", {"error_id": error_id}))


def _dumps(value: object, *, lenient: bool = False) -> bytes:
    default = _lenient if lenient else _jsonable
    return json.dumps(value, default=default, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _no_json_form(value: object) -> object:
    raise TypeError(f"a {type(value).__name__} has no JSON form")


#: Unstructures as the event store's converter does (the App registers no hooks for that),
#: but for an entity: a dataclass too, yet an ORM object with no JSON form (docs/http.md),
#: its columns expired after the commit.
_RESULTS: Final = make_converter()
_RESULTS.register_unstructure_hook(Entity, _no_json_form)


def _wire(data: object) -> object:
    """A handler's result as the event store writes an event (cattrs, then
    :func:`jsonable`): its attrs instances as objects, and the keys of its maps as text — a
    UUID, a date or an enum member, as a payload reads them.  ``json.dumps`` writes a dict
    itself, never asking ``default`` about a key it has no JSON form for."""
    try:
        return jsonable(_RESULTS.unstructure(data))
    except Unjsonable as exc:
        raise TypeError(f"a {type(exc.value).__name__} has no JSON form") from None


def _jsonable(value: object) -> object:
    """A Failure's details in JSON (``json.dumps``'s ``default``: called for what JSON has no
    type of): an attrs instance as an object of its fields, a set or mapping as JSON's own
    (their items come back here), every other value as the event store writes it
    (:func:`jsonable`: one wire form of a UUID, a decimal, a time, a duration, bytes, an
    enum).  A key that is no string stays the handler's bug (docs/http.md, "Answers")."""
    cls = type(value)
    if attrs.has(cls):
        return {f.name: getattr(value, f.name) for f in attrs.fields(cls)}
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    try:
        return jsonable(value)
    except Unjsonable:
        raise TypeError(f"a {type(value).__name__} has no JSON form") from None


def _lenient(value: object) -> object:
    try:
        return _jsonable(value)
    except TypeError:
        return str(value)
