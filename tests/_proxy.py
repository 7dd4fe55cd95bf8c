"""A real forward HTTP proxy on 127.0.0.1 for the outbox tests: it forwards plain HTTP
requests (absolute-form) to their origin and counts them, answers ``CONNECT`` (a tunnel),
can ask for credentials, and can trickle its answers."""

from __future__ import annotations

import http.client
import http.server
import select
import socket
import threading
import time
from urllib.parse import urlsplit

import attrs

#: Headers a proxy does not pass on (hop-by-hop, and its own).
_HOP = {"proxy-authorization", "proxy-connection", "connection", "keep-alive", "te", "trailer", "upgrade"}


@attrs.frozen
class Proxied:
    method: str
    target: str  # the absolute URL (or host:port for CONNECT) as the client sent it
    proxy_authorization: str | None


class Proxy:
    """``requests`` lists what came in, forwarded or not.  ``credentials`` (the whole
    ``Proxy-Authorization`` value) makes any other request a 407 whose reason phrase
    echoes what was sent, as a careless proxy might.  ``trickle`` sends each answer's
    status line and headers one byte every ``trickle_every`` seconds."""

    def __init__(self) -> None:
        self.requests: list[Proxied] = []
        self.lock = threading.Lock()
        self.credentials: str | None = None
        self.trickle = False
        self.trickle_every = 0.2
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _seen(self) -> bool:
                """Record the request; whether it may pass (else a 407 was sent)."""
                sent = self.headers.get("Proxy-Authorization")
                with proxy.lock:
                    proxy.requests.append(Proxied(self.command, self.path, sent))
                if proxy.credentials is None or sent == proxy.credentials:
                    return True
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer(407, f"Proxy Authentication Required (you sent {sent})", [], b"")
                return False

            def _answer(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
                head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
                head += f"Content-Length: {len(body)}\r\n\r\n"
                self._send(head.encode("latin-1"))
                self.wfile.write(body)
                self.wfile.flush()

            def _send(self, data: bytes) -> None:
                if not proxy.trickle:
                    self.wfile.write(data)
                    self.wfile.flush()
                    return
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(proxy.trickle_every)

            def _forward(self) -> None:
                if not self._seen():
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                url = urlsplit(self.path)
                upstream = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=10)
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                upstream.request(self.command, path, body, headers)
                answer = upstream.getresponse()
                content = answer.read()
                passed = [(k, v) for k, v in answer.getheaders() if k.lower() not in _HOP | {"content-length"}]
                upstream.close()
                try:
                    self._answer(answer.status, answer.reason, passed, content)
                except OSError:  # the client hung up (its deadline)
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

            def do_CONNECT(self) -> None:
                if not self._seen():
                    return
                host, _, port = self.path.rpartition(":")
                try:
                    upstream = socket.create_connection((host, int(port)), timeout=10)
                except OSError:
                    self._answer(502, "Bad Gateway", [], b"")
                    return
                try:
                    self._send(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    ends = [self.connection, upstream]
                    while True:
                        ready, _, _ = select.select(ends, [], [], 10)
                        if not ready:
                            break
                        for end in ready:
                            data = end.recv(65536)
                            if not data:
                                return
                            (upstream if end is self.connection else self.connection).sendall(data)
                except OSError:
                    pass
                finally:
                    upstream.close()
                    self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_port}"
        self.url = f"http://{self.address}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
