"""What mypy with the plugin says about user code: exact revealed types and error codes
at exact lines; and that mypy without the plugin and pyright raise no false errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ._mypy import CASES, EXAMPLES, Finding, expected, mypy, parse, pyright, pyright_errors, pyright_findings

CASE_FILES = sorted(p for p in CASES.glob("*.py") if not p.name.startswith("_"))
POSITIVE = [p for p in CASE_FILES if p.name.startswith("ok_")]
EXAMPLE_FILES = sorted(EXAMPLES.rglob("*.py"))


@pytest.fixture(scope="session")
def plugin_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[set[Finding], str]:
    cache = tmp_path_factory.mktemp("mypy-cache")
    result = mypy(*(p.name for p in CASE_FILES), cwd=CASES, config=CASES / "mypy.ini", cache_dir=cache)
    found, _ = parse(result.stdout)
    return found, result.stdout + result.stderr


def test_cases_exist() -> None:
    assert len(POSITIVE) >= 2
    assert {p.name for p in CASE_FILES} >= {"errors_rules.py", "errors_types.py"}


@pytest.mark.parametrize("case", CASE_FILES, ids=lambda p: p.name)
def test_mypy_with_plugin(case: Path, plugin_run: tuple[set[Finding], str]) -> None:
    found, output = plugin_run
    want = expected(case)
    assert want, f"{case.name} states no expectation"
    got = {f for f in found if f.file == case.name}
    missing = sorted(want - got)
    unexpected = sorted(got - want)
    assert not missing and not unexpected, f"missing: {missing}\nunexpected: {unexpected}\n\n{output}"


def errors_in(output: str, file: str, keep: Callable[[str], bool] = lambda _line: True) -> dict[int, str]:
    """mypy's error messages about case ``file`` in ``output``, by line: of the lines ``keep`` takes."""
    return {
        int(line.split(":")[1]): line.partition(": error: ")[2]
        for line in output.splitlines()
        if line.startswith(f"{file}:") and ": error: " in line and keep(line)
    }


def test_a_refused_step_is_one_error_with_deprecated_enabled(plugin_run: tuple[set[Finding], str]) -> None:
    """errors_deprecated_stubs.py enables mypy's ``deprecated`` code: the stub's own report and
    its note on a line whose ignore names only the kumiko code are taken back."""
    _, output = plugin_run
    said = [line for line in output.splitlines() if line.startswith("errors_deprecated_stubs.py:")]
    assert len(said) == 3, output
    assert not [line for line in said if "deprecated" in line.partition(": ")[2]], said


def test_a_loop_item_read_after_its_loop_is_explained(plugin_run: tuple[set[Finding], str]) -> None:
    """mypy's own error for ``c.scope["line"]`` after the loop said only ``expected one of ()``;
    the plugin adds whose item it is and what to read after the loop (errors_loop_item_after.py):
    the keys the body set, none, and a loop inside another loop's body."""
    _, output = plugin_run
    said = {
        int(line.split(":")[1]): line.partition(": error: ")[2]
        for line in output.splitlines()
        if line.startswith("errors_loop_item_after.py:")
    }
    inside = 'which exists only inside the loop body: read c.scope["line"] in do=, and '
    results = "after the loop read its results by the keys its body set, c.steps[{}] (T | None: None if it ran no item)"
    assert said[15] == (
        '"line" is not a valid TypedDict key; expected one of (); "line" is the item of the for_each on line 14, '
        + inside
        + results.format('"qty"')
        + "  [misc]"
    ), said
    assert said[23] == (
        '"line" is not a valid TypedDict key; expected one of (); "line" is the item of the for_each on line 22, '
        + inside
        + "its body sets no key to read after the loop: compute what you need from the item in the body  [misc]"
    ), said
    assert said[33] == (
        '"line" is not a valid TypedDict key; expected one of ("order"); "line" is the item of the for_each on line '
        + "32, "
        + inside
        + results.format('"q"')
        + "  [misc]"
    ), said


