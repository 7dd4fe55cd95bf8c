"""A worker process for tests/workflows/test_port_library.py.

    python tests/_library_worker.py DATABASE_URL once|crash NOW
    python tests/_library_worker.py DATABASE_URL borrow TENANT_ID MEMBER_ID TITLE_ID

``once`` runs worker passes at the instant NOW (ISO 8601) until one does nothing and prints
their counts as JSON.  ``crash`` runs passes that die (``os._exit(137)``, no clean-up, the
transaction open) right after the database accepted a ``reservation-offered`` event.
``borrow`` is a desk of its own: it prints ``ready``, waits for a line on stdin (so that
every desk starts at once), lends the member a copy of the title and prints the answer as
JSON (``{"code": "ok"}`` or the Failure's code and message).
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import datetime

from _worker_process import die_after_event, drain

from examples.ports.library import Borrow, borrow, library
from kumiko_typed import App, Failure, User
from kumiko_typed.testing import FakeClock, MemoryMail


def lend(app: App, tenant: str, member: str, title: str) -> None:
    desk = User(id=uuid.uuid4(), tenant_id=uuid.UUID(tenant))
    print("ready", flush=True)
    sys.stdin.readline()
    answer = app.dispatch(borrow, Borrow(uuid.UUID(member), uuid.UUID(title)), user=desk)
    seen = {"code": answer.code, "message": answer.message} if isinstance(answer, Failure) else {"code": "ok"}
    print(json.dumps(seen), flush=True)
    app.dispose()


def main(url: str, mode: str, *args: str) -> None:
    if mode == "borrow":
        lend(App([library], database_url=url, mail=MemoryMail()), *args)
        return
    app = App([library], database_url=url, mail=MemoryMail(), clock=FakeClock(datetime.fromisoformat(args[0])))
    if mode == "crash":
        die_after_event(app, "reservation-offered")
    drain(app)


if __name__ == "__main__":
    main(*sys.argv[1:])
