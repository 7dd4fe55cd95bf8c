"""A real HTTP peer for the outbox tests: a threaded HTTP/1.1 server on 127.0.0.1 whose
answers the test decides (used through the ``receiver`` fixture in conftest.py)."""

from __future__ import annotations

import http.server
import ssl
import threading
import time
from collections.abc import Callable
from typing import Literal

import attrs


@attrs.frozen
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    raw_headers: list[tuple[str, str]]  # every header line, as sent

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.raw_headers if k.lower() == name.lower()]


class Receiver:
    """An HTTP/1.1 server on 127.0.0.1.  ``respond(index, path) -> (status, headers)``
    decides each answer (``index`` counts requests to that path from 0); default 200.

    ``body(index, path)`` is the answer's body (default none; its ``Content-Length`` is
    sent).  ``trickle`` sends the status line and headers (``"headers"``) or the body
    (``"body"``) one byte every ``trickle_every`` seconds, for at most ``trickle_for``
    seconds or until the client hangs up.  ``connections`` counts the TCP connections
    accepted; ``written`` the body bytes each answer got out before the client hung up.
    With ``tls`` (a server context) it speaks HTTPS."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[Seen] = []
        self.lock = threading.Lock()
        self.respond: Callable[[int, str], tuple[int, dict[str, str]]] = lambda _i, _p: (200, {})
        self.body: Callable[[int, str], bytes] = lambda _i, _p: b""
        self.reasons: dict[str, str] = {}  # path -> the reason phrase to answer with
        self.trickle: Literal["headers", "body"] | None = None
        self.trickle_every = 0.2
        self.trickle_for = 20.0
        self.connections = 0
        self.written: list[int] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                with receiver.lock:
                    receiver.connections += 1
                super().setup()

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                items = list(self.headers.items())
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in items}, body, items)
                with receiver.lock:
                    index = sum(1 for r in receiver.requests if r.path == self.path)
                    receiver.requests.append(seen)
                status, headers = receiver.respond(index, self.path)
                answer = receiver.body(index, self.path)
                reason = receiver.reasons.get(self.path) or self.responses.get(status, ("",))[0]
                head = f"HTTP/1.1 {status} {reason}\r\n"
                if receiver.trickle == "headers":  # enough bytes to last trickle_for
                    head += "X-Pad: " + "p" * int(receiver.trickle_for / receiver.trickle_every) + "\r\n"
                head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
                if not any(name.lower() in ("content-length", "transfer-encoding") for name in headers):
                    head += f"Content-Length: {len(answer)}\r\n"
                try:
                    self._send(head.encode("latin-1") + b"\r\n", slowly=receiver.trickle == "headers")
                    sent = self._send(answer, slowly=receiver.trickle == "body")
                except OSError:  # the client hung up
                    self.close_connection = True
                    sent = -1
                with receiver.lock:
                    receiver.written.append(sent)

            def _send(self, data: bytes, *, slowly: bool) -> int:
                """Write ``data`` (one byte at a time if ``slowly``); the bytes written."""
                if not slowly:
                    self.wfile.write(data)
                    self.wfile.flush()
                    return len(data)
                until = time.monotonic() + receiver.trickle_for
                for i in range(len(data)):
                    if time.monotonic() > until:
                        self.close_connection = True
                        return i
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(receiver.trickle_every)
                return len(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:  # the handshake is made in the handler's thread, on first read
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.base = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str = "/hook") -> str:
        return self.base + path

    def to(self, path: str) -> list[Seen]:
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
