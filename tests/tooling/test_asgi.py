"""The HTTP adapter (issue 15.4, 18.5): kumiko_typed.contrib.asgi served by a real uvicorn on
127.0.0.1 and called with httpx.  The inventory example's handlers on both databases; the
HTTP layer's own answers (no user, a bad header or body, no such path) on SQLite."""

from __future__ import annotations

import enum
import gzip
import importlib
import json
import logging
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import attrs
import jsonschema
import pytest
import sqlalchemy as sa
from _asgi_server import Served
from sqlalchemy.orm import Mapped, mapped_column
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from kumiko_typed import App, Entity, Feature, User, fail, ok
from kumiko_typed._results import HTTP_STATUS
from kumiko_typed.contrib.asgi import asgi_app, endpoints

TENANT = uuid.uuid4()
ADMIN = User(id=uuid.uuid4(), tenant_id=TENANT, roles=frozenset({"Admin"}))
CLERK = User(id=uuid.uuid4(), tenant_id=TENANT, roles=frozenset({"User"}))
ELSEWHERE = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset({"User"}))  # another tenant's clerk
TOKENS = {"admin-token": ADMIN, "clerk-token": CLERK, "elsewhere-token": ELSEWHERE}
AS_ADMIN = {"Authorization": "Bearer admin-token"}
AS_CLERK = {"Authorization": "Bearer clerk-token"}
OTHER_TENANT = {"Authorization": "Bearer elsewhere-token"}


def user_of(request: Request) -> User | None:
    """The application's dependency: a bearer token names the user, anything else is nobody."""
    return TOKENS.get(request.headers.get("authorization", "").removeprefix("Bearer "))


@pytest.fixture
def served(app_on: Callable[..., App]) -> Iterator[Served]:
    """The inventory example over HTTP, on SQLite and on PostgreSQL.  Its ProductRef results
    are value types: an idempotency key stores them."""
    from examples.inventory.handlers import inventory
    from examples.inventory.model import ProductRef

    server = Served(asgi_app(app_on([inventory], value_types=[ProductRef]), user=user_of))
    yield server
    server.close()


def _failure(response: Any, status: int, code: str) -> dict[str, Any]:
    """The body of a refusal: the Failure's public fields and nothing else."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert set(body) == {"code", "message", "details"} and body["code"] == code, body
    assert "Traceback" not in response.text
    return body


def _create(served: Served, sku: str, **kwargs: Any) -> Any:
    kwargs.setdefault("headers", AS_ADMIN)
    return served.http.post("/inventory/product:create", json={"sku": sku, "name": sku.title(), "stock": 10}, **kwargs)


# --- handlers and their failures, both databases ----------------------------------------


def test_handlers_run_and_failures_keep_their_status(served: Served) -> None:
    created = _create(served, "tea")
    assert created.status_code == 200 and created.headers["content-type"] == "application/json"
    product = created.json()["data"]
    assert product == {"id": product["id"], "version": 1} and uuid.UUID(product["id"])

    adjust = "/inventory/product:adjust-stock"
    sale = served.http.post(adjust, json={"id": product["id"], "delta": -3, "reason": "sale"}, headers=AS_CLERK)
    assert (sale.status_code, sale.json()) == (200, {"data": 7})
    # The handler's own refusal is 422 and rolls back: the stock stays 7.
    oversold = served.http.post(adjust, json={"id": product["id"], "delta": -20, "reason": "sale"}, headers=AS_CLERK)
    assert _failure(oversold, 422, "unprocessable")["details"] == {"stock": -13}
    restock = served.http.post(adjust, json={"id": product["id"], "delta": 1, "reason": "found"}, headers=AS_CLERK)
    assert restock.json() == {"data": 8}

    _failure(_create(served, "coffee", headers=AS_CLERK), 403, "access_denied")
    _failure(_create(served, "tea"), 409, "unique_violation")
    missing = {"id": str(uuid.uuid4()), "delta": 1, "reason": "x"}
    _failure(served.http.post(adjust, json=missing, headers=AS_CLERK), 404, "not_found")
    stale = served.http.post("/inventory/product:archive", json={"id": product["id"], "version": 1}, headers=AS_ADMIN)
    _failure(stale, 409, "version_conflict")
    invalid = served.http.post(adjust, json={"id": "tea", "delta": "3", "reason": "x"}, headers=AS_CLERK)
    details = _failure(invalid, 400, "validation_error")["details"]
    assert {d["path"] for d in details} == {"$.id", "$.delta"}


def test_a_request_without_a_user_is_401_and_runs_nothing(served: Served) -> None:
    assert HTTP_STATUS["unauthenticated"] == 401
    for headers in ({}, {"Authorization": "Bearer forged"}):
        refused = _create(served, "tea", headers=headers)
        _failure(refused, 401, "unauthenticated")
        assert refused.headers["www-authenticate"] == "Bearer"
    # Nothing was created: the sku is still free.
    assert _create(served, "tea").status_code == 200


def test_the_idempotency_key_header_is_passed_through(served: Served) -> None:
    key = "order 42: " + "".join(chr(33 + i % 94) for i in range(245))  # printable, spaces, 255 long
    assert len(key) == 255
    first = _create(served, "tea", headers={**AS_ADMIN, "Idempotency-Key": key})
    again = _create(served, "tea", headers={**AS_ADMIN, "Idempotency-Key": key})
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()  # the stored answer: a second run would be a unique_violation
    other = served.http.post(
        "/inventory/product:create",
        json={"sku": "tea", "name": "Green tea", "stock": 1},
        headers={**AS_ADMIN, "Idempotency-Key": key},
    )
    _failure(other, 409, "idempotency_conflict")
    assert _create(served, "mate", headers={**AS_ADMIN, "Idempotency-Key": str(uuid.uuid4())}).status_code == 200


@pytest.mark.parametrize("value", ["", "k" * 256, "tab\there"])
def test_an_unusable_idempotency_key_is_400_naming_the_header(served: Served, value: str) -> None:
    refused = _create(served, "tea", headers={**AS_ADMIN, "Idempotency-Key": value})
    body = _failure(refused, 400, "validation_error")
    assert "Idempotency-Key" in body["message"] and "255" in body["message"]
    assert body["details"] == [{"path": "Idempotency-Key", "message": body["message"]}]
    assert _create(served, "tea").status_code == 200  # the refused request ran nothing


@pytest.mark.parametrize("value", ["caf\u00e9".encode(), "caf\u00e9".encode("latin-1"), "\u20ac5".encode()])
def test_a_non_ascii_idempotency_key_is_400(served: Served, value: bytes) -> None:
    """A header is bytes: UTF-8's é was read as the key 'Ã©', Latin-1's as 'é', and the
    euro sign's UTF-8 held a byte read as a control character: one key typed on two
    clients was two keys.  Before, the first two ran the handler."""
    refused = _create(served, "tea", headers={**AS_ADMIN, "Idempotency-Key": value})
    body = _failure(refused, 400, "validation_error")
    assert body["message"] == (
        "the Idempotency-Key header is refused: an idempotency key sent over HTTP must be ASCII "
        "(a UUID, an order number)"
    )
    assert body["details"] == [{"path": "Idempotency-Key", "message": body["message"]}]


def _counted_feature(ran: list[str]) -> Feature[str]:
    """``count:take`` records each run; ``crash`` raises (with SQL and a secret in its
    text), ``refuse`` is the handler's own 422, anything else waits a little and is Ok."""

    def run(c: Any) -> Any:
        ran.append(c.payload.text)
        if c.payload.text == "crash":
            c.db.execute(sa.text("SELECT secret FROM no_such_table WHERE pw = :pw"), {"pw": "hunter2"})
        time.sleep(0.2)  # long enough for concurrent requests to meet on the key
        return ok({"run": len(ran), "by": str(c.user.id)})

    f = Feature("count")
    refuse = f.pipeline(Plain).guard(
        lambda c: c.payload.text != "refuse",
        otherwise=lambda c: fail("unprocessable", "refused", {"run": ran.append("refuse") or len(ran)}),
    )
    f.write_handler("take", refuse.return_(run))
    return f


