"""A worker process for tests/workflows/test_port_hotel.py.

    python tests/_hotel_worker.py DATABASE_URL once|crash N

``once`` runs worker passes until one does nothing and prints their counts as JSON.
``crash`` runs passes that die (``os._exit(137)``, no clean-up, the transaction open)
right after the database accepted the N-th ``guest-checked-out`` event of the process.
"""

from __future__ import annotations

import sys

from _worker_process import die_after_event, drain

from examples.ports.hotel import VALUE_TYPES, hotel
from kumiko_typed import App
from kumiko_typed.testing import MemoryMail


def main(url: str, mode: str, after: str = "0") -> None:
    app = App([hotel], database_url=url, value_types=VALUE_TYPES, mail=MemoryMail())
    if mode == "crash":
        die_after_event(app, "guest-checked-out", int(after))
    drain(app)


if __name__ == "__main__":
    main(*sys.argv[1:4])
