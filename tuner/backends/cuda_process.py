"""A long-lived harness subprocess spoken to in JSON lines, with a timeout per request.

    proc = HarnessProcess(argv, env)
    answer = proc.request({"cmd": "run", ...}, timeout_s=60)   # HarnessTimeout on a hang

The process starts on the first request and again after it died (a CUDA fault makes the
harness exit on purpose). A hang kills it (its whole process group) and raises
:class:`HarnessTimeout`; the next request starts a fresh one.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import queue
import signal
import subprocess
import threading
from typing import IO, Any

__all__ = ["HarnessProcess", "HarnessTimeout"]

log = logging.getLogger(__name__)

_STDERR_LINES = 200
_STOP_TIMEOUT_S = 10.0


class HarnessTimeout(Exception):
    """The harness gave no answer in time; it has been killed."""


class HarnessProcess:
    def __init__(
        self, argv: list[str], env: dict[str, str], start_timeout_s: float = 180.0
    ) -> None:
        self.argv = argv
        self.env = env
        #: the harness says it is ready (torch imported, context made) within this time
        self.start_timeout_s = start_timeout_s
        self.ready: dict[str, Any] = {}
        self.proc: subprocess.Popen[str] | None = None
        self.answers: queue.Queue[str | None] = queue.Queue()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self.starts = 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> dict[str, Any] | None:
        """Start the process and wait for its ready line; a failure answer when it has none."""
        self.answers = queue.Queue()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            start_new_session=True,
        )
        self.starts += 1
        assert self.proc.stdout is not None and self.proc.stderr is not None
        threading.Thread(
            target=self._pump_answers, args=(self.proc.stdout, self.answers), daemon=True
        ).start()
        threading.Thread(target=self._pump_stderr, args=(self.proc.stderr,), daemon=True).start()
        log.info("started CUDA harness pid %d", self.proc.pid)
        try:
            line = self.answers.get(timeout=self.start_timeout_s)
        except queue.Empty:
            self.kill()
            raise HarnessTimeout(f"harness not ready within {self.start_timeout_s:.0f} s") from None
        if line is None:
            return self._died()
        self.ready = json.loads(line)
        if not self.ready.get("ready"):
            self.stop()
            return {"outcome": "runtime_error", "fatal": True, **self.ready}
        return None

    @staticmethod
    def _pump_answers(stream: IO[str], answers: queue.Queue[str | None]) -> None:
        for line in stream:
            answers.put(line)
        answers.put(None)  # EOF: the process is gone

    def _pump_stderr(self, stream: IO[str]) -> None:
        for line in stream:
            self.stderr_tail.append(line.rstrip())
            log.debug("harness: %s", line.rstrip())

    def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if not self.alive():
            failed = self.start()
            if failed is not None:
                return failed
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(payload) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died()
        try:
            line = self.answers.get(timeout=timeout_s)
        except queue.Empty:
            self.kill()
            raise HarnessTimeout(f"no answer within {timeout_s:.0f} s: harness killed") from None
        if line is None:
            return self._died()
        try:
            answer: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            self.kill()
            return {"outcome": "runtime_error", "fatal": True, "log": f"bad answer: {line[:500]}"}
        if answer.get("fatal"):
            self.stop()  # it exits by itself after a fatal answer; reap it
        return answer

    def _died(self) -> dict[str, Any]:
        rc = self.proc.wait(timeout=_STOP_TIMEOUT_S) if self.proc is not None else None
        self.proc = None
        tail = "\n".join(list(self.stderr_tail)[-40:])
        return {
            "outcome": "runtime_error",
            "fatal": True,
            "log": f"harness exited with code {rc}\n{tail}"[-4000:],
        }

    def kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("harness pid %d did not die", self.proc.pid)
        self.proc = None

    def stop(self) -> None:
        """Close stdin (the harness exits), then kill it if it lingers."""
        if self.proc is None:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=_STOP_TIMEOUT_S)
            self.proc = None
        except (subprocess.TimeoutExpired, OSError):
            self.kill()

    def close(self) -> None:
        self.stop()
