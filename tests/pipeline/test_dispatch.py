"""App.dispatch / dispatch_json: one transaction per call, internal errors naming the step,
roles, unknown handlers (DESIGN §3.1, §3.2, §5)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _crash import located, said
from _support import failure_of

from kumiko_typed import App, Feature, Ok, User, fail, manual, ok


@attrs.frozen
class Note:
    text: str


@attrs.frozen
class Batch:
    texts: list[str]
    fail_at: int = -1


@attrs.frozen
class Other:
    text: str


MakeApp = Callable[..., App]
Texts = Callable[[App], list[str]]


def _writer(notes: sa.Table, text_of: Callable[[Any], str] = lambda c: c.payload.text) -> Callable[[Any], str]:
    """A compute resolver that inserts a row through ``c.db`` (by default the payload's text)."""

    def write(c: Any) -> str:
        text = text_of(c)
        c.db.execute(sa.insert(notes).values(text=text))
        return text

    return write


# --- one transaction per dispatch ---------------------------------------------------------


def test_ok_commits_the_rows_written_through_c_db(
    make_app: MakeApp, user: User, notes: sa.Table, note_texts: Texts
) -> None:
    f = Feature("notes")
    h = f.write_handler(
        "add",
        f.pipeline(Note)
        .compute("written", _writer(notes))
        .compute("count", lambda c: c.db.scalar(sa.select(sa.func.count()).select_from(notes)))
        .return_(lambda c: ok(c.steps["count"])),
    )
    app = make_app([f])
    assert app.dispatch(h, Note("first"), user=user) == Ok(1)
    assert app.dispatch(h, Note("second"), user=user) == Ok(2)
    assert note_texts(app) == ["first", "second"]


def test_fail_rolls_back_everything_the_steps_wrote(
    make_app: MakeApp, user: User, notes: sa.Table, note_texts: Texts
) -> None:
    f = Feature("notes")
    h = f.write_handler(
        "add",
        f.pipeline(Note)
        .compute("written", _writer(notes))
        .compute("seen", lambda c: list(c.db.scalars(sa.select(notes.c.text))))
        .return_(
            lambda c: fail("unprocessable", "no", {"seen": c.steps["seen"]}) if c.payload.text == "bad" else ok(1)
        ),
    )
    app = make_app([f])
    res = failure_of(app.dispatch(h, Note("bad"), user=user))
    # The write happened inside the transaction (the step saw it) ...
    assert res.code == "unprocessable"
    assert res.details == {"seen": ["bad"]}
    # ... and was rolled back.
    assert note_texts(app) == []
    assert app.dispatch(h, Note("good"), user=user) == Ok(1)
    assert note_texts(app) == ["good"]


def test_failure_via_dispatch_json_also_rolls_back(
    make_app: MakeApp, user: User, notes: sa.Table, note_texts: Texts
) -> None:
    f = Feature("notes")
    f.write_handler(
        "add",
        f.pipeline(Note).compute("written", _writer(notes)).return_(lambda c: fail("version_conflict", "stale")),
    )
    app = make_app([f])
    res = failure_of(app.dispatch_json("notes:add", {"text": "x"}, user=user))
    assert (res.code, res.http_status) == ("version_conflict", 409)
    assert note_texts(app) == []


def test_exception_mid_for_each_rolls_back_earlier_iterations(
    make_app: MakeApp, user: User, notes: sa.Table, note_texts: Texts
) -> None:
    def maybe_boom(c: Any) -> None:
        if c.scope["text"] == "boom":
            raise RuntimeError("disk on fire")

    f = Feature("notes")
    h = f.write_handler(
        "batch",
        f.pipeline(Batch)
        .for_each(
            "text",
            over=lambda c: c.payload.texts,
            do=lambda b: b.compute("written", _writer(notes, lambda c: c.scope["text"])).compute("check", maybe_boom),
        )
        .return_(lambda c: ok(c.steps["written"])),
    )
    app = make_app([f])
    res = failure_of(app.dispatch(h, Batch(["a", "b", "boom", "c"]), user=user))
    assert res.code == "internal_error"
    assert res.http_status == 500
    assert located(res) == {"path": "0/do/#2/1", "step": 'compute "check"'}
    assert said(res) == 'step 0/do/#2/1 compute "check" raised RuntimeError'  # its text is in the log only
    assert note_texts(app) == []
    # The connection is usable afterwards and a good batch commits.
    assert app.dispatch(h, Batch(["a", "b"]), user=user) == Ok("b")
    assert note_texts(app) == ["a", "b"]


def test_a_failed_dispatch_does_not_undo_an_earlier_committed_one(
    make_app: MakeApp, user: User, notes: sa.Table, note_texts: Texts
) -> None:
    f = Feature("notes")
    h = f.write_handler(
        "add",
        f.pipeline(Note)
        .compute("written", _writer(notes))
        .compute("boom", lambda c: 1 // 0 if c.payload.text == "boom" else 0)
        .return_(lambda c: ok(None)),
    )
    app = make_app([f])
    assert isinstance(app.dispatch(h, Note("kept"), user=user), Ok)
    assert failure_of(app.dispatch(h, Note("boom"), user=user)).code == "internal_error"
    assert note_texts(app) == ["kept"]


# --- internal_error names the step path -------------------------------------------------------


def _crash_total(c: Any) -> int:
    raise ZeroDivisionError("total of nothing")


def test_internal_error_in_a_branch_arm_names_the_path(
    make_app: MakeApp, user: User, caplog: pytest.LogCaptureFixture
) -> None:
    f = Feature("paths")
    h = f.write_handler(
        "arm",
        f.pipeline(Note)
        .compute("a", lambda c: 1)
        .compute("b", lambda c: 2)
        .branch(when=lambda c: True, on_true=lambda b: b.compute("total", _crash_total))
        .return_(lambda c: ok(None)),
    )
    app = make_app([f])
    with caplog.at_level(logging.ERROR, logger="kumiko_typed"):
        res = failure_of(app.dispatch(h, Note("x"), user=user))
    assert res.code == "internal_error"
    assert said(res) == 'step 2/on_true/0 compute "total" raised ZeroDivisionError'
    assert located(res) == {"path": "2/on_true/0", "step": 'compute "total"'}

    records = [r for r in caplog.records if r.name == "kumiko_typed"]
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.ERROR
    assert '2/on_true/0 compute "total"' in record.getMessage()
    assert "paths:arm" in record.getMessage()
    assert res.details["error_id"] in record.getMessage()  # type: ignore[index, call-overload]
    assert "total of nothing" in caplog.text
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ZeroDivisionError)
    assert record.exc_info[2] is not None  # the traceback is kept
    assert "_crash_total" in caplog.text  # ... and rendered into the log


def test_internal_error_in_a_loop_body_names_the_iteration(
    make_app: MakeApp, user: User, caplog: pytest.LogCaptureFixture
) -> None:
    def x(c: Any) -> int:
        if c.scope["i"] == 3:
            raise ValueError("three")
        return int(c.scope["i"])

    f = Feature("paths")
    h = f.write_handler(
        "loop",
        f.pipeline(Note)
        .compute("a", lambda c: 1)
        .for_each("i", over=lambda c: [1, 2, 3, 4], do=lambda b: b.compute("x", x))
        .return_(lambda c: ok(None)),
    )
    app = make_app([f])
    with caplog.at_level(logging.ERROR, logger="kumiko_typed"):
        res = failure_of(app.dispatch(h, Note("x"), user=user))
    assert res.code == "internal_error"
    assert said(res) == 'step 1/do/#2/0 compute "x" raised ValueError'
    assert located(res) == {"path": "1/do/#2/0", "step": 'compute "x"'}
    [record] = [r for r in caplog.records if r.name == "kumiko_typed"]
    assert '1/do/#2/0 compute "x"' in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ValueError)


