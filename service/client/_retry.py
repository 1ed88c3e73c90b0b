"""When to send a request again, and how long to wait first.

Only requests that cannot do harm twice are retried on every transient failure: reads (GET),
the read-only batch query, and the uploads the service keys itself (a lease's results, by
lease and variant; build records and artifacts, by variant and content). A request that
changes state otherwise (submit a job, lease) is retried only when the connection was never
made (refused, connect timeout), because then the server cannot have seen it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

__all__ = ["RetryPolicy", "NO_RETRY"]

#: statuses that mean "try again later": rate limited, or a proxy in front of a restarting service
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; the n-th wait is ``backoff_s * 2**n``, at most ``max_backoff_s``
    (a numeric ``Retry-After`` header of a 429/503 answer is honoured within the same cap)."""

    attempts: int = 3
    backoff_s: float = 0.25
    max_backoff_s: float = 4.0
    statuses: frozenset[int] = field(default=TRANSIENT_STATUSES)

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait after failed try number ``attempt`` (0-based)."""
        wait = self.backoff_s * (2**attempt)
        if retry_after is not None:
            try:
                wait = max(wait, float(retry_after))
            except ValueError:
                pass  # an HTTP date: use our own backoff
        return min(wait, self.max_backoff_s)

    def retry_error(self, error: httpx.TransportError, idempotent: bool) -> bool:
        if idempotent:
            return True
        # the request never left this machine, so sending it again cannot do it twice
        return isinstance(error, httpx.ConnectError | httpx.ConnectTimeout)

    def retry_status(self, status: int, idempotent: bool) -> bool:
        return idempotent and status in self.statuses


NO_RETRY = RetryPolicy(attempts=1)
