"""An outbox worker process, plus what its callers share: the feature whose handler
enqueues webhook rows and a loopback HTTP receiver that records idempotency keys.

Used by tests/outbox/test_outbox_workers.py and bench/outbox.py.  As a script::

    python tests/_outbox_worker.py DATABASE_URL [DELIVERY_CONCURRENCY]

builds its own App with :data:`feature` (and the App's ``delivery_concurrency``, if
given), connects and makes its HTTP client, prints ``ready``, waits for a line on stdin
(the caller's start signal, so that every worker starts draining at the same moment),
then calls
``app.run_worker(once=True)`` until no outbox row is due (a row another worker has
claimed is not: its lease runs) and prints
``done <rows this process delivered> <CPU seconds it used since the signal>``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Protocol

import attrs
import sqlalchemy as sa

from kumiko_typed import App, Feature, Ok, User, ok
from kumiko_typed._tables import outbox

feature = Feature("outbox_workers", requires=["webhook.send"])


@attrs.frozen
class Fanout:
    """Enqueue ``count`` webhooks to ``url``, numbered from ``start`` (body ``{"i": n}``)."""

    url: str
    count: int
    start: int = 0


fanout = feature.write_handler(
    "fanout",
    feature.pipeline(Fanout)
    .for_each(
        "i",
        over=lambda c: range(c.payload.count),
        do=lambda b: b.send_webhook(
            url=lambda c: c.payload.url,
            body=lambda c: {"i": c.payload.start + c.scope["i"]},
        ),
    )
    .return_(lambda c: ok(c.payload.count)),
)


def due(app: App) -> int:
    """The pending rows whose next attempt has come (by the App's clock)."""
    with app.engine.connect() as conn:
        query = sa.select(sa.func.count()).select_from(outbox)
        return int(conn.scalar(query.where(outbox.c.status == "pending", outbox.c.next_attempt_at <= app.clock())) or 0)


class LoopbackReceiver:
    """An HTTP/1.1 peer on 127.0.0.1 answering 200 (after ``delay`` seconds: a peer's own
    work, for the benches) and recording, per request, the ``Idempotency-Key`` header and
    the JSON body's ``i``.

    It is infrastructure, not a measured side: one asyncio loop in a thread, connections
    kept alive, parsing only what a webhook sends (request line, headers, a
    ``Content-Length`` body), so that its CPU per request stays small next to a worker's."""

    def __init__(self, delay: float = 0.0, body: bytes = b"") -> None:
        self.body = body
        self.lock = threading.Lock()
        self.keys: list[str] = []
        self.numbers: list[int] = []
        self.delay = delay
        self.open: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/hook"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.open[task] = writer
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                headers = {}
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length") or 0))
                with self.lock:
                    self.keys.append(headers.get("idempotency-key", ""))
                    self.numbers.append(json.loads(body)["i"])
                if self.delay:
                    await asyncio.sleep(self.delay)
                close = headers.get("connection", "").lower() == "close"
                length = b"Content-Length: %d\r\n" % len(self.body)
                end = b"Connection: close\r\n\r\n" if close else b"\r\n"
                writer.write(b"HTTP/1.1 200 OK\r\n" + length + end + self.body)
                await writer.drain()
                if close:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client closed the connection (or was killed)
        finally:
            writer.close()
            del self.open[task]

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.keys)

    def __enter__(self) -> LoopbackReceiver:
        self.thread.start()
        return self

    async def _close(self) -> None:
        self.server.close()
        serving = list(self.open.items())
        for _, writer in serving:  # its reader ends: the connection's task returns
            writer.transport.abort()
        await asyncio.gather(*(task for task, _ in serving), return_exceptions=True)

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()


class Meter(Protocol):
    """What :meth:`WorkerProcesses.timed` needs of a bench's CPU meter."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


class WorkerProcesses:
    """Worker processes (this script) on one database, each connected and waiting for
    :meth:`go`; any still running when the block ends is killed."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self, url: str, count: int, command: Sequence[str] = (), args: Sequence[str] = ()
    ) -> list[subprocess.Popen[str]]:
        """Start ``count`` workers (this script, or ``command``, followed by ``url`` and
        ``args``: any script that prints ``ready``, then waits for ``go`` on its stdin) and
        wait until each is ready."""
        argv = [*(command or (sys.executable, __file__)), url, *args]
        procs = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(count)]
        self.procs.extend(procs)
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", f"worker {proc.pid} did not start (exit {proc.poll()})"
        return procs

    def go(self) -> None:
        """Let every worker start draining at once."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

    @staticmethod
    def done(procs: list[subprocess.Popen[str]]) -> list[str]:
        """Read each worker's output up to its ``done`` line (its work is over; it may still
        be exiting): those lines.  A bench stops its clock here, not at the exits."""
        lines: list[str] = []
        for proc in procs:
            assert proc.stdout is not None
            while (line := proc.stdout.readline()) and not line.startswith("done "):
                pass
            assert line, f"worker {proc.pid} ended before it was done (exit {proc.wait()})"
            lines.append(line)
        return lines

    def timed(self, procs: list[subprocess.Popen[str]], meter: Meter) -> tuple[list[str], float]:
        """Let the workers go and time them to their ``done`` lines (``meter`` started and
        stopped around the same span), then wait for their exits: the ``done`` lines and
        the seconds.  What every bench over these workers measures, in one place."""
        meter.start()
        started = time.perf_counter()
        self.go()
        outputs = self.done(procs)
        elapsed = time.perf_counter() - started
        meter.stop()
        self.wait(procs, timeout=600)
        return outputs, elapsed

    @staticmethod
    def wait(procs: list[subprocess.Popen[str]], timeout: float = 180) -> list[str]:
        """Wait for ``procs`` to end, each successfully; what each printed."""
        outputs: list[str] = []
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, f"worker {proc.pid} exited {proc.returncode}"
            outputs.append(out)
        return outputs

    @classmethod
    def finish(cls, procs: list[subprocess.Popen[str]], timeout: float = 180) -> list[int]:
        """Wait for ``procs`` to drain the table; the rows each one delivered."""
        delivered: list[int] = []
        for out in cls.wait(procs, timeout):
            (last,) = [line for line in out.splitlines() if line.startswith("done ")]
            delivered.append(int(last.split()[1]))
        return delivered

    def __enter__(self) -> WorkerProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def enqueue(app: App, url: str, rows: int, per_dispatch: int = 100) -> None:
    """Dispatch :data:`fanout` until ``rows`` webhook rows are committed."""
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset())
    for start in range(0, rows, per_dispatch):
        result = app.dispatch(fanout, Fanout(url, min(per_dispatch, rows - start), start), user=user)
        if not isinstance(result, Ok):
            raise RuntimeError(f"enqueue failed: {result}")


def main(argv: list[str]) -> int:
    options = {"delivery_concurrency": int(argv[2])} if len(argv) > 2 else {}
    app = App([feature], database_url=argv[1], **options)
    try:
        # Start-up before the start signal: connect, and make the App's HTTP client, which
        # its first delivery would (httpx builds a TLS context: 20 to 40 ms of CPU).  A
        # process pays it once; in a drain of under a second, 4 processes' start-up on 2
        # cores was counted as delivery time.
        due(app)
        app._http_client()
        print("ready", flush=True)
        sys.stdin.readline()
        cpu = time.process_time()
        delivered = 0
        while True:
            delivered += app.run_worker(once=True)["sent"]
            if not due(app):
                break
            time.sleep(0.02)  # rows another worker is claiming
        print(f"done {delivered} {time.process_time() - cpu:.4f}", flush=True)
    finally:
        app.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