def test_a_retried_request_runs_once_and_answers_alike(
    app_on: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    """docs/http.md, Retries: concurrent requests with one key run the handler once and all
    answer its result; a handler's own Failure is stored and answered again with its status;
    an exception is not, and the retry runs; another tenant's key is another request."""
    ran: list[str] = []
    server = Served(asgi_app(app_on([_counted_feature(ran)]), user=user_of))
    keyed = {**AS_CLERK, "Idempotency-Key": "order 7"}
    try:
        with ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(lambda _: server.http.post("/count/take", json={"text": "tea"}, headers=keyed), range(4))
            )
        assert {(a.status_code, a.text) for a in answers} == {(200, answers[0].text)}
        assert ran == ["tea"] and answers[0].json()["data"] == {"run": 1, "by": str(CLERK.id)}
        again = server.http.post(
            "/count/take", json={"text": "tea"}, headers={**AS_ADMIN, "Idempotency-Key": "order 7"}
        )
        assert again.json() == answers[0].json()  # any user of the tenant repeats its request
        elsewhere = server.http.post("/count/take", json={"text": "tea"}, headers={**keyed, **OTHER_TENANT})
        assert elsewhere.json()["data"]["run"] == 2

        refused = [
            server.http.post("/count/take", json={"text": "refuse"}, headers={**AS_CLERK, "Idempotency-Key": "r"})
        ]
        refused.append(
            server.http.post("/count/take", json={"text": "refuse"}, headers={**AS_CLERK, "Idempotency-Key": "r"})
        )
        assert [_failure(r, 422, "unprocessable")["details"] for r in refused] == [{"run": 3}, {"run": 3}]

        crashed = {**AS_CLERK, "Idempotency-Key": "c"}
        with caplog.at_level(logging.ERROR, logger="kumiko_typed"):
            first = server.http.post("/count/take", json={"text": "crash"}, headers=crashed)
        body = _failure(first, 500, "internal_error")
        assert body["message"].startswith("step 1 return raised ") and body["details"]["error_id"] in body["message"]
        for secret in ("hunter2", "SELECT", "no_such_table"):
            assert secret not in first.text
        [logged] = [r for r in caplog.records if body["details"]["error_id"] in r.getMessage()]
        assert logged.name.startswith("kumiko_typed") and logged.exc_info is not None
        retried = server.http.post("/count/take", json={"text": "crash"}, headers=crashed)
        _failure(retried, 500, "internal_error")
        assert ran[-2:] == ["crash", "crash"]  # the exception was not stored: the retry ran
    finally:
        server.close()


def test_requests_waiting_on_a_key_whose_first_run_crashed_run_it_once_more(app_on: Callable[..., App]) -> None:
    """docs/operations.md, Idempotent dispatch: concurrent requests wait on the first one's
    key; when it rolls back (an exception is never stored) the next one claims it and runs,
    and the last answers that run's stored result."""
    ran: list[int] = []

    def run(c: Any) -> Any:
        ran.append(1)
        time.sleep(0.3)  # the others arrive while this one holds the key
        if len(ran) == 1:
            raise RuntimeError("the first run crashes")
        return ok(len(ran))

    f = Feature("crashy")
    f.write_handler("take", f.pipeline(Plain).return_(run))
    server = Served(asgi_app(app_on([f]), user=user_of))

    def post(i: int) -> Any:
        time.sleep(i * 0.05)
        return server.http.post("/crashy/take", json={"text": "x"}, headers={**AS_CLERK, "Idempotency-Key": "k"})

    try:
        with ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(post, range(3)))
    finally:
        server.close()
    assert sorted(a.status_code for a in answers) == [200, 200, 500]
    assert [a.json() for a in answers if a.status_code == 200] == [{"data": 2}] * 2 and ran == [1, 1]


def test_the_checks_run_in_the_documented_order(make_app: Callable[..., App]) -> None:
    """docs/http.md, Answers: user, Idempotency-Key, Content-Type, Content-Encoding, size,
    JSON — the first refusal answers, whatever else is wrong with the request."""
    from examples.inventory.handlers import inventory

    server = Served(asgi_app(make_app([inventory]), user=user_of, max_body=10))
    path = "/inventory/product:create"
    bad = {"Idempotency-Key": "", "Content-Type": "text/plain", "Content-Encoding": "gzip"}
    json_type = {"Content-Type": "application/json"}
    gzipped = {**json_type, "Content-Encoding": "gzip"}
    oversized = b"[" * 11
    try:
        answers = [
            (server.http.post(path, content=oversized, headers=bad), 401),
            (server.http.post(path, content=oversized, headers={**AS_ADMIN, **bad}), 400),
            (server.http.post(path, content=oversized, headers={**AS_ADMIN, **bad, "Idempotency-Key": "k"}), 400),
            (server.http.post(path, content=oversized, headers={**AS_ADMIN, **gzipped}), 400),
            (server.http.post(path, content=oversized, headers={**AS_ADMIN, **json_type}), 413),
            (server.http.post(path, content=b"[" * 10, headers={**AS_ADMIN, **json_type}), 400),
        ]
    finally:
        server.close()
    assert [a.status_code for a, _ in answers] == [status for _, status in answers]
    assert [a.json()["details"][0]["path"] for a, _ in (answers[1], answers[2], answers[3], answers[5])] == [
        "Idempotency-Key",
        "Content-Type",
        "Content-Encoding",
        "$",
    ]
    assert "connection" not in answers[4][0].headers  # the rest of the body was read and dropped


