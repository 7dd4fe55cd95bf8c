"""CPU seconds a worker bench spends, by side: the worker processes (each prints its own
CPU time since the start signal, see ``tests/_outbox_worker.py``), this process (the
loopback receiver; the main thread only waits), and the PostgreSQL server (the
postmaster and its backends, read from ``/proc``; Linux only).

The figures say whether a configuration is waiting on its peer or on the machine: at
``c`` CPU seconds per item, 2 cores cannot do more than ``2 / c`` items per second,
whatever the number of workers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kumiko_typed.testing.postgres import PostgresServer

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def postgres_cpu(server: PostgresServer | None) -> tuple[float, dict[str, float]] | None:
    """CPU seconds the server's processes have used so far, the backends that ended
    included (the postmaster reaps them), and those of each live backend (by pid);
    ``None`` if ``/proc`` cannot say."""
    if server is None or server.data_dir is None:
        return None
    try:
        postmaster = (server.data_dir / "postmaster.pid").read_text().split()[0]
        total = 0
        live: dict[str, float] = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended meanwhile
            if proc.name == postmaster:  # its own time and its reaped children's
                total += sum(int(v) for v in fields[11:15])
            elif fields[1] == postmaster:  # a live backend or auxiliary process
                ticks = int(fields[11]) + int(fields[12])
                total += ticks
                live[proc.name] = ticks / _TICK
    except (OSError, IndexError, ValueError):
        return None
    return total / _TICK, live


class CpuMeter:
    """CPU seconds of this process and of the PostgreSQL server between ``start`` and
    ``stop``.

    A backend that ends in between (a worker process that is done closes its
    connections) is reaped by the postmaster, whose children's time then holds all the
    backend ever used: its start and its work before ``start`` (connecting, a worker's
    warm-up) as well.  That part, read at ``start``, is taken off: counted, it added
    10-20 ms per worker that finished before the last, and so grew with the number of
    workers (0.13 ms per run for 1 worker, 0.47 for 4 in bench/workflows.py)."""

    def __init__(self, server: PostgresServer | None) -> None:
        self.server = server
        self.here = 0.0
        self.postgres: float | None = None

    def start(self) -> None:
        self._here = time.process_time()
        self._postgres = postgres_cpu(self.server)

    def stop(self) -> None:
        self.here = time.process_time() - self._here
        after = postgres_cpu(self.server)
        if after is None or self._postgres is None:
            self.postgres = None
            return
        (before, live), (total, still) = self._postgres, after
        self.postgres = total - before - sum(seconds for pid, seconds in live.items() if pid not in still)


def worker_cpu(outputs: list[str]) -> float:
    """The CPU seconds the workers reported on their ``done <n> <cpu>`` lines, summed."""
    return sum(float(line.split()[2]) for out in outputs for line in out.splitlines() if line.startswith("done "))