@pytest.mark.parametrize(
    ("crash_at", "path"),
    [("c0", "0"), ("c1", "1"), ("c3", "3"), ("c4", "4"), ("body1", "5/do/#1/1"), ("c6", "6")],
)
def test_internal_error_names_the_exact_step_among_its_siblings(
    make_app: MakeApp, user: User, crash_at: str, path: str
) -> None:
    """Consecutive computes, sub-pipelines between them: the failing one is named, not a neighbour."""
    ran: list[str] = []

    def step(name: str) -> Callable[[Any], str]:
        def fn(c: Any) -> str:
            ran.append(name)
            if name == crash_at and ("i" not in c.scope or c.scope["i"] == 1):
                raise LookupError(name)
            return name

        return fn

    f = Feature("paths")
    h = f.write_handler(
        "siblings",
        f.pipeline(Note)
        .compute("c0", step("c0"))
        .compute("c1", step("c1"))
        .branch(when=lambda c: True, on_true=lambda b: b.compute("arm", step("arm")))
        .compute("c3", step("c3"))
        .compute("c4", step("c4"))
        .for_each(
            "i", over=lambda c: [0, 1], do=lambda b: b.compute("body0", step("body0")).compute("body1", step("body1"))
        )
        .compute("c6", step("c6"))
        .return_(lambda c: ok(None)),
    )
    app = make_app([f])
    res = failure_of(app.dispatch(h, Note("x"), user=user))
    assert res.code == "internal_error"
    assert located(res) == {"path": path, "step": f'compute "{crash_at}"'}
    assert said(res) == f'step {path} compute "{crash_at}" raised LookupError'
    # Nothing after the failing step ran.
    order = ["c0", "c1", "arm", "c3", "c4", "body0", "body1", "body0", "body1", "c6"]
    last = len(order) - 1 - order[::-1].index(crash_at)
    assert ran == order[: last + 1]


