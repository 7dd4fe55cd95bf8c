"""A real HTTP peer for the outbox tests: a threaded HTTP/1.1 server on 127.0.0.1 whose
answers the test decides (used through the ``receiver`` fixture in conftest.py)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable

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
    decides each answer (``index`` counts requests to that path from 0); default 200."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.lock = threading.Lock()
        self.respond: Callable[[int, str], tuple[int, dict[str, str]]] = lambda _i, _p: (200, {})
        self.reasons: dict[str, str] = {}  # path -> the reason phrase to answer with
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                items = list(self.headers.items())
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in items}, body, items)
                with receiver.lock:
                    index = sum(1 for r in receiver.requests if r.path == self.path)
                    receiver.requests.append(seen)
                status, headers = receiver.respond(index, self.path)
                self.send_response(status, receiver.reasons.get(self.path))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str = "/hook") -> str:
        return self.base + path

    def to(self, path: str) -> list[Seen]:
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
