"""Delivering outbox messages: webhooks with httpx (mail transports are in ``_mail``).

A delivery either returns (sent) or raises :class:`DeliveryError`; ``permanent``
ones (a URL that is not a plain http/https URL) are not retried.  Every request carries
the outbox id as its ``Idempotency-Key`` (and mail as its ``Message-ID``), the same on
every attempt, so a receiver can drop a duplicate after a worker crash.  Secret values
are looked up here, at delivery, through a :class:`SecretBook`, which remembers every
value it handed out: whatever a peer sends back (a reason phrase, a ``Location``, an
SMTP reply) may quote one, so every error is redacted against all of them before it is
stored or logged.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import functools
import ipaddress
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit
from uuid import UUID

import httpx

from ._errors import DeliveryError
from ._host_names import resolvable_name
from ._http_deadline import Budget, deadline, in_delivery
from ._outbox_types import CLIENT_HEADERS, masked_url
from ._poison import one_line
from ._private_addresses import PrivateHost
from ._webhook_signature import SIGNATURE_HEADERS, signature_headers, signing_keys

__all__ = [
    "BODY_CAP",
    "BODY_WAIT",
    "HEADER_VALUE",
    "RETRY_AFTER_MAX",
    "SecretBook",
    "SecretResolver",
    "deliver_webhook",
    "env_name",
    "env_secrets",
    "json_text",
    "url_problem",
]

SecretResolver = Callable[[str], "str | None"]


def env_name(ref: str) -> str:
    """The environment variable the default resolver reads for ``ref``."""
    return "KUMIKO_SECRET_" + re.sub(r"[^A-Z0-9]", "_", ref.upper())


def env_secrets(ref: str) -> str | None:
    """The default secret resolver: ``KUMIKO_SECRET_<REF>`` (upper case, ``_`` for others)."""
    return os.environ.get(env_name(ref))


class SecretBook:
    """The App's secret resolver, remembering every value it resolved, for redaction."""

    def __init__(self, resolve: SecretResolver) -> None:
        self._resolve = resolve
        self._seen: set[str] = set()
        self._lock = threading.Lock()  # workers in threads share one App

    def __call__(self, ref: str) -> str:
        value = self._resolve(ref)
        if not value:
            # Where to set it: the variable only if the App reads the environment (the hint
            # named KUMIKO_SECRET_... also for an App whose own resolver never reads it).
            if self._resolve is env_secrets:
                raise DeliveryError(f"secret {ref!r} is not set (the default resolver reads {env_name(ref)})")
            raise DeliveryError(f"secret {ref!r} is not set (the App's secrets= resolver returned nothing for it)")
        if not isinstance(value, str):
            # Not kept: bytes among the values to redact broke every later error of the
            # App's deliveries, and the header sent was their repr (Bearer b'...').
            raise DeliveryError(
                f"secret {ref!r}: the App's secrets= resolver returned {type(value).__name__}, not a str"
            )
        with self._lock:
            self._seen.add(value)
        return value

    def remember(self, value: str) -> None:
        """Redact ``value`` too: a credential the App holds that no reference resolves (a
        proxy's password, from the environment)."""
        if value:
            with self._lock:
                self._seen.add(value)

    def redact(self, text: str, also: Iterable[str] = ()) -> str:
        """``text`` with every secret value this book resolved (and each of ``also``: a
        delivery's own credentials) replaced by ``***``, also in the spellings an echo may
        use: escaped as by ``repr`` and percent-encoded."""
        with self._lock:
            secrets = self._seen.union(filter(None, also))
        for secret in sorted(secrets, key=len, reverse=True):  # a secret inside another one first
            for form in _spellings(secret):
                text = re.sub(re.escape(form), "***", text, flags=re.IGNORECASE if "%" in form else 0)
        return text


def _spellings(secret: str) -> set[str]:
    raw = _utf8(secret)
    return {
        secret,
        repr(secret)[1:-1],
        repr(secret.encode("utf-8", "replace"))[2:-1],
        repr(raw)[2:-1],
        quote(raw, safe=""),
        quote(raw),
        quote_plus(raw),
    }


def _utf8(secret: str) -> bytes:
    """The bytes a client would send for ``secret``: a lone surrogate (``os.environ``'s
    spelling of an undecodable byte) as that byte, any other one as itself."""
    try:
        return secret.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return secret.encode("utf-8", "surrogatepass")