def test_internal_error_path_through_nested_sub_pipelines(make_app: MakeApp, user: User) -> None:
    f = Feature("paths")
    h = f.write_handler(
        "deep",
        f.pipeline(Note)
        .branch(
            when=lambda c: False,
            on_true=lambda b: b.compute("unused", lambda c: 0),
            on_false=lambda b: b.compute("first", lambda c: 0).for_each(
                "row",
                over=lambda c: ["r0", "r1"],
                do=lambda bb: bb.for_each(
                    "col",
                    over=lambda c: [0, 1, 2],
                    do=lambda bbb: bbb.compute("cell", lambda c: {"r1": [1, 2]}[c.scope["row"]][c.scope["col"]]),
                ),
            ),
        )
        .return_(lambda c: ok(None)),
    )
    app = make_app([f])
    res = failure_of(app.dispatch(h, Note("x"), user=user))
    # KeyError "r0" in the first cell of the first row.
    assert located(res) == {"path": "0/on_false/1/do/#0/0/do/#0/0", "step": 'compute "cell"'}


@pytest.mark.parametrize(
    ("pipeline", "path", "step"),
    [
        (
            lambda f: f.pipeline(Note).compute("a", lambda c: 1).branch(when=lambda c: 1 // 0, on_true=lambda b: b),
            "1",
            "branch",
        ),
        (
            lambda f: f.pipeline(Note).for_each("item", over=lambda c: None, do=lambda b: b.compute("x", lambda c: 1)),
            "0",
            'for_each "item"',
        ),
    ],
    ids=["branch-condition", "for_each-over"],
)
def test_internal_error_in_a_condition_names_the_branching_step(
    make_app: MakeApp, user: User, pipeline: Callable[[Feature[str]], Any], path: str, step: str
) -> None:
    f = Feature("paths")
    h = f.write_handler("cond", pipeline(f).return_(lambda c: ok(None)))
    app = make_app([f])
    res = failure_of(app.dispatch(h, Note("x"), user=user))
    assert res.code == "internal_error"
    assert located(res) == {"path": path, "step": step}
    assert f"step {path} {step} raised" in res.message


# --- roles ------------------------------------------------------------------------------------


def _guarded_feature(notes: sa.Table, ran: list[str], roles: Any) -> tuple[Feature[str], Any]:
    f = Feature("guarded")

    def record(c: Any) -> str:
        ran.append(c.payload.text)
        return _writer(notes)(c)

    h = f.write_handler(
        "act", f.pipeline(Note).compute("ran", record).return_(lambda c: ok(c.steps["ran"])), roles=roles
    )
    return f, h


@pytest.mark.parametrize("roles", [(), ("User",), ("admin",), ("Sysadmin", "Auditor")], ids=repr)
def test_user_without_a_required_role_is_denied_and_no_step_runs(
    make_app: MakeApp, make_user: Callable[..., User], notes: sa.Table, note_texts: Texts, roles: tuple[str, ...]
) -> None:
    ran: list[str] = []
    f, h = _guarded_feature(notes, ran, ["Admin"])
    app = make_app([f])
    who = make_user(*roles)
    for res in (app.dispatch(h, Note("t"), user=who), app.dispatch_json("guarded:act", {"text": "t"}, user=who)):
        failure = failure_of(res)
        assert failure.code == "access_denied"
        assert failure.http_status == 403
        assert "Admin" in failure.message
    assert ran == []
    assert note_texts(app) == []


def test_user_with_one_of_the_roles_is_admitted(
    make_app: MakeApp, make_user: Callable[..., User], notes: sa.Table, note_texts: Texts
) -> None:
    ran: list[str] = []
    f, h = _guarded_feature(notes, ran, ["Admin", "User"])
    app = make_app([f])
    assert app.dispatch(h, Note("a"), user=make_user("Admin")) == Ok("a")
    assert app.dispatch_json("guarded:act", {"text": "b"}, user=make_user("User", "Other")) == Ok("b")
    assert ran == ["a", "b"]
    assert note_texts(app) == ["a", "b"]


def test_roles_none_admits_any_authenticated_user(
    make_app: MakeApp, make_user: Callable[..., User], notes: sa.Table
) -> None:
    ran: list[str] = []
    f, h = _guarded_feature(notes, ran, None)
    app = make_app([f])
    assert app.dispatch(h, Note("nobody"), user=make_user()) == Ok("nobody")
    assert app.dispatch(h, Note("someone"), user=make_user("Whatever")) == Ok("someone")
    assert ran == ["nobody", "someone"]


def test_a_single_role_string_is_one_role_not_its_letters(
    make_app: MakeApp, make_user: Callable[..., User], notes: sa.Table
) -> None:
    ran: list[str] = []
    f, h = _guarded_feature(notes, ran, "Admin")
    app = make_app([f])
    assert failure_of(app.dispatch(h, Note("x"), user=make_user("A"))).code == "access_denied"
    assert app.dispatch(h, Note("y"), user=make_user("Admin")) == Ok("y")
    assert ran == ["y"]


def test_access_is_checked_before_the_payload(
    make_app: MakeApp, make_user: Callable[..., User], notes: sa.Table
) -> None:
    ran: list[str] = []
    f, h = _guarded_feature(notes, ran, ["Admin"])
    app = make_app([f])
    outsider = make_user("User")
    # Invalid JSON payload and a denied user: access_denied, not validation_error.
    assert failure_of(app.dispatch_json("guarded:act", {"text": 5, "extra": 1}, user=outsider)).code == "access_denied"
    assert failure_of(app.dispatch_json("guarded:act", "not even an object", user=outsider)).code == "access_denied"
    # The same for a structured payload of the wrong class.
    assert failure_of(app.dispatch(h, Other("x"), user=outsider)).code == "access_denied"  # type: ignore[arg-type]
    # An admin gets to the validation.
    assert failure_of(app.dispatch_json("guarded:act", {"text": 5}, user=make_user("Admin"))).code == "validation_error"
    assert ran == []


@pytest.mark.parametrize("who", [None, "admin", object()], ids=["None", "str", "object"])
def test_a_caller_that_is_not_a_user_is_denied(make_app: MakeApp, notes: sa.Table, who: object) -> None:
    ran: list[str] = []
    f, h = _guarded_feature(notes, ran, None)
    app = make_app([f])
    assert failure_of(app.dispatch(h, Note("x"), user=who)).code == "access_denied"  # type: ignore[arg-type]
    assert failure_of(app.dispatch_json("guarded:act", {"text": "x"}, user=who)).code == "access_denied"  # type: ignore[arg-type]
    assert ran == []


# --- unknown handlers and wrong payloads ----------------------------------------------------------


def test_dispatch_of_a_handler_not_registered_in_the_app_is_not_found(make_app: MakeApp, admin: User) -> None:
    ran: list[str] = []
    registered = Feature("shop")
    h = registered.write_handler(
        "buy", registered.pipeline(Note).compute("r", lambda c: ran.append("in")).return_(lambda c: ok(1))
    )
    # Another feature object with the same name and handler name, not part of the app.
    twin = Feature("shop")
    stranger = twin.write_handler(
        "buy", twin.pipeline(Note).compute("r", lambda c: ran.append("twin")).return_(lambda c: ok(2))
    )
    elsewhere = Feature("elsewhere")
    lost = elsewhere.write_handler(
        "sell", elsewhere.pipeline(Note).compute("r", lambda c: ran.append("lost")).return_(lambda c: ok(3))
    )
    app = make_app([registered])
    late = registered.write_handler("late", registered.pipeline(Note).return_(lambda c: ok(4)))

    # Each of a new user's three mistakes named with its fix (was "handler X is not
    # registered in this App" for all three).
    lead = "is not registered in this App: "
    said = {
        stranger: "the App holds another Feature named 'shop'; was its module loaded twice (run as a script and"
        " imported by name)? Import the one module everywhere",
        lost: "its feature 'elsewhere' is not among the App's features ('shop'); pass it to App([...])",
        late: "it was added to feature 'shop' after the App was built; build the App afterwards",
    }
    for handler, fix in said.items():
        res = failure_of(app.dispatch(handler, Note("x"), user=admin))
        assert res.code == "not_found"
        assert res.http_status == 404
        assert res.message == f"handler {handler.name} {lead}{fix}"
    assert ran == []
    # A query and a workflow say the same.
    query = elsewhere.query_handler("look", elsewhere.query_pipeline(Note).return_(lambda c: ok(5)))
    assert failure_of(app.query(query, Note("x"), user=admin)).message == f"query elsewhere:look {lead}{said[lost]}"
    flow = elsewhere.workflow("flow", trigger=manual(Note), pipeline=elsewhere.workflow_pipeline(Note))
    with pytest.raises(LookupError) as raised:
        app.start_workflow(flow, Note("x"), user=admin)
    assert str(raised.value) == f"workflow elsewhere:flow {lead}{said[lost]}"
    assert app.dispatch(h, Note("x"), user=admin) == Ok(1)
    assert ran == ["in"]


def test_dispatching_a_pipeline_instead_of_its_handler_names_the_registration(make_app: MakeApp, admin: User) -> None:
    """A caller without a type checker passing the pipeline itself (or anything else) got
    ``AttributeError: 'Finished' object has no attribute 'name'`` from inside dispatch."""
    f = Feature("shop")
    pipeline = f.pipeline(Note).return_(lambda c: ok(1))
    app = make_app([f])
    with pytest.raises(TypeError) as raised:
        app.dispatch(pipeline, Note("x"), user=admin)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "app.dispatch takes a WriteHandler, the value of feature.write_handler(name, pipeline), not Finished"
    )
    with pytest.raises(TypeError) as raised:
        app.query("shop:look", Note("x"), user=admin)  # type: ignore[arg-type]
    said = str(raised.value)
    assert said == "app.query takes a QueryHandler, the value of feature.query_handler(name, pipeline), not str"


