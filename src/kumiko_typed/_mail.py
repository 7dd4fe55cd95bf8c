"""Mail transports: what the outbox worker hands a queued mail to.

Any object with a ``send(message, secrets)`` method is a :class:`MailTransport`: the two
built in (a maildir folder, SMTP), the testing kit's ``MemoryMail``, or an application's
own.  ``send`` returns when the mail is delivered and raises when it is not; the worker
records the error (redacted) and retries as the outbox's policy says.
"""

from __future__ import annotations

import base64
import contextlib
import email.policy
import os
import smtplib
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import parseaddr
from pathlib import Path
from typing import Protocol
from uuid import UUID

import attrs
import httpx

from ._errors import DeliveryError
from ._mail_address import address_problem, ascii_domain, header_problem
from ._resolve import addresses, local_name

__all__ = [
    "DEFAULT_SENDER",
    "MailMessage",
    "MailTransport",
    "MaildirTransport",
    "SecretLookup",
    "SmtpTransport",
    "to_email",
]

#: Looks a secret reference up (raises when it is not set); what ``send`` gets as ``secrets``.
SecretLookup = Callable[[str], str]

DEFAULT_SENDER = "kumiko-typed@localhost"


@attrs.frozen
class MailMessage:
    """One mail as ``send_mail`` queued it.  ``id`` is the outbox row's id, the same on every
    attempt (an idempotency key); ``sender`` is None when the step named none; ``html``,
    when the step gave one, is the HTML form of ``body`` (a reader shows one of the two);
    ``reply_to``, when given, is where a reader's reply goes instead of the sender."""

    id: UUID
    to: tuple[str, ...]
    subject: str
    body: str
    sender: str | None = None
    html: str | None = None
    reply_to: str | None = None


class MailTransport(Protocol):
    """Delivers a mail, or raises (:class:`DeliveryError`, ``permanent=True`` for a mail
    that can never go).  Positional parameters, so any names fit.  A worker calls it
    from up to ``App(delivery_concurrency=...)`` threads at once."""

    def send(self, message: MailMessage, secrets: SecretLookup, /) -> None: ...


def to_email(message: MailMessage) -> EmailMessage:
    """The RFC 5322 message the built-in transports write or send (refused, for good, if a
    recipient or the sender is not one address, or the subject would add headers: a row
    written before the step checked)."""
    optional = [message.reply_to] if message.reply_to else []
    for value in (*message.to, message.sender or DEFAULT_SENDER, *optional):
        problem = address_problem(value)
        if problem is not None:
            raise DeliveryError(f"the mail address {value!r} {problem}", permanent=True)
    problem = header_problem(message.subject)
    if problem is not None:  # not quoted: it is the text that would add the headers
        raise DeliveryError(f"the subject {problem}", permanent=True)
    mail = EmailMessage()
    mail["From"] = _ascii_domain(message.sender or DEFAULT_SENDER)
    mail["To"] = ", ".join(_ascii_domain(to) for to in message.to)
    mail["Subject"] = message.subject
    if message.reply_to:
        mail["Reply-To"] = _ascii_domain(message.reply_to)
    mail["Message-ID"] = f"<{message.id}@kumiko-typed>"
    mail["Idempotency-Key"] = str(message.id)
    mail.set_content(message.body)
    if message.html is not None:  # multipart/alternative: the text first, the preferred last
        mail.add_alternative(message.html, subtype="html")
    return mail


def _ascii_domain(value: str) -> str:
    """The address ``value`` (one, checked) with its domain in its ASCII form (IDNA, as
    Django's mail does): written as given, the email package put an encoded word into the
    address (``a@=?utf-8?q?b=C3=BCcher?=.example``, no one's address), and smtplib asks
    the server for SMTPUTF8, which many do not offer.  Only a non-ASCII local part needs
    it."""
    address = email.policy.default.header_factory("to", value).addresses[0]
    if address.domain.isascii():
        return value
    domain = ascii_domain(address.domain) or address.domain  # one, since address_problem passed it
    return str(Address(address.display_name, address.username, domain))