def test_a_key_one_side_of_a_conditional_sets_is_explained(plugin_run: tuple[set[Finding], str]) -> None:
    """mypy's own error for such a key says only that it does not exist; the plugin adds why
    (errors_conditional_arms.py): in a branch arm or loop body, and mid-chain, where a
    branch step is the alternative; and for a builder extended in an ``if``, ``match`` or ``try``
    statement, or in a loop; and read in an ``except`` clause or ``finally`` block of a ``try``
    statement whose body sets it."""
    _, output = plugin_run
    said = {
        int(line.split(":")[1]): line for line in output.splitlines() if line.startswith("errors_conditional_arms.py:")
    }
    why = "only: the pipeline built with the other side has no such step; set it on both sides"
    assert '"big" is set on one side of the conditional expression on line 17 ' + why + "  [misc]" in said[18], said
    assert '"sku" is set on one side of the conditional expression on line 23 ' + why + "  [misc]" in said[24], said
    branch = ", or use a branch step, whose arm that does not run sets it to None  [misc]"
    assert '"big" is set on one side of the conditional expression on line 29 ' + why + branch in said[31], said
    paths = ": the pipeline built on the others has no such step; set it on every path" + branch
    assert '"big" is set on some paths of the if statement on line 38 only' + paths in said[40], said
    # Only a statement on the path that decides the key is named: not an if before a builder
    # of its own was assigned, nor the if the read is in.
    assert '"big" is set on some paths of the if statement on line 53 only' + paths in said[55], said
    assert said[63].endswith('"big" is not a valid TypedDict key; expected one of ("count")  [misc]'), said
    assert said[71].endswith('"big" is not a valid TypedDict key; expected one of ("count")  [misc]'), said
    assert '"big" is set on some paths of the if statement on line 78 only' + paths in said[82], said
    assert '"big" is set on some paths of the match statement on line 84 only' + paths in said[89], said
    loop = (
        '"big" is set in the loop on line 94 only: the pipeline built when it runs no time has no such step, '
        "and one built when it runs twice has two; set it once, before or after the loop, or use a for_each "
        "step, whose body's keys are None when it does not run  [misc]"
    )
    assert loop in said[97], said
    assert '"big" is set on one side of the conditional expression on line 102 ' + why + branch in said[103], said
    tried = (
        '"big" is set in the body of the try statement on line 113 only: an exception may leave the body before '
        "the step is added, and the pipeline built when an except clause runs then has no such step; set it on "
        "every path (in each except clause too, or after the try statement)  [misc]"
    )
    assert tried in said[117], said
    assert '"big" is set on some paths of the try statement on line 119 only' + paths in said[123], said
    assert '"big" is set on some paths of the if statement on line 142 only' + paths in said[144], said
    handled = (
        "whose body an exception may leave before the step is added: the pipeline an except clause reads may have "
        "no such step, nor may the one the finally block reads (it runs after an exception no clause catches too); "
        "set it before the try statement to read it there  [misc]"
    )
    assert '"big" is set in the try statement on line 151, ' + handled in said[154], said
    assert '"big" is set in the try statement on line 156, ' + handled in said[161], said
    # A try statement whose body does not set it is not blamed.
    assert said[166].endswith('"big" is not a valid TypedDict key; expected one of ("count")  [misc]'), said


