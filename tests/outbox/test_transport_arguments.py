"""Mail transport arguments that could not do what they say are refused when the
transport is made, naming the fix, not found out at a delivery."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from kumiko_typed import MaildirTransport, SmtpTransport
from kumiko_typed._mail import MailMessage


def test_an_smtp_timeout_longer_than_its_deadline_is_refused() -> None:
    """A per-operation timeout past the deadline never fires: the deadline cuts the send
    first, and the timed-out greeting's hint (the TLS modes mixed up) is never given.
    Before, ``SmtpTransport(timeout=50, deadline=5)`` was taken as it was."""
    with pytest.raises(ValueError, match=r"timeout=50 is longer than deadline=5: .* give timeout=5 or less"):
        SmtpTransport("127.0.0.1", timeout=50, deadline=5)
    assert SmtpTransport("127.0.0.1", timeout=5, deadline=5).operation_timeout == 5


@pytest.mark.parametrize(("deadline", "timeout"), [(60.0, 30.0), (10.0, 10.0), (1.0, 1.0)])
def test_without_a_timeout_an_smtp_operation_waits_30_s_or_the_deadline(deadline: float, timeout: float) -> None:
    assert SmtpTransport("127.0.0.1", deadline=deadline).operation_timeout == timeout


@pytest.mark.parametrize("folder", ["", " ", None, 3])
def test_a_maildir_without_a_folder_is_refused(folder: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Path("")`` is the working directory: ``MaildirTransport("")`` (an unset variable
    read with ``os.environ.get(..., "")``) wrote every mail among the worker's own files."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"folder must name the directory to write mail into, e\.g\. MaildirTransport"):
        transport = MaildirTransport(folder)  # type: ignore[arg-type]
        transport.send(MailMessage(uuid.uuid4(), ("a@example.com",), "Hi", "Hello"), lambda ref: "")
    assert os.listdir(tmp_path) == []
