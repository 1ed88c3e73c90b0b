"""Running a tool (a compiler, a probe) as a child process, with a failed *start* retried.

Starting a process can fail for a moment with nothing wrong with the tool: ``fork``/``vfork``
short of memory or process slots (EAGAIN, ENOMEM), a signal (EINTR), a binary another thread
still holds open for writing (ETXTBSY), and, seen on a loaded CI host, ``execve`` answering
EFAULT. Reporting such a start as "the compiler is broken" stopped a worker for good, so these
are tried again after a short pause; any other ``OSError`` (a missing or non-executable tool)
and the tool's own failures (its exit status) go straight back to the caller.
"""

from __future__ import annotations

import errno
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["TRANSIENT_START_ERRNOS", "START_ATTEMPTS", "run_tool"]

#: errno values of a process start that a second try can cure
TRANSIENT_START_ERRNOS = frozenset(
    {errno.EAGAIN, errno.ENOMEM, errno.EINTR, errno.ETXTBSY, errno.EFAULT}
)
#: starts tried before the last error is raised
START_ATTEMPTS = 4
_PAUSE_S = 0.2  # doubled after each failed start: 0.2 + 0.4 + 0.8 s at most


def run_tool(
    argv: Sequence[str],
    *,
    sleep: Callable[[float], None] = time.sleep,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)``, with a
    start that failed transiently (:data:`TRANSIENT_START_ERRNOS`) tried again. Raises what
    ``subprocess.run`` raises (``OSError``, ``subprocess.TimeoutExpired``) otherwise."""
    pause = _PAUSE_S
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return subprocess.run(list(argv), capture_output=True, text=True, check=False, **kwargs)
        except OSError as exc:
            if exc.errno not in TRANSIENT_START_ERRNOS or attempt == START_ATTEMPTS:
                raise
            sleep(pause)
            pause *= 2
    raise AssertionError("unreachable")  # the loop returns or raises