def test_a_return_resolver_that_gives_no_result_says_what_to_return(plugin_run: tuple[set[Finding], str]) -> None:
    """mypy said ``expected "Callable[[Ctx[...]], Ok[object] | Failure]"`` (an ``Ok[object]`` no
    one wrote), and said it twice; the one error now names the step, what its resolver returned
    and what to return (errors_return_resolver.py)."""
    _, output = plugin_run
    said = errors_in(output, "errors_return_resolver.py", lambda line: "[arg-type]" in line)
    fix = (
        "; it must return ok(value), whose value becomes the handler's result, or a Failure (fail(...)): "
        ".return_(lambda c: ok(...))  [arg-type]"
    )
    for line, returned in {16: "int", 17: "int", 22: "Ok[int] | None", 31: "int", 34: "str", 39: "int"}.items():
        assert said[line] == f'The resolver of step "return_" returns "{returned}"{fix}', said
    assert said[35] == 'Argument 1 to "ok" has incompatible type "int"; expected "str"  [arg-type]', said
    assert said[44] == f'Step "return_" takes a resolver, a function of c, not "Ok[int]"{fix}', said
    # A choice of functions is a function (it was said to be none), errors_fixed_results.py.
    chosen = [line for line in output.splitlines() if line.startswith("errors_fixed_results.py:73: error:")]
    assert chosen == [f'errors_fixed_results.py:73: error: The resolver of step "return_" returns "int | str"{fix}'], (
        chosen
    )
    # A read step's query that is no select, told so once (errors_types.py).
    query = [line for line in output.splitlines() if line.startswith("errors_types.py:252: error:")]
    assert query == [
        'errors_types.py:252: error: query= of step "find_many" returns "int", not a select: a read step runs the '
        "query its function returns, e.g. lambda c: select(Product).where(Product.id == c.payload.id); compute "
        "other values with .compute(...)  [arg-type]"
    ], query


def test_an_arm_that_returns_no_sub_pipeline_says_what_to_return(plugin_run: tuple[set[Finding], str]) -> None:
    """An arm or a body returning ``None``, the outer pipeline or a value was two errors showing
    the whole callable type expected; it is one naming what it returned and what to return
    (errors_fixed_results.py).  So is any other resolver whose result type the step fixes."""
    _, output = plugin_run
    said = errors_in(output, "errors_fixed_results.py")
    must = "; it must return the sub-pipeline b it is given, with its steps added: "
    outer = "Pipeline[Order, TypedDict({'n'=: int}), TypedDict({}), Literal['mail.send']]"
    assert said[83] == f'on_true= of step "branch" returns "{outer}"{must}on_true=lambda b: b.compute(...)  [arg-type]'
    assert said[84] == f'on_true= of step "branch" returns "None"{must}on_true=lambda b: b.compute(...)  [arg-type]'
    assert said[85] == f'do= of step "for_each" returns "None"{must}do=lambda b: b.compute(...)  [arg-type]'
    # Any other resolver whose result type the step fixes.
    assert said[94] == 'html= of step "send_mail" returns "int"; it must return "str | None"  [arg-type]'
    assert said[95] == 'subject= of step "send_mail" returns "int"; it must return "str"  [arg-type]'
    assert said[96] == 'id= of step "append_event" returns "str"; it must return "UUID"  [arg-type]'
    assert said[97] == 'over= of step "for_each" returns "int"; it must return "Iterable[Any]"  [arg-type]'
    repeats = [
        line for line in output.splitlines() if line.startswith("errors_fixed_results.py:") and "[return-value]" in line
    ]
    assert not repeats, repeats


def test_a_payload_of_another_class_names_both_types(plugin_run: tuple[set[Finding], str]) -> None:
    """mypy said ``Cannot infer value of type parameter "P" of "dispatch" of "App"``; the payload
    type is now read off the handler, so mypy's own error names both (errors_app_payloads.py)."""
    _, output = plugin_run
    said = errors_in(output, "errors_app_payloads.py")
    expected = 'Argument 2 to "{}" of "App" has incompatible type "{}"; expected "Order"  [arg-type]'
    assert said == {
        20: expected.format("dispatch", "SignedUp"),
        21: expected.format("query", "SignedUp"),
        22: expected.format("start_workflow", "SignedUp"),
        23: expected.format("start_workflow", "None"),
    }, said


def test_wait_keys_that_are_never_equal_are_refused(plugin_run: tuple[set[Finding], str]) -> None:
    """A wait_for_event whose key= and event_key= return types no two values of which are
    equal matched no event and timed out, with no error anywhere (errors_workflow_waits.py)."""
    _, output = plugin_run
    said = errors_in(output, "errors_workflow_waits.py", lambda line: "[arg-type]" in line and "never equal" in line)
    message = (
        'event_key= of step "wait_for_event" returns "{}" and key= returns "{}", which are never equal: the run '
        "waits for an event whose event_key(e) == key(c), so it would match none and time out; return the same "
        "type from both (a UUID and its text are not equal)  [arg-type]"
    )
    assert said == {52: message.format("str", "UUID"), 53: message.format("list[UUID]", "tuple[UUID]")}, said