def test_a_key_loses_the_spaces_at_its_ends_as_http_drops_them(served: Served) -> None:
    """docs/http.md, Retries: \" k \" is the key \"k\"."""
    host, port = served.base.removeprefix("http://").split(":")
    body = b'{"sku": "tea", "name": "Tea", "stock": 1}'
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /inventory/product:create HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-token\r\n"
            b"Content-Type: application/json\r\nIdempotency-Key:   k  \r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    other = _create(served, "mate", headers={**AS_ADMIN, "Idempotency-Key": "k"})
    assert _failure(other, 409, "idempotency_conflict")["details"]["key"] == "k"


def test_a_name_with_reserved_characters_is_sent_percent_encoded(make_app: Callable[..., App]) -> None:
    """docs/http.md, Routes: a client percent-encodes a name with spaces or other reserved
    characters; the path and its schema path are that name."""
    f = Feature("names")
    for name in ("place order", "café", "what?#"):
        f.write_handler(name, f.pipeline(Plain).return_(lambda c, n=name: ok(n)))
    server = Served(asgi_app(make_app([f]), user=user_of))
    try:
        for encoded, name in (("place%20order", "place order"), ("caf%C3%A9", "café"), ("what%3F%23", "what?#")):
            answer = server.http.post(f"/names/{encoded}", json={"text": "x"}, headers=AS_CLERK)
            assert answer.json() == {"data": name}
            assert server.http.get(f"/names/{encoded}/schema").json()["title"] == "Plain"
    finally:
        server.close()


# --- the HTTP layer's own answers (SQLite) --------------------------------------------------


@pytest.fixture
def inventory_served(make_app: Callable[..., App]) -> Iterator[Served]:
    from examples.inventory.handlers import inventory

    server = Served(asgi_app(make_app([inventory]), user=user_of))
    yield server
    server.close()


def test_a_body_that_is_not_a_json_object_is_400(inventory_served: Served) -> None:
    path = "/inventory/product:create"
    json_type = {**AS_ADMIN, "Content-Type": "application/json"}
    cases = {
        b'{"sku": "tea",': "the body is not JSON: ",
        # Said as the client's fix: the parser's "Expecting value: line 1 column 1 (char 0)"
        # named none, and its "'utf-8' codec can't decode byte 0xff" no encoding to send.
        b"": "the body is empty: send the payload as a JSON object ({} for one without fields)",
        b" \r\n": "the body is empty: ",
        b'{"sku": "\xff"}': "the body is not UTF-8 (at byte 9): send JSON in UTF-8, whatever a charset says",
        b"[" * 100_000 + b"]" * 100_000: "the body is nested too deeply",
        # Valid JSON, but more digits than Python reads: the client is told what to send
        # (it was told the body was not JSON, and to call sys.set_int_max_str_digits()).
        b'{"sku": "t", "name": "T", "stock": -' + b"1" * 5000 + b"}": (
            "the body holds an integer of 5000 digits, more than the 4300 read as a number: send it as a decimal string"
        ),
    }
    for body, message in cases.items():
        refused = inventory_served.http.post(path, content=body, headers=json_type)
        details = _failure(refused, 400, "validation_error")["details"]
        assert details[0]["path"] == "$" and details[0]["message"].startswith(message), details
    listed = inventory_served.http.post(path, json=[1, 2], headers=AS_ADMIN)
    assert _failure(listed, 400, "validation_error")["details"] == [
        {"path": "$", "message": "expected a JSON object, got array"}
    ]
    as_text = inventory_served.http.post(path, content=b'{"sku": "tea", "name": "Tea"}', headers=AS_ADMIN)
    details = _failure(as_text, 400, "validation_error")["details"]
    assert details == [{"path": "Content-Type", "message": "the Content-Type header must be application/json"}]
    # Two Content-Type headers: a proxy that reads the second sees a text body.
    twice = [*AS_ADMIN.items(), ("Content-Type", "application/json"), ("Content-Type", "text/plain")]
    details = _failure(
        inventory_served.http.post(path, content=b'{"sku": "t", "name": "T"}', headers=twice), 400, "validation_error"
    )["details"]
    assert details == [{"path": "Content-Type", "message": "send one Content-Type header, not several"}]
    with_charset = {**AS_ADMIN, "Content-Type": "application/json; charset=utf-8"}
    assert (
        inventory_served.http.post(path, content=b'{"sku": "t", "name": "T"}', headers=with_charset).status_code == 200
    )


def test_only_served_paths_and_methods_answer(inventory_served: Served) -> None:
    http = inventory_served.http
    for path in ("/", "/inventory", "/inventory/product:nope", "/nope/product:create", "/inventory/product:create/x"):
        _failure(http.post(path, json={}, headers=AS_ADMIN), 404, "not_found")
    wrong = http.get("/inventory/product:create", headers=AS_ADMIN)
    assert (wrong.status_code, wrong.headers["allow"], wrong.json()["code"]) == (405, "POST", "method_not_allowed")
    assert set(wrong.json()) == {"code", "message", "details"}
    posted = http.post("/inventory/product:create/schema", json={})
    assert (posted.status_code, posted.headers["allow"]) == (405, "GET, HEAD")
    for method in ("OPTIONS", "PUT", "DELETE", "PATCH", "BREW"):
        for path, allow in (("/inventory/product:create", "POST"), ("/inventory/product:create/schema", "GET, HEAD")):
            answer = http.request(method, path, headers=AS_ADMIN)
            assert (answer.status_code, answer.headers["allow"], answer.json()["code"]) == (
                405,
                allow,
                "method_not_allowed",
            )
    # A query string is no part of the route: the handler runs on the body alone.
    queried = http.post("/inventory/product:create?sku=mate", json={"sku": "tea", "name": "Tea"}, headers=AS_ADMIN)
    assert queried.status_code == 200 and _create(inventory_served, "tea").status_code == 409


def test_a_request_target_that_is_no_path_is_a_json_404(inventory_served: Served) -> None:
    """Before: Starlette's plain-text "Not Found" (docs/http.md: every answer is JSON) for a
    server-wide ``OPTIONS *`` and for a target in absolute form, which uvicorn passes on as
    the path."""
    host, port = inventory_served.base.removeprefix("http://").split(":")
    for target in ("*", f"http://{host}:{port}/inventory/product:create"):
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(f"OPTIONS {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 404 ") and b"content-type: application/json" in head.lower(), answer
        assert json.loads(body)["code"] == "not_found"


def test_a_path_with_an_encoded_slash_is_not_served(inventory_served: Served) -> None:
    """Before: uvicorn decoded ``%2F`` into the path and ``/inventory%2Fproduct:create`` ran
    the handler, past a proxy or firewall rule on ``/inventory/`` that reads the path as
    sent.  No served name holds a "/", so such a path names nothing."""
    host, port = inventory_served.base.removeprefix("http://").split(":")
    body = b'{"sku": "tea", "name": "Tea"}'
    for target in ("/inventory%2Fproduct:create", "/inventory%2fproduct:create/schema"):
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                f"POST {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-token\r\n".encode()
                + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 404 "), answer
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["code"] == "not_found"
    assert _create(inventory_served, "tea").status_code == 200  # nothing ran: the sku is free


