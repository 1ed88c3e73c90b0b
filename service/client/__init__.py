"""Typed HTTP client of the tunehub REST API (v1), for compilers, build scripts, the CLI and
the worker agent. It imports nothing from the service but :mod:`service.schemas`: requests
and answers are the same pydantic models the routes use.

    client = TunehubClient("http://127.0.0.1:8765", token="...", cache_dir="~/.cache/th")
    answer = client.best(ConfigQuery(op="gemm", dtype="f16", problem={"m": 16, "n": 4096,
                                                                     "k": 4096}, device="H200"))
    answer.value.params, answer.stale          # stale: served from the cache, service down
    job = client.submit(JobCreate(...)); client.wait(job.id, progress=print)

Requests are retried with exponential backoff (:class:`RetryPolicy`): reads and the read-only
batch query on every transient failure, writes only when the connection was never made.
With ``cache_dir`` every lookup answer is kept on disk: while the service is unreachable (or
answers 502/503/504) :meth:`TunehubClient.best` and :meth:`TunehubClient.query` answer from
it, marked ``stale``; after a failed connection they do so at once, without asking, for
``SERVICE_DOWN_S`` seconds (``down_s``); after that they revalidate with ``If-None-Match``
(a 304 keeps the cached body) and are fresh again.

Errors, all raised from this package and nothing else::

    ClientError             base of everything the client raises
    ├── ApiError            the server answered with an HTTP error; ``status`` and ``detail``
    │   └── LeaseLost       409 on a lease call: the lease expired or was given to another worker
    ├── ConnectionFailed    the server could not be reached (refused, DNS, timeout) after the
    │                       retries, or its reply was not the answer the API promises
    ├── WaitTimeout         ``wait()`` ran out of time; ``job`` is the last state seen
    └── ArtifactMismatch    ``fetch_artifact()``: the bytes are not the sha256 and size the
                            reference names (nothing was kept)

Built artifacts (docs/artifacts.md): ``fetch_artifact(answer.artifact, dir)`` downloads a
winner's shared object to ``<dir>/<sha256>.so`` once, checked before it is kept;
``variant_build(variant_id)`` returns what rebuilds it from source instead.
"""

from service.client._answers import Cached, QueryAnswer, best_params
from service.client._cache import ResponseCache
from service.client._client import TunehubClient
from service.client._down import SERVICE_DOWN_S, ServiceDown
from service.client._errors import *  # noqa: F403
from service.client._errors import __all__ as _errors_all
from service.client._retry import NO_RETRY, RetryPolicy
from service.client._transport import DEFAULT_TIMEOUT_S

__all__ = [
    *_errors_all,  # the exception tree above
    "TunehubClient",
    "Cached",
    "QueryAnswer",
    "RetryPolicy",
    "NO_RETRY",
    "ResponseCache",
    "best_params",
    "DEFAULT_TIMEOUT_S",
    "SERVICE_DOWN_S",
    "ServiceDown",
]
