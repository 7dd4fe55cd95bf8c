"""A UUID field reads exactly the texts ``uuid.UUID(text)`` reads, as the same value, and
refuses the others with the same words: its hook follows the constructor's steps without
its checks of which of five forms it was given (the largest single cost of loading an
event that holds a UUID, bench/event_feed.py)."""

from __future__ import annotations

import pickle
import random
import uuid
from uuid import UUID

import attrs
import cattrs
import pytest

from kumiko_typed._structuring import make_converter, structure

CANONICAL = "12345678-9abc-4def-8123-456789abcdef"
FORMS = [
    CANONICAL,
    CANONICAL.upper(),
    "{" + CANONICAL + "}",
    "{{" + CANONICAL + "}}",
    "urn:uuid:" + CANONICAL,
    "uuid:" + CANONICAL,
    "urn:" + CANONICAL,
    "uurn:uuid:id:" + CANONICAL,
    CANONICAL.replace("-", ""),
    "-".join(CANONICAL.replace("-", "")),  # hyphens anywhere
    "+" + CANONICAL.replace("-", "")[1:],
    "0x" + CANONICAL.replace("-", "")[2:],
    " " + CANONICAL.replace("-", "")[1:],
    "1_" + CANONICAL.replace("-", "")[2:],
    "٠" * 32,  # digits int() reads, in another script
    "0" * 32,
    "f" * 32,
    "0" * 31,
    "0" * 33,
    "g" * 32,
    "",
    "{}",
    "-" * 36,
    "not a uuid",
    CANONICAL + " ",
    CANONICAL[:-1] + "é",
]


@attrs.frozen
class Holder:
    key: UUID


def _by_uuid(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None


def _mutations(count: int) -> list[str]:
    """Texts near a UUID's: characters of its forms dropped, doubled, swapped or put in."""
    rng = random.Random(20261207)
    alphabet = "0123456789abcdefABCDEF-{}:urnid+_x \t٠"
    texts = []
    for _ in range(count):
        text = list(rng.choice(FORMS[:9]))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text) + 1)
            move = rng.randrange(3)
            if move == 0 and at < len(text):
                del text[at]
            elif move == 1:
                text.insert(at, rng.choice(alphabet))
            elif at < len(text):
                text[at] = rng.choice(alphabet)
        texts.append("".join(text))
    return texts


@pytest.mark.parametrize("text", FORMS + _mutations(400))
def test_a_uuid_field_reads_what_the_uuid_constructor_reads(text: str) -> None:
    expected = _by_uuid(text)
    conv = make_converter()
    if expected is None:
        with pytest.raises(cattrs.ClassValidationError):
            conv.structure({"key": text}, Holder)
        assert structure(conv, {"key": text}, Holder) == [
            {"path": "$.key", "message": f"expected a UUID string, got {text!r}"}
        ]
        return
    read = conv.structure({"key": text}, Holder).key
    assert type(read) is UUID and read == expected and read.int == expected.int
    assert hash(read) == hash(expected) and str(read) == str(expected) and read.version == expected.version
    assert read.is_safe is expected.is_safe is uuid.SafeUUID.unknown
    assert pickle.loads(pickle.dumps(read)) == expected
    with pytest.raises(TypeError):
        read.int = 0  # type: ignore[misc]  # as immutable as the constructor's


@pytest.mark.parametrize("value", [None, 1, 1.5, True, [CANONICAL], {"a": 1}, uuid.UUID(CANONICAL)])
def test_a_uuid_field_refuses_what_is_no_string(value: object) -> None:
    """Not even a UUID object: the field reads JSON, whose UUID is a string."""
    problems = structure(make_converter(), {"key": value}, Holder)
    assert isinstance(problems, list) and len(problems) == 1
    assert problems[0]["path"] == "$.key" and problems[0]["message"].startswith("expected a UUID string, got ")