def _folder(_inst: object, _attribute: attrs.Attribute[str], value: object) -> None:
    # "" is the working directory to Path: every mail was written beside the worker's
    # files, and a worker started elsewhere wrote them there instead.
    if not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise ValueError(
            f"folder must name the directory to write mail into, e.g. MaildirTransport('kumiko-mail'), not {value!r}"
        )


@attrs.frozen
class MaildirTransport:
    """The embedded mail default: one RFC 5322 ``.eml`` file per message in ``folder``."""

    folder: str = attrs.field(default="kumiko-mail", validator=_folder)

    def send(self, message: MailMessage, secrets: SecretLookup, /) -> None:
        data = to_email(message).as_bytes()  # before the file: a refused mail leaves none
        folder = Path(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        # Write then rename: a reader never sees half a message; a retry overwrites.
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".eml")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, folder / f"{message.id}.eml")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)  # a full disk leaves no half file behind
            raise


def _seconds(_inst: object, attribute: attrs.Attribute[float], value: object) -> None:
    # At most 60: a send must end well inside the outbox's lease.  True is 1 to Python and
    # "30" compared with a number was a TypeError: both refused with the others.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 60:
        raise ValueError(
            f"{attribute.name} must be above 0 and at most 60 seconds (inside the outbox's lease), not {value!r}"
        )


def _flag(_inst: object, attribute: attrs.Attribute[bool], value: object) -> None:
    if type(value) is not bool:  # "no" is true: a TLS mode would be taken that was meant off
        raise ValueError(f"{attribute.name} must be True or False, not {value!r}")


def _port(_inst: object, _attribute: attrs.Attribute[int | None], value: object) -> None:
    # Checked when made: a port of "587" or 70000 failed only at the first delivery, in the
    # worker's log, and every mail of the App waited behind it.
    if value is not None and (type(value) is not int or not 0 < value < 65536):
        raise ValueError(f"port must be a number from 1 to 65535, or None for the mode's own, not {value!r}")


def _host(_inst: object, _attribute: attrs.Attribute[str], value: object) -> None:
    # None (an unset SMTP_HOST read with os.environ.get) was this machine: smtplib connects
    # to the loopback address for it, and the mail went to whatever listens there.
    if not isinstance(value, str) or not value or not value.isprintable() or " " in value:
        raise ValueError(f"host must be the SMTP server's name or address, not {value!r}")
    name, colon, port = value.rpartition(":")
    if colon and port.isdigit() and ":" not in name:  # smtplib read it so only without port=
        raise ValueError(f"host must be the SMTP server's name alone: SmtpTransport({name!r}, {port})")


