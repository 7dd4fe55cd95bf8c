"""A bank customer for tests/pipeline/test_port_bank.py, as a process of its own.

    python tests/_bank_racer.py DATABASE_URL MODE OWNER_ID TENANT_ID A_ID B_ID

prints ``ready``, waits for a line on stdin (so that every racer starts at once), then
``withdraw``s 10.00 from account A, or ``transfer``s 10.00 from A to B (``cross``: from B
to A), one call at a time, until the bank refuses for want of funds (or 300 calls); prints
``result <json>``: how many calls ended with each code, and the sum it got out.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from decimal import Decimal

from examples.ports.bank import Transfer, Withdraw, bank, transfer, withdraw
from kumiko_typed import App, Ok, User

AMOUNT = Decimal("10.00")


def main(url: str, mode: str, owner: str, tenant: str, a: str, b: str) -> None:
    app = App([bank], database_url=url)
    user = User(id=uuid.UUID(owner), tenant_id=uuid.UUID(tenant))
    first, second = (uuid.UUID(b), uuid.UUID(a)) if mode == "cross" else (uuid.UUID(a), uuid.UUID(b))
    codes: Counter[str] = Counter()
    moved = Decimal(0)
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(300):
        if mode == "withdraw":
            code = _code(app.dispatch(withdraw, Withdraw(first, AMOUNT), user=user))
        else:
            code = _code(app.dispatch(transfer, Transfer(first, second, AMOUNT), user=user))
        codes[code] += 1
        if code == "ok":
            moved += AMOUNT
        if code == "unprocessable" or (mode != "withdraw" and codes["ok"] + codes["version_conflict"] >= 12):
            break
    print("result", json.dumps({"codes": codes, "moved": str(moved)}), flush=True)
    app.dispose()


def _code(result: object) -> str:
    return "ok" if isinstance(result, Ok) else str(getattr(result, "code", "?"))


if __name__ == "__main__":
    main(*sys.argv[1:7])
