"""The client's exception tree (documented in :mod:`service.client`)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ClientError",
    "ApiError",
    "LeaseLost",
    "ConnectionFailed",
    "WaitTimeout",
    "ArtifactMismatch",
]


class ClientError(Exception):
    """Base class of the client's errors."""


class ApiError(ClientError):
    """The server answered with an error status; ``detail`` is its message, made readable."""

    def __init__(self, status: int, detail: str, method: str = "", path: str = "") -> None:
        where = f" ({method} {path})" if method else ""
        super().__init__(f"HTTP {status}{where}: {detail}")
        self.status = status
        self.detail = detail
        self.method = method
        self.path = path


class LeaseLost(ApiError):
    """409 from a lease call: this worker no longer holds the lease."""


class ConnectionFailed(ClientError):
    """The server could not be reached or did not answer in time (after the retries)."""

    def __init__(self, base_url: str, reason: str) -> None:
        super().__init__(f"cannot reach tunehub at {base_url}: {reason}")
        self.base_url = base_url
        self.reason = reason


class WaitTimeout(ClientError):
    """``wait()`` gave up before the job finished; ``job`` is its last known state."""

    def __init__(self, job_id: str, seconds: float, job: Any) -> None:
        super().__init__(f"job {job_id} did not finish within {seconds:g} s")
        self.job_id = job_id
        self.job = job


class ArtifactMismatch(ClientError):
    """A fetched artifact's bytes are not the ones its reference names (sha256 or size): they
    were not kept, and must not be loaded."""

    def __init__(
        self, expected_sha256: str, expected_size: int, sha256: str, size: int, source: str
    ) -> None:
        super().__init__(
            f"artifact from {source} has sha256 {sha256} and {size} bytes; its reference "
            f"names sha256 {expected_sha256} and {expected_size} bytes: refused, nothing kept"
        )
        self.expected_sha256 = expected_sha256
        self.expected_size = expected_size
        self.sha256 = sha256
        self.size = size
        self.source = source
