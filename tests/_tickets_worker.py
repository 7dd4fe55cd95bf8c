"""A worker process for tests/workflows/test_port_tickets.py.

    python tests/_tickets_worker.py DATABASE_URL once|crash
    python tests/_tickets_worker.py DATABASE_URL buy TENANT_ID SHOW_ID SEAT

``once`` runs worker passes until one does nothing and prints their counts as JSON.
``crash`` runs passes that die (``os._exit(137)``, no clean-up, the transaction open)
right after the database accepted a ``seats-sold`` event.
``buy`` is a buyer of its own (a new user of the tenant): it prints ``ready``, waits for a
line on stdin (so that every buyer starts at once), holds SEAT of the show and prints the
answer as JSON (``{"code": "ok"}`` or the Failure's code and message).
"""

from __future__ import annotations

import json
import sys
import uuid

from _worker_process import die_after_event, drain

from examples.ports.tickets import HoldSeats, hold_seats, tickets
from kumiko_typed import App, Failure, User
from kumiko_typed.testing import MemoryMail


def buy(app: App, tenant: str, show: str, seat: str) -> None:
    user = User(id=uuid.uuid4(), tenant_id=uuid.UUID(tenant))
    print("ready", flush=True)
    sys.stdin.readline()
    answer = app.dispatch(hold_seats, HoldSeats(uuid.UUID(show), "buyer@example.com", [int(seat)]), user=user)
    seen = {"code": answer.code, "message": answer.message} if isinstance(answer, Failure) else {"code": "ok"}
    print(json.dumps(seen), flush=True)
    app.dispose()


def main(url: str, mode: str, *args: str) -> None:
    app = App([tickets], database_url=url, mail=MemoryMail())
    if mode == "buy":
        buy(app, *args)
        return
    if mode == "crash":
        die_after_event(app, "seats-sold")
    drain(app)


if __name__ == "__main__":
    main(*sys.argv[1:])
