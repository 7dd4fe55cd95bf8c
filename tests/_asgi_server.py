"""A real HTTP server for the adapter's tests: uvicorn on 127.0.0.1 (a free port) in a
thread of the test process, with an httpx client on its base URL.  Its HTTP protocol is
h11, named: uvicorn's "auto" picks httptools where it is installed (uvicorn[standard]),
which reads a request target in absolute form as its path and refuses a method it does not
know, so two of the suite's answers depended on what else the environment held."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import uvicorn


class Served:
    def __init__(self, asgi: Any) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(asgi, log_level="warning", lifespan="off", http="h11"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        self.base = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(base_url=self.base, timeout=30)

    def close(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(10)