def test_a_schema_answers_head_as_http_asks_of_a_get(inventory_served: Served) -> None:
    """Before: 405 (HTTP has a server answer HEAD wherever it answers GET; a link
    checker or a cache asks HEAD first)."""
    got = inventory_served.http.get("/inventory/product:create/schema")
    head = inventory_served.http.head("/inventory/product:create/schema")
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-type"] == got.headers["content-type"] == "application/schema+json"
    assert head.headers["content-length"] == got.headers["content-length"] == str(len(got.content))
    # A handler's path answers POST only: a HEAD of it would be a GET, which it has not.
    assert inventory_served.http.head("/inventory/product:create").status_code == 405


def test_endpoints_list_every_write_and_query_handler(inventory_app: App) -> None:
    served = endpoints(inventory_app)
    assert {e.handler: e.kind for e in served} == {
        **dict.fromkeys(inventory_app.handlers, "write"),
        **dict.fromkeys(inventory_app.queries, "query"),
    }
    assert "inventory:report:low-stock" in inventory_app.queries
    everything = [*inventory_app.handlers.values(), *inventory_app.queries.values()]
    assert {e.path for e in served} == {f"/inventory/{h.local_name}" for h in everything}
    assert all(e.schema_path == e.path + "/schema" for e in served)


def test_a_query_is_posted_and_takes_no_idempotency_key(served: Served) -> None:
    http = served.http
    product = _create(served, "q1").json()["data"]
    sale = http.post(
        "/inventory/product:adjust-stock", json={"id": product["id"], "delta": -9, "reason": "sale"}, headers=AS_CLERK
    )
    assert sale.json() == {"data": 1}
    report = http.post("/inventory/report:low-stock", json={}, headers=AS_CLERK)
    assert (report.status_code, report.json()) == (200, {"data": [{"sku": "q1", "stock": 1}]})
    # The same path as a write handler's: GET is the schema's, not the query's.
    assert http.get("/inventory/report:low-stock", headers=AS_CLERK).status_code == 405
    keyed = http.post("/inventory/report:low-stock", json={}, headers={**AS_CLERK, "Idempotency-Key": "k"})
    body = _failure(keyed, 400, "validation_error")
    assert body["message"] == "a query takes no Idempotency-Key header: it changes nothing, so repeat it freely"
    assert http.get("/inventory/report:low-stock/schema").status_code == 200


def test_a_name_that_is_not_one_path_segment_is_refused(make_app: Callable[..., App]) -> None:
    f = Feature("shop")
    f.write_handler("orders/place", f.pipeline(Plain).return_(lambda c: ok(1)))
    with pytest.raises(ValueError, match=r"'shop:orders/place' cannot be served"):
        endpoints(make_app([f]))


# --- the user dependency ------------------------------------------------------------------


@attrs.frozen
class Plain:
    text: str


class Colour(enum.Enum):
    RED = "red"


@attrs.frozen
class Rich:
    at: datetime
    price: Decimal
    colour: Colour
    tags: frozenset[str]
    ref: uuid.UUID


def _echo_feature() -> Feature[str]:
    f = Feature("echo")
    f.write_handler("plain", f.pipeline(Plain).return_(lambda c: ok(c.payload.text)))
    f.write_handler(
        "rich",
        f.pipeline(Plain).return_(
            lambda c: ok(
                Rich(
                    datetime(2026, 1, 2, 3, 4, tzinfo=UTC),
                    Decimal("1.50"),
                    Colour.RED,
                    frozenset({"a"}),
                    uuid.UUID(int=7),
                )
            )
        ),
    )
    f.write_handler("opaque", f.pipeline(Plain).return_(lambda c: ok(object())))
    return f


def test_an_async_dependency_and_a_failing_one(make_app: Callable[..., App], caplog: pytest.LogCaptureFixture) -> None:
    app = make_app([_echo_feature()])

    async def async_user(request: Request) -> User | None:
        return user_of(request)

    def broken(request: Request) -> User | None:
        raise RuntimeError("token store secret=hunter2 is down")

    good = Served(asgi_app(app, user=async_user, www_authenticate='Session realm="shop"'))
    bad = Served(asgi_app(app, user=broken))
    try:
        answer = good.http.post("/echo/plain", json={"text": "hi"}, headers=AS_CLERK)
        assert answer.json() == {"data": "hi"}
        nobody = good.http.post("/echo/plain", json={"text": "hi"})
        _failure(nobody, 401, "unauthenticated")
        assert nobody.headers["www-authenticate"] == 'Session realm="shop"'
        with caplog.at_level(logging.ERROR, logger="kumiko_typed.asgi"):
            crashed = bad.http.post("/echo/plain", json={"text": "hi"}, headers=AS_CLERK)
        body = _failure(crashed, 500, "internal_error")
        assert "hunter2" not in crashed.text and body["details"]["error_id"] in body["message"]
        [record] = [r for r in caplog.records if r.name == "kumiko_typed.asgi"]
        assert body["details"]["error_id"] in record.getMessage() and record.exc_info is not None
    finally:
        good.close()
        bad.close()


def test_a_body_over_the_limit_is_413_and_runs_nothing(make_app: Callable[..., App]) -> None:
    ran: list[str] = []
    f = _big_feature(ran)
    limit = 100
    server = Served(asgi_app(make_app([f]), user=user_of, max_body=limit))
    default = Served(asgi_app(make_app([f]), user=user_of))
    headers = {**AS_CLERK, "Content-Type": "application/json"}
    fits = b'{"text": "' + b"x" * (limit - 12) + b'"}'
    assert len(fits) == limit
    try:
        assert server.http.post("/big/take", content=fits, headers=headers).json() == {"data": 1}
        over = b'{"text": "' + b"x" * (limit - 11) + b'"}'
        declared = server.http.post("/big/take", content=over, headers=headers)
        assert _failure(declared, 413, "payload_too_large")["message"] == (
            f"the body is larger than {limit} bytes; send a smaller payload"
        )

        def chunked() -> Iterator[bytes]:  # no Content-Length: counted while it is read
            yield b'{"text": "'
            for _ in range(50):
                yield b"x" * 10
            yield b'"}'

        _failure(server.http.post("/big/take", content=chunked(), headers=headers), 413, "payload_too_large")
        huge = b'{"text": "' + b"x" * (2 * 1024 * 1024) + b'"}'
        _failure(default.http.post("/big/take", content=huge, headers=headers), 413, "payload_too_large")
        assert ran == ["x" * (limit - 12)]
        assert default.http.post("/big/take", content=fits, headers=headers).json() == {"data": 2}
    finally:
        server.close()
        default.close()
    for wrong in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_body must be a positive number of bytes"):
            asgi_app(make_app([_echo_feature()]), user=user_of, max_body=wrong)  # type: ignore[arg-type]