def _username(_inst: object, _attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and not (isinstance(value, str) and value.isascii()):
        raise ValueError(f"username must be ASCII text (smtplib's login sends no other), not {value!r}")


#: An SMTP operation's timeout when none is given (or the deadline, if shorter).
_TIMEOUT = 30.0


def _within_deadline(inst: SmtpTransport, _attribute: attrs.Attribute[float], value: float) -> None:
    # A timeout past the deadline never fires: the deadline cuts the send first, so the
    # hint a timed-out greeting gives (the TLS modes mixed up) could never be given.
    given = inst.timeout
    if given is not None and given > value:
        raise ValueError(
            f"timeout={given:g} is longer than deadline={value:g}: each network operation's timeout "
            f"must fit in the whole send's deadline; give timeout={value:g} or less (or a longer deadline)"
        )


def _login(inst: SmtpTransport, _attribute: attrs.Attribute[str | None], value: str | None) -> None:
    # Without a username there is no login: the password was never looked up, and the mail
    # went unauthenticated, to be refused, or taken by a server that takes anyone's.
    if value is not None and inst.username is None:
        raise ValueError(f"password_ref={value!r} needs username=, the login the password is for")


def _one_tls(inst: SmtpTransport, _attribute: attrs.Attribute[bool], value: bool) -> None:
    if value and inst.starttls:
        raise ValueError(
            "starttls and implicit_tls exclude each other: implicit_tls=True for a port that speaks TLS "
            "from the start (465), starttls=True for one that turns to TLS after its greeting (587)"
        )


@attrs.frozen
class SmtpTransport:
    """Deliver mail with ``smtplib``; ``password_ref`` names a secret, resolved at delivery.

    ``starttls`` turns a plain connection to TLS after the server's greeting (port 587);
    ``implicit_tls`` speaks TLS from the first byte (port 465, RFC 8314), as
    ``smtplib.SMTP_SSL`` does.  Either verifies the server as a webhook's TLS does.
    ``port=None`` is the mode's own port, as smtplib's: 465 with ``implicit_tls``, else 25.

    ``timeout`` bounds each network operation (at most ``deadline``; ``None``: 30 s, or
    the deadline if shorter); ``deadline`` the whole send, connection to
    ``QUIT``: a server that trickles its replies a byte at a time never lets a read time
    out.  smtplib has no such limit and no hook for one, so a timer shuts the connection's
    socket down at the deadline (the blocked read then ends, as if the server had closed),
    and the connection is made within it (:class:`_Smtp`)."""

    host: str = attrs.field(validator=_host)
    port: int | None = attrs.field(default=None, validator=_port)
    username: str | None = attrs.field(default=None, validator=_username)
    password_ref: str | None = attrs.field(default=None, validator=_login)
    starttls: bool = attrs.field(default=False, validator=_flag)
    #: ``timeout=None``: 30 seconds, or the deadline if that is shorter.
    timeout: float | None = attrs.field(default=None, validator=attrs.validators.optional(_seconds))
    deadline: float = attrs.field(default=60.0, validator=[_seconds, _within_deadline])
    implicit_tls: bool = attrs.field(default=False, validator=[_flag, _one_tls])

    @property
    def operation_timeout(self) -> float:
        """Each network operation's limit: ``timeout``, else 30 s or the deadline if shorter."""
        return min(_TIMEOUT, self.deadline) if self.timeout is None else self.timeout

    def send(self, message: MailMessage, secrets: SecretLookup, /) -> None:
        # The worker redacts the password from the error; a server that echoes the AUTH
        # command in its refusal quotes it base64-encoded, which only the login knows.
        passwords: list[str] = []

        def lookup(ref: str) -> str:
            passwords.append(secrets(ref))
            return passwords[-1]

        try:
            self._send(message, lookup)
        except DeliveryError as exc:
            text = _without_login(str(exc), self.username or "", passwords)
            raise DeliveryError(text, permanent=exc.permanent, retry_after=exc.retry_after) from None

    def _send(self, message: MailMessage, secrets: SecretLookup) -> None:
        until = time.monotonic() + self.deadline
        late = threading.Event()
        try:
            # Verified, as the webhooks' TLS is: smtplib's own context checks neither the
            # certificate nor the name, and the password would go to whoever answers in
            # the server's place.
            tls = httpx.create_ssl_context() if self.starttls or self.implicit_tls else None
            smtp = _Smtp(
                self.host,
                local_name(self.deadline),
                self.operation_timeout,
                until,
                late,
                tls if self.implicit_tls else None,
            )
        except TimeoutError:
            raise self._too_late() from None

        def cut() -> None:
            late.set()
            sock = smtp.sock
            if sock is not None:
                with contextlib.suppress(OSError):  # closed, or handed to TLS meanwhile
                    # socket.socket's own: SSLSocket.shutdown would drop the TLS state
                    # under the thread reading it.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

        timer = threading.Timer(self.deadline, cut)
        timer.daemon = True
        timer.start()
        greeted = False
        try:
            smtp.connect(self.host, (465 if self.implicit_tls else 25) if self.port is None else self.port)
            greeted = True
            if self.starttls:
                smtp.starttls(context=tls)
            if self.username is not None:
                password = secrets(self.password_ref) if self.password_ref else ""
                if not password.isascii():
                    # smtplib's AUTH encodes as ASCII: its UnicodeEncodeError failed every
                    # attempt, quoting a character of the password and where it stands.
                    raise DeliveryError(
                        f"the password of password_ref {self.password_ref!r} is not ASCII, which smtplib's"
                        " login cannot send; give the account an ASCII password"
                    )
                smtp.login(self.username, password)
            refused = _send(smtp, message)
        except smtplib.SMTPRecipientsRefused as exc:  # every recipient refused
            raise _refused(exc.recipients, len(message.to)) from None
        except (smtplib.SMTPSenderRefused, smtplib.SMTPDataError) as exc:
            # The server's answer to this mail (its sender, its content): a 5xx one is for
            # good (RFC 5321 4.2.1: not to be repeated as it was), a 4xx one for now.
            what = "the sender" if isinstance(exc, smtplib.SMTPSenderRefused) else "the mail"
            error = exc.smtp_error
            reply = f"{exc.smtp_code} {error.decode('utf-8', 'replace') if isinstance(error, bytes) else error}"
            raise DeliveryError(f"SMTP refused {what}: {reply}", permanent=exc.smtp_code >= 500) from None
        except (OSError, smtplib.SMTPException) as exc:
            if late.is_set() or time.monotonic() >= until:
                # No hint: a server trickling its greeting runs into the deadline too.
                raise self._too_late() from None
            hint = "" if greeted or not smtp.reached else self._no_greeting(exc)
            raise DeliveryError(f"SMTP {type(exc).__name__}: {exc}{hint}") from None
        finally:
            # Not smtplib's ``with``: it raises for a QUIT reply other than 221, and the
            # server has taken the mail by then; sent again, it would arrive twice.
            with contextlib.suppress(OSError, smtplib.SMTPException):
                if smtp.sock is not None and not late.is_set():
                    smtp.quit()
            smtp.close()
            timer.cancel()
        if refused:
            raise _refused(refused, len(message.to))

    def _too_late(self) -> DeliveryError:
        return DeliveryError(f"the SMTP server did not finish within {self.deadline:g} s (SmtpTransport(deadline=...))")

    def _no_greeting(self, exc: BaseException) -> str:
        """Why a server that took the connection may have sent no greeting, within the
        per-operation timeout: the two TLS modes mixed up.  A plain client on a TLS port
        waits for a greeting while the server waits for a handshake (a timeout that alone
        says nothing); a TLS client on a plain
        port reads the greeting as a broken handshake.  A greeting that came and refused
        (``421 busy``) is an answer, and needs no hint."""
        if isinstance(exc, smtplib.SMTPResponseException):
            return ""
        if not self.implicit_tls:
            return "; no greeting came: a port that speaks TLS from the start (465) needs implicit_tls=True"
        if isinstance(exc, ssl.SSLError):
            return "; the server did not answer in TLS: a port that turns to TLS later (587) needs starttls=True"
        return ""


def _without_login(text: str, username: str, passwords: list[str]) -> str:
    """``text`` without a password as smtplib's AUTH sends it: base64 of the password
    (LOGIN) and of ``\\0user\\0password`` (PLAIN, RFC 4616), with or without padding."""
    for password in passwords:
        for raw in (f"\0{username}\0{password}", password):  # the longer first: it may hold the other
            encoded = base64.b64encode(raw.encode("utf-8", "surrogateescape")).decode("ascii")
            text = text.replace(encoded, "***").replace(encoded.rstrip("="), "***")
    return text


class _Smtp(smtplib.SMTP):
    """smtplib's client, connecting within the send's deadline (``until``, monotonic): the
    lookup, and each of the host's addresses with the time left.  ``create_connection``
    gives each address the whole ``timeout`` and the resolver all it takes, and the
    deadline's timer, which can only shut down a socket ``sock`` holds, found none while
    a connect was under way: the send then went on unbounded past its deadline."""

    def __init__(
        self,
        host: str,
        ehlo_name: str,
        timeout: float,
        until: float,
        late: threading.Event,
        tls: ssl.SSLContext | None,
    ) -> None:
        super().__init__(timeout=timeout, local_hostname=ehlo_name)  # smtplib's own lookup is not cut
        self._host = host  # the name TLS verifies (smtplib sets it only if it connects itself)
        self._until = until
        self._late = late
        self._tls = tls  # implicit TLS: the handshake before the greeting
        self.reached = False  # a connection was made (smtplib forgets its socket on a failure)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        *others, last = addresses(host, port, self._until - time.monotonic())
        for address in others:
            try:
                return self._connect(address, timeout)
            except OSError:
                if time.monotonic() >= self._until:
                    raise  # the next address, as create_connection tries it, while time is left
        return self._connect(last, timeout)

    def _connect(self, address: tuple[str, int], timeout: float) -> socket.socket:
        left = self._until - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline has passed")
        sock = socket.create_connection(address, min(timeout, left))
        sock.settimeout(timeout)
        # Held where the timer looks before the timer is asked: a deadline passing now is
        # either seen here or shuts this socket down.
        self.sock = sock
        if self._late.is_set():
            sock.close()
            raise TimeoutError("the deadline has passed")
        self.reached = True
        if self._tls is None:
            return sock
        # The handshake reads from the server as the greeting does: the deadline's timer
        # shuts the plain socket down under it; the TLS socket replaces it once made.
        wrapped = self._tls.wrap_socket(sock, server_hostname=self._host)
        self.sock = wrapped
        if self._late.is_set():  # the timer may have found the plain socket already handed over
            wrapped.close()
            raise TimeoutError("the deadline has passed")
        return wrapped


def _send(smtp: smtplib.SMTP, message: MailMessage) -> dict[str, tuple[int, bytes]]:
    try:
        return smtp.send_message(to_email(message))
    except smtplib.SMTPNotSupportedError:
        # Raised by smtplib before it sends anything, and only for this: an address whose
        # local part is not ASCII, to a server without SMTPUTF8.  This server will not
        # take the mail on a later attempt either.
        raise DeliveryError(_no_smtputf8(message), permanent=True) from None


def _no_smtputf8(message: MailMessage) -> str:
    # The envelope's addresses: the ones smtplib asks SMTPUTF8 for.
    envelope = [parseaddr(a)[1] for a in (message.sender or DEFAULT_SENDER, *message.to)]
    local = [a for a in envelope if not a.rpartition("@")[0].isascii()]
    return (
        f"the SMTP server does not offer SMTPUTF8, which {', '.join(local)} need(s) (a non-ASCII local part): "
        "send through a server that offers it, then requeue the mail"
    )


def _refused(refused: Mapping[str, tuple[int, bytes]], recipients: int) -> DeliveryError:
    """The server refused some recipients (``smtplib`` returns those of a mail others took)
    or all (it raises).  A refusal for now (4xx: greylisting) is an attempt that failed,
    sent again to all with the same Message-ID; a permanent one (5xx only) is not: the
    others have the mail, or no one can get it."""
    permanent = all(code >= 500 for code, _reply in refused.values())
    shown = ", ".join(
        f"{address} ({code} {reply.decode('utf-8', 'replace')})" for address, (code, reply) in refused.items()
    )
    others = ", the others have the mail" if permanent and len(refused) < recipients else ""
    text = f"SMTP refused {len(refused)} of {recipients} recipient(s){others}: {shown}"
    return DeliveryError(text, permanent=permanent)
