"""A minimal Language Server Protocol client for ``pyright-langserver --stdio``.

JSON-RPC messages with ``Content-Length`` framing over the server's stdin/stdout, as an
editor speaks it.  Requests the server sends us (``workspace/configuration`` and the like)
are answered so that it does not wait; notifications are kept for the caller to read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty, Queue
from typing import Any

#: What an editor with strike-through support announces (CompletionItemTag 1 = Deprecated).
CAPABILITIES: dict[str, Any] = {
    "textDocument": {
        "completion": {
            "completionItem": {
                "tagSupport": {"valueSet": [1]},
                "deprecatedSupport": True,
                "documentationFormat": ["markdown", "plaintext"],
            }
        },
        "hover": {"contentFormat": ["markdown", "plaintext"]},
        "publishDiagnostics": {"tagSupport": {"valueSet": [1, 2]}},
    },
    "workspace": {"configuration": True},
}


class LanguageServer:
    """One running server; use :func:`pyright_langserver` to get one."""

    def __init__(self, process: subprocess.Popen[bytes], timeout: float) -> None:
        self._process = process
        self._timeout = timeout
        self._next_id = 0
        self._responses: dict[int, Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.notifications: Queue[dict[str, Any]] = Queue()
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    def _send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self._process.stdin is not None
        self._process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self._process.stdin.flush()

    def _read_message(self) -> dict[str, Any] | None:
        stream = self._process.stdout
        assert stream is not None
        length = None
        while True:
            header = stream.readline()
            if not header:
                return None
            if header in (b"\r\n", b"\n"):
                break
            name, _, value = header.decode("ascii").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        assert length is not None, "a message without Content-Length"
        message: dict[str, Any] = json.loads(stream.read(length))
        return message

    def _read_loop(self) -> None:
        while (message := self._read_message()) is not None:
            if "id" in message and "method" in message:
                self._send({"id": message["id"], "result": self._answer(message)})
            elif "id" in message:
                with self._lock:
                    waiting = self._responses.get(message["id"])
                if waiting is not None:
                    waiting.put(message)
            else:
                self.notifications.put(message)

    @staticmethod
    def _answer(request: dict[str, Any]) -> object:
        if request["method"] == "workspace/configuration":
            # Analyse against this interpreter, where kumiko_typed is installed.
            python = {"pythonPath": sys.executable}
            items = request["params"]["items"]
            return [python if item.get("section") == "python" else None for item in items]
        return None  # client/registerCapability, window/workDoneProgress/create...

    def request(self, method: str, params: dict[str, Any]) -> Any:
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            answer: Queue[dict[str, Any]] = Queue()
            self._responses[ident] = answer
        self._send({"id": ident, "method": method, "params": params})
        try:
            response = answer.get(timeout=self._timeout)
        except Empty:
            raise AssertionError(f"no answer to {method} within {self._timeout} s") from None
        assert "error" not in response, response
        return response["result"]

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._send({"method": method, "params": params})

    def wait_for(self, method: str, uri: str) -> dict[str, Any]:
        """The next notification ``method`` about ``uri`` (e.g. publishDiagnostics)."""
        while True:
            try:
                message = self.notifications.get(timeout=self._timeout)
            except Empty:
                raise AssertionError(f"no {method} for {uri} within {self._timeout} s") from None
            if message.get("method") == method and message["params"].get("uri") == uri:
                return message

    def open(self, path: Path) -> str:
        uri = path.as_uri()
        document = {"uri": uri, "languageId": "python", "version": 1, "text": path.read_text()}
        self.notify("textDocument/didOpen", {"textDocument": document})
        return uri

    def complete(self, uri: str, line: int, character: int) -> list[dict[str, Any]]:
        """The completion items offered at a (0-based) position."""
        position = {"line": line, "character": character}
        result = self.request("textDocument/completion", {"textDocument": {"uri": uri}, "position": position})
        items: list[dict[str, Any]] = result["items"] if isinstance(result, dict) else result
        return items


@contextmanager
def pyright_langserver(root: Path, timeout: float = 60) -> Iterator[LanguageServer]:
    """Start the language server the ``pyright`` package installs, initialised on ``root``;
    shut it down politely afterwards (and kill its process group if it does not go)."""
    cmd = [sys.executable, "-m", "pyright.langserver", "--stdio"]
    # Its own session: the Python wrapper starts node, and both must end with the test.
    process = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
    )
    server = LanguageServer(process, timeout)
    try:
        server.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": root.as_uri(),
                "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
                "capabilities": CAPABILITIES,
            },
        )
        server.notify("initialized", {})
        yield server
        server.request("shutdown", {})
        server.notify("exit", {})
        process.wait(timeout=60)  # a loaded machine: exiting is not what is tested
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def editing(root: Path, source: str) -> Iterator[tuple[LanguageServer, str, list[dict[str, Any]]]]:
    """``source`` as ``root/pipelines.py``, open in a fresh server: the server, the file's URI
    and the diagnostics pyright published for it."""
    path = root / "pipelines.py"
    path.write_text(source)
    with pyright_langserver(root) as server:
        uri = server.open(path)
        diagnostics = server.wait_for("textDocument/publishDiagnostics", uri)["params"]["diagnostics"]
        yield server, uri, diagnostics