def test_a_duration_given_as_a_number_says_what_to_write(plugin_run: tuple[set[Finding], str]) -> None:
    """``wait(5)`` got mypy's whole expected type, with the callable's context type; the one
    error says to write a timedelta or an ISO-8601 text (errors_workflow_waits.py).  A bool
    and a negative number too, which no fix with the same number would mend (``wait(True)``,
    ``wait(-5)`` got mypy's raw message, or a fix the boot refuses)."""
    _, output = plugin_run
    said = errors_in(
        output, "errors_workflow_waits.py", lambda line: "[arg-type]" in line and "never equal" not in line
    )
    message = '{}= of step "{}" is a number, which the step does not read as seconds: write {}  [arg-type]'
    any_seconds = 'write timedelta(seconds=...) or an ISO-8601 text such as "PT30S"'
    negative = (
        '{}= of step "{}" is {}, a number, which the step does not read as seconds, and a duration is never '
        f"negative: {any_seconds}, of zero or more  [arg-type]"
    )
    assert said == {
        77: message.format("duration", "wait", 'timedelta(seconds=5) or "PT5S"'),
        78: message.format("duration", "wait", 'timedelta(seconds=1.5) or "PT1.5S"'),
        79: message.format("duration", "wait", 'timedelta(seconds=5) or "PT5S"'),
        81: message.format("timeout", "wait_for_event", 'timedelta(seconds=30) or "PT30S"'),
        102: f'duration= of step "wait" is True, a bool, not a duration: {any_seconds}  [arg-type]',
        103: negative.format("duration", "wait", -5),
        104: negative.format("duration", "wait", -1.5),
        105: negative.format("duration", "wait", -3),
        107: negative.format("timeout", "wait_for_event", -5),
    }, said


def test_call_feature_given_no_write_handler_says_what_it_takes(plugin_run: tuple[set[Finding], str]) -> None:
    """mypy said ``expected "WriteHandler[Order, Never]"``, a ``Never`` nobody wrote
    (errors_called_handlers.py)."""
    _, output = plugin_run
    said = errors_in(output, "errors_called_handlers.py")
    message = (
        'handler= of step "call_feature" is "{}"; it must be a write handler (feature.write_handler(...)), which '
        "runs in this transaction; the step's key holds its ok(...) data  [arg-type]"
    )
    assert said == {18: message.format("QueryHandler[Order, int]"), 19: message.format("Workflow[Order, None]")}, said