def test_the_features_for_the_app_or_a_user_that_is_no_function_are_refused_at_once(
    make_app: Callable[..., App],
) -> None:
    """Were an AttributeError ("'list' object has no attribute 'handlers'") and a 500 at
    every request (a str called on the request)."""
    feature = _echo_feature()
    with pytest.raises(TypeError) as raised:
        asgi_app([feature], user=user_of)  # type: ignore[arg-type]
    assert str(raised.value) == "asgi_app takes the App (App([features], database_url=...)), not list"
    with pytest.raises(TypeError) as raised:
        asgi_app(make_app([feature]), user="ada-token")  # type: ignore[arg-type]
    assert str(raised.value) == "user must be a function of the request returning its User or None, not str"


def _raw_exchange(server: Served, head: bytes, body: bytes = b"") -> bytes:
    """Send ``head`` (and ``body``) on a fresh socket and read until the server closes."""
    host, port = server.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def _big_feature(ran: list[str]) -> Feature:
    f = Feature("big")
    f.write_handler(
        "take", f.pipeline(Plain).compute("n", lambda c: ran.append(c.payload.text)).return_(lambda c: ok(len(ran)))
    )
    return f


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_refused_body_is_read_to_its_end_and_the_connection_carries_the_next_request(
    make_app: Callable[..., App], chunked: bool
) -> None:
    """Left unread, the rest of a refused body makes the server's close a reset, which can
    destroy the 413 before the client reads it (seen in CI); read and dropped, it cannot,
    and the connection stays open for the next request."""
    import http.client

    ran: list[str] = []
    limit = 100
    server = Served(asgi_app(make_app([_big_feature(ran)]), user=user_of, max_body=limit))
    host, port = server.base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {**AS_CLERK, "Content-Type": "application/json"}
    over = b'{"text": "' + b"x" * (3 * limit) + b'"}'
    try:
        body: Any = iter([over[:40], over[40:250], over[250:]]) if chunked else over
        connection.request("POST", "/big/take", body=body, headers=headers, encode_chunked=chunked)
        refused = connection.getresponse()
        assert refused.status == 413 and refused.getheader("connection") is None
        assert json.loads(refused.read())["code"] == "payload_too_large"
        sock = connection.sock
        fits = b'{"text": "small"}'
        connection.request("POST", "/big/take", body=fits, headers=headers)
        taken = connection.getresponse()
        assert connection.sock is sock, "the 413 closed the connection"
        assert (taken.status, json.loads(taken.read())) == (200, {"data": 1})
        assert ran == ["small"]
    finally:
        connection.close()
        server.close()


def test_every_answer_before_the_body_reads_it_first(make_app: Callable[..., App]) -> None:
    """Before: a 401, 400, 404 or 405 went out before the body was read, and a server that
    closed the connection after it (the client sent ``Connection: close``, as urllib does)
    closed on unread bytes, whose reset destroyed the answer (urllib saw a broken pipe for
    some of them, with a body of 900 KB).  Now the body ends before the answer starts; a
    client waiting to be told to continue is answered at once and the connection closed."""
    ran: list[str] = []
    adapter = asgi_app(make_app([_big_feature(ran)]), user=user_of)
    events: list[str] = []

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        async def receiving() -> Any:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                events.append("body ended")
            return message

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                events.append(f"answer {message['status']}")
            await send(message)

        await adapter(scope, receiving, sending)

    server = Served(watched)
    body = b'{"text": "' + b"x" * 100_000 + b'"}'
    json_type = {"Content-Type": "application/json"}
    try:
        for method, path, headers, status in (
            ("POST", "/big/take", json_type, 401),
            ("POST", "/big/take", {**AS_CLERK, **json_type, "Idempotency-Key": ""}, 400),
            ("POST", "/big/take", {**AS_CLERK, "Content-Type": "text/plain"}, 400),
            ("POST", "/big/take", {**AS_CLERK, **json_type, "Content-Encoding": "gzip"}, 400),
            ("POST", "/big/nope", {**AS_CLERK, **json_type}, 404),
            ("PUT", "/big/take", {**AS_CLERK, **json_type}, 405),
            ("POST", "/big/take/schema", {**AS_CLERK, **json_type}, 405),
        ):
            events.clear()
            answer = server.http.request(method, path, content=body, headers={**headers, "Connection": "close"})
            assert (answer.status_code, events) == (status, ["body ended", f"answer {status}"]), (path, headers)
            assert answer.json()["code"] and answer.headers["connection"] == "close"
        # A target that is no path is routed nowhere: Starlette's 404, read first too.
        for target in (b"*", b"http://127.0.0.1/big/nope"):
            events.clear()
            unrouted = _raw_exchange(
                server,
                b"POST " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 20\r\nConnection: close\r\n\r\n",
                b"x" * 20,
            )
            assert unrouted.startswith(b"HTTP/1.1 404 ") and events == ["body ended", "answer 404"], unrouted
        events.clear()
        waiting = _raw_exchange(
            server,
            b"POST /big/take HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 20\r\nExpect: 100-continue\r\n\r\n",
        )
        head = waiting.partition(b"\r\n\r\n")[0]
        assert head.startswith(b"HTTP/1.1 401 ") and b"connection: close" in head.lower(), waiting
        assert events == ["answer 401"] and ran == []
        # A body longer than the 413 drains is left to the server, which keeps the
        # connection (and reads and drops the rest): a 401 says nothing against its size.
        host, port = server.base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"POST /big/take HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n{")
            answer = b""
            while b"}" not in answer:
                answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 401 ") and b"connection: close" not in answer.lower(), answer
        # HTTP/1.0 has no 100 Continue: its client sent the body, which is read first.
        events.clear()
        old = _raw_exchange(
            server,
            b"POST /big/take HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 20\r\n"
            b"Expect: 100-continue\r\n\r\n",
            b"x" * 20,
        )
        assert old.startswith(b"HTTP/1.1 401 ") and events == ["body ended", "answer 401"], old
    finally:
        server.close()