#: The redaction of the webhook delivery under way in this thread (its App's secrets and
#: proxy credentials), for the HTTP stack's log lines.
_redaction: ContextVar[Callable[[str], str] | None] = ContextVar("kumiko_delivery_redaction", default=None)


class _MaskedRequestLines(logging.Filter):
    """httpx logs each request at INFO with its URL whole (``HTTP Request: POST <url>
    ...``): a password and query values, credentials the outbox masks everywhere it
    shows a URL, would reach the App's logs.  In a thread delivering a webhook (only
    there: other use of httpx in the process is left alone) the URL is shown as
    ``OutboxItem.target`` shows it, and the line (httpx's, and httpcore's DEBUG traces)
    is redacted as a stored error is: a peer or proxy that echoes a secret or the proxy's
    credentials in its reason phrase does not put them in the logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if in_delivery() and isinstance(record.args, tuple):
            record.args = tuple(masked_url(str(a)) if isinstance(a, httpx.URL) else a for a in record.args)
        redact = _redaction.get()
        if redact is not None:  # and on one line: the response line is the receiver's text
            record.msg, record.args = one_line(redact(record.getMessage())), ()
        return True


@contextlib.contextmanager
def _redacting(redact: Callable[[str], str]) -> Iterator[None]:
    token = _redaction.set(redact)
    try:
        yield
    finally:
        _redaction.reset(token)


# Filters are not inherited: each logger that writes a line in a delivery gets one.
for _name in ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy"):
    logging.getLogger(_name).addFilter(_MaskedRequestLines())


#: A non-empty HTTP field value h11 accepts: visible ASCII, blanks and tabs only inside.
HEADER_VALUE = re.compile(r"[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*")
# What a URL may not contain anywhere: whitespace and control characters.  (urlsplit and
# httpx strip leading blanks silently; a URL with them is a mistake to report, not fix.)
_NOT_IN_URL = re.compile(r"[\s\x00-\x1f\x7f]")


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a plain absolute http(s) URL, with the fix; ``None`` if it is one.
    Asked by ``send_webhook`` before it writes its row (and by the boot for a literal
    URL), and again at delivery for a row written before the step checked.  The reason
    shows the URL as ``OutboxItem.target`` does: a password or query value in it is a
    credential."""
    fix = "give an absolute http:// or https:// URL with a host"
    if _NOT_IN_URL.search(url):
        return f"the URL {masked_url(url)!r} contains whitespace or control characters; {fix}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises for a port that is no number below 65536
        host = httpx.URL(url).raw_host.decode("ascii")  # what the client that sends it cannot parse
    except (ValueError, httpx.InvalidURL):
        return f"the URL is malformed (its host or port cannot be read); {fix}"
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        shown = scheme or "no scheme"
        return f"only http and https URLs are delivered, not {shown!r} ({masked_url(url)}); {fix}"
    if not parts.hostname:
        return f"the URL {masked_url(url)!r} names no host; {fix}"
    if parts.port == 0:  # queued before, and every attempt was refused by the connect
        return f"the URL {masked_url(url)!r} names port 0, on which nothing listens; {fix}"
    if not _resolvable(host):
        return (
            f"the URL's host {host!r} has an empty label or one longer than 63 characters "
            f"(or is longer than 253), which no lookup resolves; {fix}"
        )
    return None


def _resolvable(host: str) -> bool:
    """Whether a name server could ever answer for ``host`` (ASCII, as the client sends
    it; :func:`~kumiko_typed._host_names.resolvable_name`).  Before, ``http://a..b.example/``
    was queued and failed every attempt at the lookup (``label empty or too long``), after
    the handler was told ``Ok``."""
    try:
        ipaddress.ip_address(host)
        return True  # an address literal is looked up by no one
    except ValueError:
        pass
    return resolvable_name(host)


@functools.lru_cache(maxsize=64)
def _delivery_url_problem(url: str) -> str | None:
    """:func:`url_problem`, remembered: a worker delivers to a few URLs many times, and the
    check parses each one twice (some 5 % of a worker's CPU per delivery)."""
    return url_problem(url)


#: The most of a response body a delivery reads (and discards) to keep its connection for
#: the next delivery to that receiver; a longer body drops the connection instead.
BODY_CAP = 64 * 1024
#: How long a delivery waits for that body once the status line and headers are in (the
#: body is read only as fast as it comes, and never past the delivery's deadline).
BODY_WAIT = 1.0


