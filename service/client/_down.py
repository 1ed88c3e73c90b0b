"""A short "service down" state: after a failed connection, lookups answer from the on-disk
cache at once for a while instead of paying the whole retry backoff on every call.

Shared by :class:`service.client.TunehubClient` (its cached lookups) and the PyTorch ops
(:mod:`service.integrations._torch_runtime`), so both hold off for the same time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["SERVICE_DOWN_S", "ServiceDown"]

#: after a failed connection, lookups ask only the on-disk cache for this long
SERVICE_DOWN_S = 30.0


class ServiceDown:
    """Whether the service failed to answer less than ``hold_s`` seconds ago (thread-safe)."""

    def __init__(
        self, hold_s: float = SERVICE_DOWN_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.hold_s = hold_s
        self._clock = clock
        self._until = 0.0
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self._clock() < self._until

    def mark(self) -> None:
        """The service could not be reached just now."""
        with self._lock:
            self._until = self._clock() + self.hold_s

    def clear(self) -> None:
        """The service answered (or the caller wants it asked again)."""
        with self._lock:
            self._until = 0.0
