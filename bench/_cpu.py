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


def postgres_cpu(server: PostgresServer | None) -> float | None:
    """CPU seconds the server's processes have used so far, the backends that ended
    included (the postmaster reaps them); ``None`` if ``/proc`` cannot say."""
    if server is None or server.data_dir is None:
        return None
    try:
        postmaster = (server.data_dir / "postmaster.pid").read_text().split()[0]
        total = 0
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
                total += int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None
    return total / _TICK


class CpuMeter:
    """CPU seconds of this process and of the PostgreSQL server between ``start`` and
    ``stop``."""

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
        self.postgres = None if after is None or self._postgres is None else after - self._postgres


def worker_cpu(outputs: list[str]) -> float:
    """The CPU seconds the workers reported on their ``done <n> <cpu>`` lines, summed."""
    return sum(float(line.split()[2]) for out in outputs for line in out.splitlines() if line.startswith("done "))