def _answer(sock: socket.socket) -> bytes:
    """One answer read off ``sock``: its head and as many bytes as its Content-Length says."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head = received.partition(b"\r\n\r\n")[0]
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))[15:])
    while len(received.partition(b"\r\n\r\n")[2]) < length:
        received += sock.recv(65536)
    return received


def test_a_body_declared_far_over_the_limit_is_answered_before_it_is_sent(make_app: Callable[..., App]) -> None:
    """Nothing of it is read first: not 10 GB announced, nor a body the client waits to send
    until the server says continue.  The 413 comes, then (the client read it and left, or
    sent nothing) the close."""
    ran: list[str] = []
    server = Served(asgi_app(make_app([_big_feature(ran)]), user=user_of, max_body=100))
    start = (
        b"POST /big/take HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer clerk-token\r\n"
        b"Content-Type: application/json\r\n"
    )
    host, port = server.base.removeprefix("http://").split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(start + b"Content-Length: 10000000000\r\n\r\n" + b'{"text": "')
            huge = _answer(sock)
        waiting = _raw_exchange(server, start + b"Content-Length: 101\r\nExpect: 100-continue\r\n\r\n")
        for answer in (huge, waiting):
            head, _, payload = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 413 "), answer[:200]
            assert b"connection: close" in head.lower()
            assert json.loads(payload)["message"] == "the body is larger than 100 bytes; send a smaller payload"
        assert b"100 Continue" not in waiting
        assert ran == []
    finally:
        server.close()


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_body_too_long_to_drain_gets_its_413_before_the_close(make_app: Callable[..., App], chunked: bool) -> None:
    """A body declared longer than the limit and 4 MiB, or passing that while it is read:
    the 413 (``Connection: close``) goes out then, and the server goes on reading and
    dropping up to 4 MiB more before it closes, so a client that reads only once it has
    sent (``http.client``, urllib) can read it.  Before, the server closed at once on the
    unread rest: the client's next send met a reset (urllib raised ``ConnectionResetError``
    for a 6 MiB body, never reading the 413)."""
    drain = 4 * 1024 * 1024
    limit = 100
    ran: list[str] = []
    adapter = asgi_app(make_app([_big_feature(ran)]), user=user_of, max_body=limit)
    after_answer: list[int] = []  # bytes of body the adapter read after its answer started
    finished = threading.Event()

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        async def receiving() -> Any:
            message = await receive()
            if after_answer and message["type"] == "http.request":
                after_answer[0] += len(message.get("body", b""))
            return message

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                after_answer.append(0)
            await send(message)

        try:
            await adapter(scope, receiving, sending)
        finally:
            finished.set()

    server = Served(watched)
    host, port = server.base.removeprefix("http://").split(":")
    head = (
        b"POST /big/take HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer clerk-token\r\n"
        b"Content-Type: application/json\r\n"
    )

    def framed(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data) if chunked else data

    try:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            if chunked:  # read to the limit and 4 MiB, then refused
                sock.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n" + framed(b"x" * (limit + drain + 1)))
            else:
                sock.sendall(head + b"Content-Length: %d\r\n\r\n" % (limit + 3 * drain))
            answer = _answer(sock)
            for _ in range(4):  # 4 MiB more, still taken: no reset
                sock.sendall(framed(b"x" * (drain // 4)))
        assert finished.wait(30), "the adapter did not end when the client left"
        status, _, body = answer.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 413 ") and b"connection: close" in status.lower(), answer[:300]
        assert json.loads(body)["code"] == "payload_too_large"
        assert after_answer == [drain]
        # Past those 4 MiB the rest is left unread: the close comes, and the client's send meets it.
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head + b"Content-Length: %d\r\n\r\n" % (limit + 64 * drain))
            _answer(sock)
            with pytest.raises(OSError):  # a reset, or the broken pipe it leaves
                for _ in range(64):
                    sock.sendall(b"x" * drain)
        assert ran == []
    finally:
        server.close()


def test_results_are_sent_as_json(make_app: Callable[..., App]) -> None:
    server = Served(asgi_app(make_app([_echo_feature()]), user=user_of))
    try:
        rich = server.http.post("/echo/rich", json={"text": "x"}, headers=AS_CLERK)
        assert rich.json() == {
            "data": {
                "at": "2026-01-02T03:04:00+00:00",
                "price": "1.50",
                "colour": "red",
                "tags": ["a"],
                "ref": str(uuid.UUID(int=7)),
            }
        }
        opaque = server.http.post("/echo/opaque", json={"text": "x"}, headers=AS_CLERK)
        assert "its writes are committed" in _failure(opaque, 500, "internal_error")["message"]
    finally:
        server.close()


@attrs.frozen
class Blob:
    data: bytes


def test_bytes_are_sent_as_the_base64_a_payload_is_read_from(app_on: Callable[..., App]) -> None:
    """Before: a 500 internal_error after the handler's writes committed, for bytes the
    payload itself took as base64; with a key the stored answer was the same 500 for good.
    Both databases: the keyed answer is stored and read back."""
    f = Feature("blob")
    f.write_handler("raw", f.pipeline(Blob).return_(lambda c: ok(c.payload.data)))
    f.write_handler("inside", f.pipeline(Blob).return_(lambda c: ok(c.payload)))
    server = Served(asgi_app(app_on([f]), user=user_of))
    try:
        for path, sent in (("/blob/raw", "AP8="), ("/blob/inside", {"data": "AP8="})):
            for headers in (AS_CLERK, {**AS_CLERK, "Idempotency-Key": path}, {**AS_CLERK, "Idempotency-Key": path}):
                answer = server.http.post(path, json={"data": "AP8="}, headers=headers)
                assert (answer.status_code, answer.json()) == (200, {"data": sent})
    finally:
        server.close()


def test_durations_and_read_only_mappings_are_sent_as_the_event_store_writes_them(
    make_app: Callable[..., App],
) -> None:
    """One wire form per value: a duration as the event store's ISO 8601 text, a read-only
    mapping (``c.steps`` handed back) as an object.  Before, both were a 500 after the
    handler's writes committed."""
    f = Feature("forms")
    f.write_handler("took", f.pipeline(Plain).return_(lambda c: ok(timedelta(days=1, seconds=30, microseconds=500))))
    f.write_handler(
        "steps",
        f.pipeline(Plain).compute("n", lambda c: 2).return_(lambda c: ok({"steps": c.steps, "wait": timedelta(0)})),
    )
    server = Served(asgi_app(make_app([f]), user=user_of))
    try:
        took = server.http.post("/forms/took", json={"text": "x"}, headers=AS_CLERK)
        assert (took.status_code, took.json()) == (200, {"data": "P1DT30.0005S"})
        steps = server.http.post("/forms/steps", json={"text": "x"}, headers=AS_CLERK)
        assert (steps.status_code, steps.json()) == (200, {"data": {"steps": {"n": 2}, "wait": "PT0S"}})
    finally:
        server.close()


@attrs.frozen
class Tally:
    by_ref: dict[uuid.UUID, int]
    by_day: dict[date, list[uuid.UUID]]
    by_colour: dict[Colour, Decimal]


def test_maps_keyed_by_uuids_dates_or_enums_are_sent_as_their_payload_is_read(app_on: Callable[..., App]) -> None:
    """A payload reads (and an event stores) a map keyed by UUIDs, dates or enum members from
    an object with text keys; its answer is that object, which read as the payload again is
    the same value.  Before: a 500 internal_error after the handler's writes committed (JSON
    takes no UUID as a key), and with a key the stored answer was that 500 for good.  Both
    databases: the keyed answer is stored and read back."""
    f = Feature("tally")
    f.write_handler("echo", f.pipeline(Tally).return_(lambda c: ok(c.payload)))
    f.write_handler("refs", f.pipeline(Tally).return_(lambda c: ok({"refs": c.payload.by_ref})))
    sent = {
        "by_ref": {str(uuid.UUID(int=7)): 2},
        "by_day": {"2026-03-02": [str(uuid.UUID(int=8))]},
        "by_colour": {"red": "1.50"},
    }
    server = Served(asgi_app(app_on([f]), user=user_of))
    try:
        for headers in (AS_CLERK, {**AS_CLERK, "Idempotency-Key": "tally"}, {**AS_CLERK, "Idempotency-Key": "tally"}):
            echoed = server.http.post("/tally/echo", json=sent, headers=headers)
            assert (echoed.status_code, echoed.json()) == (200, {"data": sent})
            again = server.http.post("/tally/echo", json=echoed.json()["data"], headers=AS_CLERK)
            assert again.json() == {"data": sent}
        refs = server.http.post("/tally/refs", json=sent, headers=AS_CLERK)
        assert (refs.status_code, refs.json()) == (200, {"data": {"refs": sent["by_ref"]}})
    finally:
        server.close()