def json_text(body: object) -> str:
    """A webhook's body as it is posted: the text httpx's ``json=`` writes."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _drain(response: httpx.Response, budget: Budget) -> None:
    """Read and discard a small body, then close the response.  A response read to its
    end leaves its connection to the pool for the next delivery to that receiver; closed
    unread, it drops it, and every delivery paid for a new TCP (and TLS) connection on
    both ends.  The status line has decided already: a body longer than ``BODY_CAP``, or
    one that does not come within ``BODY_WAIT``, is not waited for (its connection is
    dropped), and no error of the body's changes the outcome.  On a client of your own,
    which the deadline does not reach, only a response without a body is read."""
    try:
        if budget.enforced:
            length = response.headers.get("content-length")
            if length is None or int(length) <= BODY_CAP:
                budget.narrow(BODY_WAIT)
                read = 0
                for chunk in response.iter_raw():  # raw: a compressed body is not inflated
                    read += len(chunk)
                    if read > BODY_CAP:
                        break
        elif response.status_code in (204, 304) or response.headers.get("content-length") == "0":
            response.read()  # nothing to wait for
    except Exception:
        pass
    finally:
        with contextlib.suppress(Exception):
            response.close()


#: A header or query parameter whose name says it carries a credential (``Authorization``,
#: ``X-Api-Key``, ``Cookie``, ``?access_token=``, ``?sig=``...): its value is redacted from
#: the delivery's error and log lines, whatever its length.
_CREDENTIAL_NAME = re.compile(r"auth|token|key|secret|pass|pwd|cookie|session|sig|credential|hmac", re.IGNORECASE)
#: The shortest value of a query parameter whose name says nothing that is still redacted,
#: as a precaution: a value that long is rarely text an error shows otherwise, and
#: redacting a shorter one (``?page=2``) would blank digits of the status code and port.
UNNAMED_MIN = 8


def row_credentials(url: str, headers: Mapping[str, str]) -> list[str]:
    """The credentials a webhook row carries itself, which a receiver echoing the request
    (its reason phrase, a header httpcore logs) would put in ``last_error`` and the logs:
    the URL's password and the ``Authorization: Basic`` token httpx makes of it, the values
    of query parameters and headers whose names say credential (:data:`_CREDENTIAL_NAME`;
    an ``Authorization`` value also without its scheme), each whatever its length — a
    short token is no less a secret — and, as a precaution, the other query values of at
    least ``UNNAMED_MIN`` characters."""
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return []
    found: list[str] = []
    if password is not None:  # httpx sends them percent-decoded, as Basic credentials
        user, password = unquote(user or ""), unquote(password)
        found += [password, base64.b64encode(f"{user}:{password}".encode()).decode("ascii")]
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if _CREDENTIAL_NAME.search(name) or len(value) >= UNNAMED_MIN:
            found.append(value)
    for name, value in headers.items():
        if _CREDENTIAL_NAME.search(name):
            found += [value, value.rpartition(" ")[2]]
    return found


def deliver_webhook(
    item_id: UUID, message: Mapping[str, Any], http: httpx.Client, secrets: SecretBook, timeout: float
) -> None:
    """Send one attempt of a webhook row; raise :class:`DeliveryError` unless it was taken
    (2xx), its message redacted of the App's secrets and of the row's own credentials
    (:func:`row_credentials`).  The attempt ends within ``timeout`` seconds
    (``App(webhook_timeout=...)``) on the App's own client (see :mod:`._http_deadline`)."""
    url = str(message["url"])
    redact = functools.partial(secrets.redact, also=row_credentials(url, dict(_step_headers(message))))
    try:
        _send_webhook(item_id, message, http, secrets, timeout, redact)
    except DeliveryError as exc:
        raise DeliveryError(redact(str(exc)), permanent=exc.permanent, retry_after=exc.retry_after) from None