def test_a_refused_resolver_says_what_to_give(plugin_run: tuple[set[Finding], str]) -> None:
    """A resolver refused for what it returns, or for how many parameters it takes, is one
    ``arg-type`` error naming the step, the resolver and what to give instead (mypy said it
    twice, showing the whole callable type expected); errors_resolver_shapes.py, errors_guard.py."""
    _, output = plugin_run
    said: dict[tuple[str, int], list[str]] = {}
    for line in output.splitlines():
        name, _, rest = line.partition(":")
        if name in ("errors_resolver_shapes.py", "errors_guard.py") and ": error: " in rest:
            said.setdefault((name, int(rest.split(":")[0])), []).append(rest.partition(": error: ")[2])
    failure = (
        "; it must return a Failure (fail(code, message)), which ends the whole pipeline when the condition is "
        'false: .guard(..., otherwise=lambda c: fail("unprocessable", "..."))  [arg-type]'
    )
    guard_bool = (
        "; it must return a bool, True to go on (False ends the pipeline with otherwise='s Failure); compare or "
        "test the value: .guard(lambda c: len(c.payload.lines) > 0, otherwise=...)  [arg-type]"
    )
    branch_bool = (
        "; it must return a bool, True to run on_true (False runs on_false, if given); compare or test the "
        "value: .branch(when=lambda c: len(c.payload.lines) > 0, on_true=...)  [arg-type]"
    )
    result = (
        "; it must return ok(value), whose value becomes the handler's result, or a Failure (fail(...)): "
        ".return_(lambda c: ok(...))  [arg-type]"
    )
    context = ", but the step calls it with one, the context c (c.payload, c.steps): lambda c: ...  [arg-type]"
    shapes = "errors_resolver_shapes.py"
    want = {
        ("errors_guard.py", 11): 'otherwise= of step "guard" returns "Ok[int]"' + failure,
        ("errors_guard.py", 12): 'when= of step "guard" returns "int"' + guard_bool,
        (shapes, 20): 'otherwise= of step "guard" returns "Ok[int]"' + failure,
        (shapes, 21): 'otherwise= of step "guard" returns "None"' + failure,
        (shapes, 22): 'when= of step "guard" returns "int"' + guard_bool,
        (shapes, 23): 'when= of step "guard" returns "list[Line] | None"' + guard_bool,
        (shapes, 24): 'when= of step "branch" returns "int"' + branch_bool,
        (shapes, 25): 'otherwise= of step "guard" takes a resolver, a function of c, not "Failure"' + failure,
        (shapes, 26): 'when= of step "guard" returns "int"' + guard_bool,
        (shapes, 37): 'otherwise= of step "guard" returns "int"' + failure,
        (shapes, 38): 'The resolver of step "return_" returns "int"' + result,
        (shapes, 62): 'The resolver of step "return_" takes no parameter' + context,
        (shapes, 63): 'The resolver of step "return_" takes 2 parameters' + context,
        (shapes, 64): 'The resolver of step "return_" takes no parameter' + context,
        (shapes, 65): 'when= of step "guard" takes no parameter' + context,
        (shapes, 66): 'The resolver of step "compute" takes no parameter' + context,
        (shapes, 67): 'on_true= of step "branch" takes 2 parameters, but the step calls it with one, the sub-pipeline '
        "b to add steps to: lambda b: ...  [arg-type]",
        (shapes, 69): 'event_key= of step "wait_for_event" takes no parameter, but the step calls it with one, the '
        "event e: lambda e: ...  [arg-type]",
        (shapes, 91): 'The resolver of step "compute" takes keyword-only parameters alone' + context,
        (shapes, 95): 'The resolver of step "compute" takes the keyword-only parameter d, which the step never passes: '
        "it calls it with one, the context c (c.payload, c.steps): lambda c: ...  [arg-type]",
    }
    for at, message in want.items():
        assert said[at] == [message], (at, said.get(at))
    assert said[shapes, 74][0] == 'The resolver of step "return_" takes no parameter' + context, said[shapes, 74]
    # Nothing else on these lines: no repeat in the lambda, no note on a partial's __call__.
    notes = [line for line in output.splitlines() if line.startswith(f"{shapes}:") and ": note: " in line]
    assert not notes, notes


def test_every_kumiko_code_is_exercised() -> None:
    from kumiko_typed import _rules

    stated = {f.value for p in CASE_FILES for f in expected(p) if f.kind == "E"}
    assert set(_rules.ERROR_CODES) <= stated


def test_mypy_without_plugin_positive(tmp_path: Path) -> None:
    """Graceful degradation: no plugin, no false errors (DESIGN §4.2)."""
    files = [p.name for p in POSITIVE]
    result = mypy(*files, cwd=CASES, config=None, cache_dir=tmp_path)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 0 and not errors, result.stdout + result.stderr

    examples = mypy(*map(str, EXAMPLE_FILES), cwd=EXAMPLES.parent, config=None, cache_dir=tmp_path)
    assert examples.returncode == 0, examples.stdout + examples.stderr