@pytest.mark.parametrize("name", ["shop:sell", "buy", "shop", "", "SHOP:BUY", "shop:buy "])
def test_dispatch_json_with_an_unknown_name_is_not_found(make_app: MakeApp, admin: User, name: str) -> None:
    f = Feature("shop")
    f.write_handler("buy", f.pipeline(Note).return_(lambda c: ok(1)))
    app = make_app([f])
    res = failure_of(app.dispatch_json(name, {"text": "x"}, user=admin))
    assert res.code == "not_found"
    assert res.details == {"known": ["shop:buy"]}
    assert app.dispatch_json("shop:buy", {"text": "x"}, user=admin) == Ok(1)


def test_dispatch_with_a_payload_of_the_wrong_class_is_a_validation_error(make_app: MakeApp, admin: User) -> None:
    ran: list[object] = []
    f = Feature("shop")
    h = f.write_handler("buy", f.pipeline(Note).compute("r", lambda c: ran.append(c.payload)).return_(lambda c: ok(1)))
    app = make_app([f])
    for wrong in (Other("x"), {"text": "x"}, "x", None):
        res = failure_of(app.dispatch(h, wrong, user=admin))  # type: ignore[arg-type]
        assert res.code == "validation_error"
        assert res.http_status == 400
        assert res.details == [{"path": "$", "message": "expected Note"}]
    assert ran == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"id": "7d0c", "tenant_id": uuid.uuid4()}, "User.id must be a uuid.UUID, not str"),
        ({"id": uuid.uuid4(), "tenant_id": None}, "User.tenant_id must be a uuid.UUID, not NoneType"),
        ({"id": uuid.uuid4(), "tenant_id": 3}, "User.tenant_id must be a uuid.UUID, not int"),
        ({"id": uuid.uuid4(), "tenant_id": uuid.uuid4(), "roles": None}, "roles must be a collection of role names"),
    ],
)
def test_a_user_is_refused_where_it_is_made_not_inside_a_step(fields: dict[str, Any], message: str) -> None:
    """Before: ``tenant_id=None`` wrote rows no tenant owns; a string id failed the first insert."""
    with pytest.raises(TypeError, match=message):
        User(**fields)


@pytest.mark.parametrize("call", ["dispatch_json", "query_json"])
def test_an_unknown_name_of_any_length_is_quoted_short(make_app: MakeApp, admin: User, call: str) -> None:
    """An untrusted name is quoted whole while it could name a handler (200 characters);
    a longer one by its start and length: a 100,000-character name made a message (and a
    client's answer) of 100,000 characters."""
    app = make_app([Feature("shop")])
    kind = "handler" if call == "dispatch_json" else "query"
    known = "shop:" + "b" * 195
    res = failure_of(getattr(app, call)(known, {}, user=admin))
    assert (res.code, res.message) == ("not_found", f"no {kind} named {known!r}")
    res = failure_of(getattr(app, call)("shop:" + "a" * 100_000, {}, user=admin))
    assert res.code == "not_found"
    assert res.message == f"no {kind} named {'shop:' + 'a' * 35!r}... (100005 characters; a full name has at most 200)"
