"""The one exception tree of the tuning engine.

    TunerError                      base of everything the engine raises on purpose
    ├── InvalidRequestError         the request names an op/dtype/layout/dim the engine cannot tune
    ├── NoVariantsError             every variant was pruned for this problem (nothing to measure)
    ├── ToolchainError              a compiler or runtime the backend needs is missing or broken
    └── DeviceError                 the device cannot run anything (lost, busy, out of memory)

A *variant's* failure (compile error, crash, hang, wrong result) is never an exception: it is
recorded as that variant's :class:`tuner.types.Outcome`. Exceptions here mean the task itself
cannot go on; the worker reports them as a failed task.
"""

from __future__ import annotations

__all__ = [
    "TunerError",
    "InvalidRequestError",
    "NoVariantsError",
    "ToolchainError",
    "DeviceError",
]


class TunerError(Exception):
    """Base class of the engine's errors."""


class InvalidRequestError(TunerError):
    """The request cannot be tuned as written; ``field`` names the offending input."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class NoVariantsError(TunerError):
    """Every variant of the space was pruned for the problem."""


class ToolchainError(TunerError):
    """A compiler or runtime the backend needs is missing or unusable."""


class DeviceError(TunerError):
    """The device is unusable for the whole task."""