def test_examples_with_plugin(tmp_path: Path) -> None:
    assert EXAMPLE_FILES, "no example found under examples/: the checks below would check nothing"
    result = mypy(*map(str, EXAMPLE_FILES), cwd=EXAMPLES.parent, config=CASES / "mypy.ini", cache_dir=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_examples_need_no_casts_nor_ignores() -> None:
    """The examples (the flagship and the ports of other libraries' samples) pass the
    checkers above as user code should: no ``cast``, no ignore comment."""
    escape = re.compile(r"\bcast\(|\btyping\.cast\b|(type|pyright):\s*ignore")
    found = [
        f"{path.relative_to(EXAMPLES.parent)}:{number}: {line.strip()}"
        for path in EXAMPLE_FILES
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if escape.search(line)
    ]
    assert EXAMPLES / "ports" / "bank.py" in EXAMPLE_FILES
    assert not found, "\n".join(found)


@pytest.mark.parametrize("mode", ["basic", "strict"])
def test_pyright_positive_and_examples(mode: str, tmp_path: Path) -> None:
    """No false errors in pyright, and in strict mode no Unknown either: without the plugin
    a step result is an explicit ``Any`` (docs/plugin.md, "Without the plugin")."""
    data = pyright(*POSITIVE, *EXAMPLE_FILES, mode=mode, config_dir=tmp_path)
    summary = data["summary"]
    assert isinstance(summary, dict)
    assert summary["filesAnalyzed"] >= len(POSITIVE) + len(EXAMPLE_FILES)
    errors = pyright_errors(data)
    assert summary["errorCount"] == 0 and not errors, "\n".join(errors)


#: Case files that state pyright's view (``# PR:``/``# PE:``); pyright must say exactly that.
EDITOR_CASES = [p for p in CASE_FILES if expected(p, ("PR", "PE"))]


@pytest.mark.parametrize("mode", ["basic", "strict"])
def test_pyright_reads_keys_exactly(mode: str, tmp_path: Path) -> None:
    """Without the plugin pyright gives each key its exact type and flags a key no earlier
    step produced, on the line mypy with the plugin does (DESIGN §4.8).  Strict mode adds
    only its Unknown follow-ons of such an error, on lines that already have one."""
    assert set(EDITOR_CASES) >= {*POSITIVE, CASES / "errors_editor_keys.py"}
    found = pyright_findings(pyright(*EDITOR_CASES, mode=mode, config_dir=tmp_path))
    want = {f for p in EDITOR_CASES for f in expected(p, ("PR", "PE"))}
    assert {f for f in found if f.kind == "PR"} == {f for f in want if f.kind == "PR"}
    errors = {f for f in found if f.kind == "PE"}
    if mode == "basic":
        assert errors == {f for f in want if f.kind == "PE"}
    else:
        lines = {(f.file, f.line) for f in want if f.kind == "PE"}
        assert lines <= {(f.file, f.line) for f in errors}
        extra = {f for f in errors if (f.file, f.line) not in lines}
        assert all(f.value.startswith("reportUnknown") and f.file.startswith("errors_") for f in extra), extra


WITHOUT_PLUGIN = """\
from typing import reveal_type

import attrs

from kumiko_typed import Feature, ok


@attrs.frozen
class Order:
    qty: int
    lines: list[int]


shop = Feature("shop")
handler = shop.write_handler(
    "h",
    shop.pipeline(Order)
    .compute("x", lambda c: c.payload.qty)
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.compute("y", lambda c: reveal_type(c.scope["line"])),
    )
    .compute("z", lambda c: reveal_type(c.steps["x"]))
    .compute("w", lambda c: reveal_type(c.steps.get("y")))
    .return_(lambda c: ok(c.steps["x"])),
)
reveal_type(handler)
"""


def test_step_results_without_plugin(tmp_path: Path) -> None:
    """The documented choice: with no plugin mypy reads every key as ``Any``; pyright reads
    the keys it can follow exactly (DESIGN §4.8), a loop body's too, and the rest as an
    explicit ``Any`` (not Unknown, which its strict mode reports): here ``get`` gives
    ``Any``, and ``return_`` reads ``x`` exactly (docs/plugin.md, "In your editor")."""
    (tmp_path / "snippet.py").write_text(WITHOUT_PLUGIN)
    data = pyright(tmp_path / "snippet.py", mode="strict", config_dir=tmp_path)
    diagnostics = data["generalDiagnostics"]
    assert isinstance(diagnostics, list)
    revealed = [d["message"].rpartition(" is ")[2] for d in diagnostics if d["severity"] == "information"]
    assert revealed == ['"int"', '"int"', '"Any"', '"WriteHandler[Order, int]"'], diagnostics
    assert not pyright_errors(data)

    result = mypy("snippet.py", cwd=tmp_path, config=None, cache_dir=tmp_path / ".mypy_cache")
    found, _ = parse(result.stdout)
    handler_type = "kumiko_typed._feature.WriteHandler[snippet.Order, Any]"
    assert sorted(f.value for f in found) == ["Any", "Any", "Any", handler_type], result.stdout


TYPOS = """\
from kumiko_typed import Feature, ok

from _models import Order, Product

shop = Feature("shop")
handler = shop.write_handler(
    "h",
    shop.pipeline(Order)
    .compute("count", lambda c: 1)
    .compute("total", lambda c: 2.0)
    .compute("tax", lambda c: 0.2)
    .compute("shipping", lambda c: 5)
    .compute("discount", lambda c: 0)
    .compute("subtotal", lambda c: c.steps["totl"])
    .update("saved", Product, id=lambda c: c.payload.id, changes=lambda c: {"stok": 1}, version=lambda c: 1)
    .update(
        "again",
        Product,
        id=lambda c: c.payload.id,
        changes=lambda c: {"version": 2, "nmae": "x", "zzz": 3},
        version=lambda c: 1,
    )
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.compute("sku", lambda c: c.scope["lien"].sku))
    .branch(when=lambda c: c.steps["shiping"] > 0, on_true=lambda b: b.compute("x", lambda c: c.steps["discont"]))
    .return_(lambda c: ok(c.steps["late"])),
)
"""


def test_a_misspelt_key_names_the_closest_keys(tmp_path: Path) -> None:
    """mypy lists at most five keys of an anonymous TypedDict and suggests none; the plugin
    adds the closest keys of the steps (or scope) read, however many there are, wherever the
    read sits: a step, a loop body, a branch's condition or arm, ``return_``.  An
    ``update``'s ``changes=`` naming a column the entity cannot take says which can."""
    (tmp_path / "typos.py").write_text(TYPOS)
    (tmp_path / "_models.py").write_text((CASES / "_models.py").read_text())
    result = mypy("typos.py", cwd=tmp_path, config=CASES / "mypy.ini", cache_dir=tmp_path / ".cache")
    errors = [line.partition(": error: ")[2] for line in result.stdout.splitlines() if ": error: " in line]
    five = '("count", "total", "tax", "shipping", "discount", ...)'
    columns = '(the writable columns of Product: "name", "stock")'
    assert errors == [
        '"totl" is not a valid TypedDict key; expected one of ("count", "total", "tax", "shipping", "discount"); '
        'did you mean "total"?  [misc]',
        f'Unexpected TypedDict key "stok"; did you mean "stock"? {columns}  [misc]',
        'Unexpected TypedDict keys ("version", "nmae", "zzz"); "version" is set by the framework, not by changes=; '
        f'did you mean "name"?; "zzz" is no column changes= can write {columns}  [misc]',
        '"lien" is not a valid TypedDict key; expected one of ("line"); did you mean "line"?  [misc]',
        f'"shiping" is not a valid TypedDict key; expected one of {five}; did you mean "shipping"?  [misc]',
        f'"discont" is not a valid TypedDict key; expected one of {five}; did you mean "discount" or "count"?  [misc]',
        f'"late" is not a valid TypedDict key; expected one of {five}  [misc]',
    ], result.stdout + result.stderr


OWN_TYPED_DICT = """\
from typing import Any, TypedDict

from typing_extensions import ReadOnly

from kumiko_typed import Ctx, Feature

from _models import Line, Order


class Counted(TypedDict):
    count: int
    lines: list[Line]


class CountedReadOnly(TypedDict):
    count: ReadOnly[int]


class Missing(TypedDict):
    total: int


class InLoop(TypedDict):
    line: Line


def doubled(c: Ctx[Order, Counted, Any]) -> int:
    return c.steps["count"] * 2


def doubled_ro(c: Ctx[Order, CountedReadOnly, Any]) -> int:
    return c.steps["count"] * 2


def total(c: Ctx[Order, Missing, Any]) -> int:
    return c.steps["total"]


def sku(c: Ctx[Order, Any, InLoop]) -> str:
    return c.scope["line"].sku


shop = Feature("shop")
p = (
    shop.pipeline(Order)
    .compute("count", lambda c: 1)
    .compute("lines", lambda c: c.payload.lines)
    .compute("doubled", doubled)
    .compute("doubled_ro", doubled_ro)
    .compute("total", total)
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.compute("sku", sku))
)
"""


def test_a_resolvers_own_typed_dict_is_told_to_be_read_only(tmp_path: Path) -> None:
    """Steps and scope are read-only TypedDicts: a ``def`` resolver typed with a TypedDict of
    the user's own whose keys are writable is refused by mypy (with the plugin only) with two
    look-alike types; the error names the keys to declare ``ReadOnly``.  A TypedDict that
    does not fit for another reason (a key no step produced) keeps mypy's error as it is."""
    (tmp_path / "own.py").write_text(OWN_TYPED_DICT)
    (tmp_path / "_models.py").write_text((CASES / "_models.py").read_text())
    result = mypy("own.py", cwd=tmp_path, config=CASES / "mypy.ini", cache_dir=tmp_path / ".cache")
    errors = [line.partition(": error: ")[2] for line in result.stdout.splitlines() if ": error: " in line]
    fix = "ReadOnly from typing_extensions, or typing on Python 3.13+)  [arg-type]"
    assert len(errors) == 3, result.stdout + result.stderr
    assert errors[0].endswith(
        "; the keys of c.steps are read-only (resolvers only read): declare them so in Counted, "
        f"count: ReadOnly[int], lines: ReadOnly[list[Line]] ({fix}"
    ), errors[0]
    assert 'Argument 2 to "compute" of "Pipeline"' in errors[1] and "read-only" not in errors[1], errors[1]
    assert errors[2].endswith(
        "; the keys of c.scope are read-only (resolvers only read): declare them so in InLoop, "
        f"line: ReadOnly[Line] ({fix}"
    ), errors[2]


COLUMNS = """\
import uuid

from sqlalchemy import Select, select

from kumiko_typed import Ctx, Feature

from _models import Order, Product

shop = Feature("shop")


def counted(c: Ctx[Order, object, object]) -> Select[str, int, uuid.UUID]:
    return select(Product.name, Product.stock, Product.id)


p = (
    shop.pipeline(Order)
    .get_one("pairs", lambda c: select(Product.name, Product.stock))
    .find_many("counted", counted)
)
"""


def test_a_read_of_several_columns_says_a_read_keeps_one_value_per_row(tmp_path: Path) -> None:
    """mypy refused it twice (the step's argument expecting ``Select[Never]``, the lambda's
    return value) and said neither what is wrong nor what to write."""
    (tmp_path / "columns.py").write_text(COLUMNS)
    (tmp_path / "_models.py").write_text((CASES / "_models.py").read_text())
    result = mypy("columns.py", cwd=tmp_path, config=CASES / "mypy.ini", cache_dir=tmp_path / ".cache")
    errors = [line.partition(": error: ")[2] for line in result.stdout.splitlines() if ": error: " in line]
    rule = (
        "and a read step keeps one value per row: select one entity or one column (select(Product), "
        "select(Product.sku)), or read such rows in a compute with c.db.execute(select(...)).all()  [arg-type]"
    )
    assert len(errors) == 2, result.stdout + result.stderr
    assert errors[0].endswith(f'; query= of step "get_one" selects 2 columns (str, int), {rule}'), errors[0]
    assert errors[1].endswith(f'; query= of step "find_many" selects 3 columns (str, int, UUID), {rule}'), errors[1]