class AsgiRow(Entity):
    __tablename__ = "asgi_row"
    text: Mapped[str] = mapped_column(sa.String(40))


def test_an_entity_result_is_a_json_500_not_its_columns(make_app: Callable[..., App]) -> None:
    """docs/http.md: an ORM object has no JSON form, also inside a list or a map, although
    an entity class is a dataclass, which the writer of results takes apart like an attrs
    class.  After its transaction the row's columns are expired: reading them would raise
    (not as JSON) or show what the handler did not choose to send."""
    f = Feature("rows")
    f.entity(AsgiRow)
    f.write_handler(
        "one",
        f.pipeline(Plain)
        .create("row", AsgiRow, data=lambda c: AsgiRow(text=c.payload.text))
        .return_(lambda c: ok(c.steps["row"].entity)),
    )
    f.write_handler(
        "many",
        f.pipeline(Plain)
        .find_many("rows", lambda c: sa.select(AsgiRow))
        .return_(lambda c: ok({"rows": list(c.steps["rows"])})),
    )
    server = Served(asgi_app(make_app([f]), user=user_of))
    try:
        for name in ("one", "many"):
            answer = server.http.post(f"/rows/{name}", json={"text": "x"}, headers=AS_CLERK)
            message = _failure(answer, 500, "internal_error")["message"]
            assert message.startswith(f"sending the result of handler rows:{name} (its writes are committed) raised ")
    finally:
        server.close()


def test_every_failure_code_of_a_handler_is_answered_with_its_status(make_app: Callable[..., App]) -> None:
    """docs/http.md and errors.md: a handler's Failure is its code's status with its public
    fields, your own code 422.  Before, a handler's own ``unauthenticated`` was a 401
    without the ``WWW-Authenticate`` challenge HTTP requires of every 401."""
    codes = [*HTTP_STATUS, "out_of_stock"]
    f = Feature("codes")
    for code in codes:
        f.write_handler(code, f.pipeline(Plain).return_(lambda c, code=code: fail(code, f"no: {code}", {"n": 1})))
    server = Served(asgi_app(make_app([f]), user=user_of, www_authenticate='Bearer realm="shop"'))
    try:
        for code in codes:
            answer = server.http.post(f"/codes/{code}", json={"text": "x"}, headers=AS_CLERK)
            body = _failure(answer, HTTP_STATUS.get(code, 422), code)
            assert body == {"code": code, "message": f"no: {code}", "details": {"n": 1}}
            assert answer.headers.get("www-authenticate") == (
                'Bearer realm="shop"' if code == "unauthenticated" else None
            )
    finally:
        server.close()


