"""The CPU runner process of one problem: inputs loaded once, a forked child per variant.

    server = RunnerServer(argv, stderr_path)
    reply = server.ask(library, symbol, output, abort_us, guard_s)
        # {"exit": 0} | {"exit": n} | {"signal": n} | {"timeout": True} | None (no answer)

The protocol is documented at the top of ``kernel_templates/cpu/_runner.cpp``. A crash or a
hang ends only the child (the runner kills a child past its run timeout); ``None`` means the
runner itself stopped answering within ``guard_s``, and the caller starts a new one.
"""

from __future__ import annotations

import json
import logging
import select
import subprocess
from pathlib import Path
from typing import IO, Any

__all__ = ["RunnerServer"]

log = logging.getLogger(__name__)

_STOP_TIMEOUT_S = 5.0


class RunnerServer:
    def __init__(self, argv: list[str], stderr_path: Path) -> None:
        self._stderr_path = stderr_path
        self._stderr: IO[bytes] = stderr_path.open("wb")
        # never a shell; the runner's own failures go to a file, read when it stops answering
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def ask(
        self, library: str, symbol: str, output: Path, abort_us: float, guard_s: float
    ) -> dict[str, Any] | None:
        fields = [library, symbol, str(output), repr(float(abort_us))]
        if any(ch in field for field in fields for ch in "\t\n"):
            raise ValueError(f"a runner request field holds a tab or newline: {fields}")
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write("\t".join(fields) + "\n")
            stdin.flush()
        except OSError:
            return None
        ready, _, _ = select.select([stdout], [], [], guard_s)
        if not ready:
            return None
        line = stdout.readline()
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            return None
        return reply if isinstance(reply, dict) else None

    def failure(self) -> str:
        """What the runner wrote to stderr (why it stopped)."""
        try:
            return self._stderr_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def close(self) -> None:
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()
