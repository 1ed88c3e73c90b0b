"""tuner.spawn.run_tool: a start that failed for a moment is tried again; a missing tool, a
start that keeps failing and the tool's own exit status go back to the caller unchanged."""

from __future__ import annotations

import errno
import subprocess
import sys
from typing import Any

import pytest

from tuner import spawn
from tuner.spawn import START_ATTEMPTS, run_tool


class FlakyStartDouble:
    """Stands in for subprocess.run: its first ``failures`` calls raise OSError(code)."""

    def __init__(self, failures: int, code: int) -> None:
        self.failures = failures
        self.code = code
        self.calls = 0
        self.real = subprocess.run

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(self.code, "Bad address" if self.code == errno.EFAULT else "failed")
        return self.real(argv, **kwargs)


def test_a_transient_start_failure_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    double = FlakyStartDouble(failures=2, code=errno.EFAULT)
    monkeypatch.setattr(spawn.subprocess, "run", double)
    pauses: list[float] = []
    proc = run_tool([sys.executable, "-c", "print('hi')"], sleep=pauses.append, timeout=30)
    assert proc.returncode == 0 and proc.stdout == "hi\n"
    assert double.calls == 3
    assert pauses == [0.2, 0.4]


def test_a_start_that_keeps_failing_raises_the_last_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    double = FlakyStartDouble(failures=START_ATTEMPTS, code=errno.EAGAIN)
    monkeypatch.setattr(spawn.subprocess, "run", double)
    with pytest.raises(OSError) as raised:
        run_tool([sys.executable, "-c", "pass"], sleep=lambda _: None)
    assert raised.value.errno == errno.EAGAIN
    assert double.calls == START_ATTEMPTS


def test_a_missing_tool_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    double = FlakyStartDouble(failures=0, code=0)
    monkeypatch.setattr(spawn.subprocess, "run", double)
    with pytest.raises(FileNotFoundError):
        run_tool(["/nonexistent/tunehub-no-such-tool"], sleep=lambda _: None)
    assert double.calls == 1


def test_the_tools_own_failure_is_its_exit_status() -> None:
    proc = run_tool([sys.executable, "-c", "import sys; sys.exit(3)"], timeout=30)
    assert proc.returncode == 3
