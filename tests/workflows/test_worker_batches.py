"""The worker loops' one policy for doing a refused batch again (``_worker_batches``): the
due-run pass, the event feed and cron triggers all run their transactions through it."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy.exc import IntegrityError

from kumiko_typed._segment_savepoint import Redo
from kumiko_typed._worker_batches import batches


def _refused() -> IntegrityError:
    return IntegrityError("COMMIT", None, sqlite3.IntegrityError("FOREIGN KEY constraint failed"))


def test_each_refusal_does_the_batch_again_more_carefully_then_plain_again() -> None:
    calls: list[tuple[bool, bool]] = []
    script: list[BaseException | tuple[bool, int]] = [Redo(), (True, 1), _refused(), (True, 2), (False, 3)]

    def batch(careful: bool, checked: bool) -> tuple[bool, int]:
        calls.append((careful, checked))
        step = script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    assert list(batches(batch, lambda: False)) == [1, 2, 3]
    assert calls == [(False, False), (True, False), (False, False), (True, True), (False, False)]


def test_a_refusal_with_the_checks_on_is_not_a_segments_and_is_raised() -> None:
    def batch(careful: bool, checked: bool) -> tuple[bool, int]:
        raise _refused()

    with pytest.raises(IntegrityError):
        list(batches(batch, lambda: False))


def test_stopping_is_asked_before_every_transaction_and_no_more_ends_the_loop() -> None:
    asked: list[int] = []

    def stopping() -> bool:
        asked.append(len(asked))
        return len(asked) > 2

    ran: list[int] = []

    def batch(careful: bool, checked: bool) -> tuple[bool, int]:
        ran.append(1)
        return True, len(ran)

    assert list(batches(batch, stopping)) == [1, 2]  # the third ask says stop
    assert list(batches(lambda careful, checked: (False, 7), lambda: False)) == [7]
    assert list(batches(batch, lambda: True)) == []
