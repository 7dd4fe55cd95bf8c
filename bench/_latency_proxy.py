"""A TCP proxy on 127.0.0.1 that delivers every chunk it reads ``delay`` seconds later,
in each direction, in order: a network round trip on loopback, for benches that must
show what a round trip per statement costs (bench/write_scaling.py).

It runs an asyncio loop in a daemon thread of the bench's own process; the bench's
main thread only waits for its worker processes while the proxy carries their traffic.
A delay shorter than the loop's timer granularity (about a millisecond with epoll) is
rounded up, which the bench measures and prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType


class LatencyProxy:
    """Listen on 127.0.0.1 (a free port, :attr:`port`) and forward to ``target``."""

    def __init__(self, target_host: str, target_port: int, delay: float = 0.001) -> None:
        self.target = (target_host, target_port)
        self.delay = delay
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="latency-proxy", daemon=True)

    def __enter__(self) -> LatencyProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the latency proxy did not start")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.close()

    async def _connection(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            self._pipe(client_reader, server_writer),
            self._pipe(server_reader, client_writer),
            return_exceptions=True,
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy ``reader`` to ``writer``, each chunk ``delay`` after it arrived."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def pump_in() -> None:
            with contextlib.suppress(OSError):
                while data := await reader.read(65536):
                    queue.put_nowait((loop.time() + self.delay, data))
            queue.put_nowait((loop.time() + self.delay, b""))

        async def pump_out() -> None:
            try:
                while True:
                    due, data = await queue.get()
                    if (wait := due - loop.time()) > 0:
                        await asyncio.sleep(wait)
                    if not data:
                        break
                    writer.write(data)
                    await writer.drain()
            except OSError:
                pass
            finally:
                writer.close()

        await asyncio.gather(pump_in(), pump_out())