def test_a_failure_whose_details_have_no_json_form_is_a_json_internal_error(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    """Before: Starlette's plain-text "Internal Server Error", with the traceback logged
    under no error id, for a handler's Failure holding a NaN, a key that is not a string,
    or a lone surrogate."""
    f = Feature("odd")
    odd: dict[str, object] = {
        "nan": {"weight": float("nan")},
        "keys": {("a", 1): "tuple key"},
        "text": {"note": "half \ud800 a pair"},
    }
    for name, details in odd.items():
        f.write_handler(name, f.pipeline(Plain).return_(lambda c, d=details: fail("unprocessable", "no", d)))
    server = Served(asgi_app(make_app([f]), user=user_of))
    try:
        for name in odd:
            with caplog.at_level(logging.ERROR, logger="kumiko_typed.asgi"):
                answer = server.http.post(f"/odd/{name}", json={"text": "x"}, headers=AS_CLERK)
            body = _failure(answer, 500, "internal_error")
            assert body["message"].startswith(f"sending the unprocessable failure of handler odd:{name} raised ")
            assert body["details"]["error_id"] in caplog.text
    finally:
        server.close()


def test_a_body_that_repeats_a_key_is_400(make_app: Callable[..., App]) -> None:
    """Before: the last value won silently, while other parsers (a proxy, a WAF that
    checked the body) take the first."""
    ran: list[str] = []
    f = Feature("once")
    f.write_handler(
        "take", f.pipeline(Plain).compute("n", lambda c: ran.append(c.payload.text)).return_(lambda c: ok(1))
    )
    server = Served(asgi_app(make_app([f]), user=user_of))
    json_type = {**AS_CLERK, "Content-Type": "application/json"}
    try:
        for body, key in ((b'{"text": "a", "text": "b"}', "'text'"), (b'{"text": "a", "x": {"k": 1, "k": 2}}', "'k'")):
            refused = server.http.post("/once/take", content=body, headers=json_type)
            assert _failure(refused, 400, "validation_error")["details"] == [
                {"path": "$", "message": f"the body repeats the key {key} in one object"}
            ]
        assert ran == []
        assert server.http.post("/once/take", content=b'{"text": "a"}', headers=json_type).json() == {"data": 1}
    finally:
        server.close()


def test_a_body_in_another_encoding_than_utf8_is_400(make_app: Callable[..., App]) -> None:
    """Before: json.loads guessed UTF-16 and UTF-32 from the bytes and ran the handler, on a
    body that a proxy or firewall reading it as UTF-8 (as RFC 8259 has it) saw as no JSON.
    The answer names the client's fix: a byte order mark was "Unexpected UTF-8 BOM (decode
    using utf-8-sig)", the parser's advice to the server."""
    ran: list[str] = []
    f = Feature("utf")
    f.write_handler(
        "take", f.pipeline(Plain).compute("n", lambda c: ran.append(c.payload.text)).return_(lambda c: ok(1))
    )
    server = Served(asgi_app(make_app([f]), user=user_of))
    json_type = {**AS_CLERK, "Content-Type": "application/json"}
    text = '{"text": "tea"}'
    try:
        not_utf8 = "the body is not UTF-8 (at byte 0): send JSON in UTF-8, whatever a charset says"
        for body, message in (
            (text.encode("utf-16"), not_utf8),
            (text.encode("utf-16-le"), "the body is not JSON: "),  # UTF-8 too: ASCII and NULs
            (text.encode("utf-32"), not_utf8),
            # a byte order mark, which JSON between systems must not carry
            (text.encode("utf-8-sig"), "the body starts with a byte order mark: send JSON in UTF-8 without one"),
        ):
            refused = server.http.post("/utf/take", content=body, headers=json_type)
            details = _failure(refused, 400, "validation_error")["details"]
            assert details[0]["path"] == "$" and details[0]["message"].startswith(message), details
        assert ran == []
        assert server.http.post("/utf/take", content=text.encode(), headers=json_type).json() == {"data": 1}
    finally:
        server.close()


def test_a_body_with_a_content_encoding_is_400_naming_the_header(make_app: Callable[..., App]) -> None:
    """Before: a plain JSON body labelled gzip ran the handler, past a proxy or firewall that
    decodes the label (and checked other bytes, or none); a gzip body was "not JSON: 'utf-8'
    codec can't decode byte 0x8b", naming neither the header nor the fix."""
    ran: list[str] = []
    f = Feature("coded")
    f.write_handler(
        "take", f.pipeline(Plain).compute("n", lambda c: ran.append(c.payload.text)).return_(lambda c: ok(1))
    )
    server = Served(asgi_app(make_app([f]), user=user_of))
    plain = b'{"text": "tea"}'
    message = "the body is read as JSON as sent: send it without a Content-Encoding (not compressed)"
    try:
        for coding, body in (("gzip", plain), ("gzip", gzip.compress(plain)), ("identity, br", plain)):
            headers = {**AS_CLERK, "Content-Type": "application/json", "Content-Encoding": coding}
            refused = server.http.post("/coded/take", content=body, headers=headers)
            assert _failure(refused, 400, "validation_error")["details"] == [
                {"path": "Content-Encoding", "message": message}
            ]
        assert ran == []
        identity = {**AS_CLERK, "Content-Type": "application/json", "Content-Encoding": "Identity"}
        assert server.http.post("/coded/take", content=plain, headers=identity).json() == {"data": 1}
    finally:
        server.close()


@pytest.mark.parametrize("returned", ["ada", False, {"id": 1}], ids=["str", "False", "dict"])
def test_a_user_dependency_returning_no_user_is_a_json_500(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture, returned: object
) -> None:
    """The application's bug, said as one: before, the App refused the non-User as 403
    access_denied, so a dependency that said False for an unknown token sent its client away
    as forbidden, without the 401 and its challenge to sign in again."""
    ran: list[str] = []
    f = Feature("who")
    f.write_handler(
        "take", f.pipeline(Plain).compute("n", lambda c: ran.append(c.payload.text)).return_(lambda c: ok(1))
    )
    server = Served(asgi_app(make_app([f]), user=lambda request: returned))
    try:
        with caplog.at_level(logging.ERROR, logger="kumiko_typed.asgi"):
            answer = server.http.post("/who/take", json={"text": "x"})
    finally:
        server.close()
    body = _failure(answer, 500, "internal_error")
    error_id = body["details"]["error_id"]
    assert body["message"] == (
        f"the user dependency returned a {type(returned).__name__}, not a User or None (error id {error_id})"
    )
    assert "www-authenticate" not in answer.headers and ran == []
    [record] = [r for r in caplog.records if r.name == "kumiko_typed.asgi"]
    assert error_id in record.getMessage()


def test_a_client_that_goes_away_mid_body_runs_nothing_and_raises_nothing(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    """Before: Starlette's ClientDisconnect escaped the adapter, and uvicorn logged
    "Exception in ASGI application" with a traceback, an ERROR for each client that gave up."""
    ran: list[str] = []
    f = Feature("gone")
    f.write_handler(
        "take", f.pipeline(Plain).compute("n", lambda c: ran.append(c.payload.text)).return_(lambda c: ok(1))
    )
    adapter = asgi_app(make_app([f]), user=user_of)
    escaped: list[BaseException] = []
    answered: list[str] = []

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        try:
            await adapter(scope, receive, send)
        except BaseException as exc:
            escaped.append(exc)
            raise
        finally:
            answered.append(scope["path"])

    server = Served(watched)
    host, port = server.base.removeprefix("http://").split(":")
    head = (
        "POST /gone/take HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer clerk-token\r\nContent-Type: application/json\r\n"
    )
    try:
        with caplog.at_level(logging.DEBUG, logger="kumiko_typed.asgi"):
            for framing, part in (
                ("Content-Length: 100", '{"text": "x'),
                ("Transfer-Encoding: chunked", '5\r\n{"tex\r\n'),
            ):
                with socket.create_connection((host, int(port))) as sock:
                    sock.sendall(f"{head}{framing}\r\n\r\n{part}".encode())
            deadline = time.monotonic() + 30
            while len(answered) < 2:
                assert time.monotonic() < deadline, "the adapter did not finish the requests"
                time.sleep(0.01)
        assert escaped == [] and ran == []
        # docs/http.md: logged at DEBUG, not as the server's error.
        gone = [r for r in caplog.records if r.name == "kumiko_typed.asgi"]
        assert [r.levelno for r in gone] == [logging.DEBUG] * 2 and "gone:take" in gone[0].getMessage()
        assert server.http.post("/gone/take", json={"text": "x"}, headers=AS_CLERK).json() == {"data": 1}
    finally:
        server.close()


def test_it_mounts_under_a_prefix(make_app: Callable[..., App]) -> None:
    site = Starlette(routes=[Mount("/api", app=asgi_app(make_app([_echo_feature()]), user=user_of))])
    server = Served(site)
    try:
        assert server.http.post("/api/echo/plain", json={"text": "hi"}, headers=AS_CLERK).json() == {"data": "hi"}
        assert server.http.get("/api/echo/plain/schema").json()["title"] == "Plain"
    finally:
        server.close()


# --- JSON Schema ------------------------------------------------------------------------------


def test_the_schema_of_a_payload_is_served(inventory_served: Served) -> None:
    answer = inventory_served.http.get("/inventory/product:bulk-adjust/schema")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/schema+json"
    schema = answer.json()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"items": [{"id": str(uuid.uuid4()), "delta": -1}], "reason": "count"})
    assert not validator.is_valid({"items": [{"id": str(uuid.uuid4())}], "reason": "count"})
    assert not validator.is_valid({"items": [], "reason": "count", "extra": 1})
    assert schema["$defs"]["Adjustment"]["required"] == ["id", "delta"]


def test_without_starlette_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Was ``No module named 'starlette'``: now which extra installs it.  (test_wheel.py
    imports it in a venv that never had Starlette.)"""
    for name in [m for m in sys.modules if m.partition(".")[0] == "starlette"]:
        monkeypatch.setitem(sys.modules, name, None)  # what an import finds when it is not installed
    monkeypatch.delitem(sys.modules, "kumiko_typed.contrib.asgi")
    with pytest.raises(ModuleNotFoundError, match=r'not installed: pip install "kumiko-typed\[asgi\]"') as raised:
        importlib.import_module("kumiko_typed.contrib.asgi")
    assert (raised.value.name or "").partition(".")[0] == "starlette"