def _step_headers(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The step's headers in the order it gave them (``header_order``: PostgreSQL's jsonb
    sorts the ``headers`` object's keys); a row written before that was kept, in the
    order its column gives them."""
    given: Mapping[Any, Any] = message.get("headers") or {}
    order = message.get("header_order")
    names = order if isinstance(order, list) and sorted(map(str, order)) == sorted(map(str, given)) else given
    return [(str(name), str(given[name])) for name in names]


def _send_webhook(
    item_id: UUID,
    message: Mapping[str, Any],
    http: httpx.Client,
    secrets: SecretBook,
    timeout: float,
    redact: Callable[[str], str],
) -> None:
    url = str(message["url"])
    problem = _delivery_url_problem(url)
    if problem is not None:
        raise DeliveryError(problem, permanent=True)
    auth = message.get("auth")
    sign = message.get("sign")
    # The framework's headers replace a step's own of the same name in any case (HTTP
    # names are case-insensitive): one authentication header, one signature; the client's
    # own (framing, routing) are left to it, and so is the Idempotency-Key, in a row written
    # before the step refused them.
    ours = CLIENT_HEADERS | {"idempotency-key"} | ({str(auth["header"]).lower()} if auth else set())
    if sign:
        ours |= SIGNATURE_HEADERS
    headers = {name: value for name, value in _step_headers(message) if name.lower() not in ours}
    headers["Idempotency-Key"] = str(item_id)
    if auth:
        secret = secrets(auth["secret_ref"])
        value = f"{auth['scheme']} {secret}" if auth.get("scheme") else secret
        # Checked here: the HTTP stack would quote the whole value in its error (and log).
        if not HEADER_VALUE.fullmatch(value):
            raise DeliveryError(
                f"secret {auth['secret_ref']!r} cannot be sent in the {auth['header']} header: "
                "it must be printable ASCII without line breaks"
            )
        headers[auth["header"]] = value
    # A row written before the body's text was kept holds the document: the same text made now.
    text = message["text"] if "text" in message else None if message["body"] is None else json_text(message["body"])
    if text is not None and not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = "application/json"  # the step's own wins, as with httpx's json=
    content = None if text is None else text.encode()
    if sign:  # signed last, over the bytes sent, at the attempt's time
        keys = signing_keys(secrets(sign["secret_ref"]), str(sign["secret_ref"]))
        headers.update(signature_headers(keys, str(item_id), content or b""))
    request = http.build_request(str(message["method"]), url, content=content, headers=headers)
    with deadline(timeout) as budget, _redacting(redact):
        try:
            response = http.send(request, follow_redirects=False, stream=True)
        except Exception as exc:  # the caller redacts the message before it stores it
            if budget.expired:
                raise DeliveryError(
                    f"the receiver did not answer within {timeout:g} s (App(webhook_timeout=...))"
                ) from None
            if isinstance(exc.__cause__, PrivateHost):  # the App refuses it: trying again will not help
                raise DeliveryError(str(exc.__cause__), permanent=True) from None
            raise DeliveryError(f"{type(exc).__name__}: {exc}") from None
        _drain(response, budget)
    # Not response.is_redirect: httpx (0.29) calls every 3xx so, a 304 Not Modified too.
    if response.status_code in _REDIRECTS:  # with a Location or without
        location = response.headers.get("location")
        where = "without a Location" if location is None else f"to {masked_url(location)}"
        status = f"HTTP {response.status_code} redirect {where} (redirects are not followed)"
    elif not response.is_success:
        status = f"HTTP {response.status_code} {response.reason_phrase}"
    else:
        return
    # Any failing answer's, a redirect's too (RFC 9110 10.2.3: the least wait before the
    # redirected request): it was ignored there, and the policy's backoff went first.
    wait = _retry_after(response.headers.get("retry-after"))
    if wait is None:
        raise DeliveryError(status)
    capped = ", at most an hour" if wait > RETRY_AFTER_MAX else ""
    wait = min(wait, RETRY_AFTER_MAX)
    raise DeliveryError(f"{status} (Retry-After: {wait.total_seconds():g} s{capped})", retry_after=wait)


#: The statuses that send a client elsewhere (RFC 9110 15.4), as httpx follows them.
_REDIRECTS = frozenset({301, 302, 303, 307, 308})

#: The longest wait a peer's ``Retry-After`` sets before the next attempt: a receiver
#: (a buggy or hostile one) cannot park a row for days, nor past the calendar's end.
RETRY_AFTER_MAX = timedelta(hours=1)


def _retry_after(value: str | None) -> timedelta | None:
    """The wait a ``Retry-After`` value asks for: seconds, or an HTTP-date counted from the
    wall clock now (the receiver's clock, not the App's); ``None`` for no header, an
    unreadable one, or a date already past."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        # Past 9 digits (some 30 years, far past the cap) the number is not read: int()
        # refuses thousands of digits, and its first nine would be a shorter wait.
        digits = value.lstrip("0") or "0"
        return timedelta(seconds=int(digits) if len(digits) <= 9 else 10**9)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # asctime's form has no zone: an HTTP-date is always GMT
        when = when.replace(tzinfo=UTC)
    wait = when - datetime.now(UTC)
    return wait if wait > timedelta(0) else None
