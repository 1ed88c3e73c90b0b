"""The client class: typed calls of the v1 API, retries, and the on-disk answer cache."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from service.client._answers import Answer, Cached, QueryAnswer, best_params
from service.client._artifacts import artifact_path, keep_verified, verified_file
from service.client._cache import CacheEntry, ResponseCache, request_key
from service.client._down import SERVICE_DOWN_S, ServiceDown
from service.client._errors import (
    ApiError,
    ConnectionFailed,
    LeaseLost,
    WaitTimeout,
    detail_text,
)
from service.client._retry import RetryPolicy
from service.schemas.artifacts import (
    ArtifactRef,
    ArtifactUploadOut,
    BuildUploadOut,
    VariantBuildIn,
    VariantBuildOut,
    artifact_url,
)
from service.schemas.client_results import (
    ClientBestOut,
    ClientResultsIn,
    ClientResultsOut,
    canonical_key,
)
from service.schemas.common import FINISHED_STATUSES, HealthOut
from service.schemas.configs import (
    BestConfigOut,
    ConfigQuery,
    ConfigQueryBatch,
    ConfigQueryResults,
    MeasurementList,
    MeasurementOut,
    TokenCreate,
    TokenOut,
)
from service.schemas.jobs import JobCreate, JobList, JobOut, JobSummary
from service.schemas.worker import (
    HeartbeatIn,
    HeartbeatOut,
    LeaseOut,
    LeaseRequest,
    ResultsIn,
    ResultsOut,
    WorkerOut,
    WorkerRegister,
)

__all__ = ["TunehubClient", "DEFAULT_TIMEOUT_S"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
#: answers that mean "the service is there but cannot answer now": a cached answer serves
_UNAVAILABLE = frozenset({502, 503, 504})


class TunehubClient:
    """Typed calls of the v1 API over one ``httpx.Client`` (safe to share between threads).

    ``retry`` says how often a failed request is tried again (see :class:`RetryPolicy`);
    ``cache_dir`` turns on the on-disk cache of lookups (:meth:`best`, :meth:`query`). After
    a lookup could not reach the service, lookups answer from that cache at once (stale), or
    fail at once when nothing is cached, for ``down_s`` seconds (``service_down``) instead of
    paying the retry backoff again; any answer of the service ends that state."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        *,
        retry: RetryPolicy | None = None,
        cache_dir: str | PathLike[str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        down_s: float = SERVICE_DOWN_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.service_down = ServiceDown(down_s)
        self.retry = retry or RetryPolicy()
        self.cache = ResponseCache(cache_dir) if cache_dir is not None else None
        self._sleep = sleep
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TunehubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        lease_call: bool = False,
        idempotent: bool | None = None,
        raw: bytes | None = None,
    ) -> httpx.Response:
        """One call with retries; raises ApiError for an error status, ConnectionFailed when
        the server cannot be reached. ``idempotent`` defaults to "the method is GET". The
        body is ``body`` as JSON, or ``raw`` bytes (application/octet-stream)."""
        safe = method == "GET" if idempotent is None else idempotent
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        content = body.model_dump_json().encode() if body is not None else raw
        sent = dict(headers or {})
        if body is not None:
            sent["Content-Type"] = "application/json"
        elif raw is not None:
            sent["Content-Type"] = "application/octet-stream"
        for attempt in range(self.retry.attempts):
            last = attempt == self.retry.attempts - 1
            try:
                response = self._http.request(
                    method, path, content=content, headers=sent or None, params=clean or None
                )
            except httpx.TransportError as exc:
                if last or not self.retry.retry_error(exc, safe):
                    reason = (
                        f"timed out ({type(exc).__name__})"
                        if isinstance(exc, httpx.TimeoutException)
                        else str(exc) or type(exc).__name__
                    )
                    raise ConnectionFailed(self.base_url, reason) from None
                wait = self.retry.delay(attempt)
                log.debug("%s %s: %s; retrying in %.2f s", method, path, exc, wait)
                self._sleep(wait)
                continue
            if not last and self.retry.retry_status(response.status_code, safe):
                wait = self.retry.delay(attempt, response.headers.get("Retry-After"))
                log.debug("%s %s: HTTP %d; retrying in %.2f s", method, path,
                          response.status_code, wait)  # fmt: skip
                self._sleep(wait)
                continue
            if response.status_code >= 400:
                try:
                    detail = detail_text(response.json().get("detail", response.text))
                except (ValueError, AttributeError):
                    detail = response.text.strip()[:500] or response.reason_phrase
                error = LeaseLost if lease_call and response.status_code == 409 else ApiError
                raise error(response.status_code, detail, method, path)
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _call(
        self,
        answer: type[Answer],
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        params: Mapping[str, Any] | None = None,
        lease_call: bool = False,
        idempotent: bool | None = None,
    ) -> Answer:
        response = self._send(
            method, path, body=body, params=params, lease_call=lease_call, idempotent=idempotent
        )
        return self._parse(answer, response.content, method, path)

    def _parse(self, answer: type[Answer], content: bytes | str, method: str, path: str) -> Answer:
        try:
            return answer.model_validate_json(content)
        except ValidationError as exc:
            errors = exc.error_count()
            reason = f"{method} {path}: the reply is not a {answer.__name__} ({errors} errors)"
            raise ConnectionFailed(self.base_url, reason) from None

    def cached_get(
        self, answer: type[Answer], path: str, params: Mapping[str, Any] | None = None
    ) -> Cached[Answer]:
        """GET through the on-disk cache: revalidated with ``If-None-Match`` when an entry
        has an ETag; the entry answers (``stale=True``) while the service is unreachable or
        unavailable (502/503/504). Without ``cache_dir`` it is a plain GET."""
        key = request_key("GET", path, params)
        entry = self.cache.get(key) if self.cache is not None else None
        if self.service_down.active:
            return self._stale(answer, entry, path, self._down_error(), quiet=True)
        headers = {"If-None-Match": entry.etag} if entry is not None and entry.etag else None
        try:
            response = self._send("GET", path, params=params, headers=headers)
        except ConnectionFailed as exc:
            self.service_down.mark()
            return self._stale(answer, entry, path, exc)
        except ApiError as exc:
            if exc.status in _UNAVAILABLE:
                return self._stale(answer, entry, path, exc)
            self.service_down.clear()
            if exc.status == 404 and self.cache is not None:
                self.cache.drop(key)  # the service no longer has this answer
            raise
        self.service_down.clear()
        if response.status_code == 304 and entry is not None:
            entry = self.cache.confirm(entry) if self.cache is not None else entry
            return Cached(self._parse(answer, entry.body, "GET", path), False, entry.confirmed_at)
        value = self._parse(answer, response.content, "GET", path)
        confirmed = datetime.now(UTC)
        if self.cache is not None:
            entry = self.cache.put(key, response.text, response.headers.get("ETag"))
            confirmed = entry.confirmed_at
        return Cached(value, False, confirmed)

    def _down_error(self) -> ConnectionFailed:
        return ConnectionFailed(
            self.base_url,
            f"unreachable less than {self.service_down.hold_s:g} s ago; not asked again yet",
        )

    def _stale(
        self,
        answer: type[Answer],
        entry: CacheEntry | None,
        path: str,
        error: Exception,
        quiet: bool = False,
    ) -> Cached[Answer]:
        if entry is None:
            raise error
        if not quiet:  # once per outage, not once per lookup
            log.warning("%s; answering %s from the cache of %s", error, path, entry.confirmed_at)
        return Cached(self._parse(answer, entry.body, "GET", path), True, entry.confirmed_at)

    # -- health ---------------------------------------------------------------------------

    def healthz(self) -> HealthOut:
        return self._call(HealthOut, "GET", "/healthz")

    # -- jobs -----------------------------------------------------------------------------

    def submit_job(self, job: JobCreate) -> JobOut:
        """POST /v1/jobs; the 202 answer is the stored job (retried only if never sent)."""
        return self._call(JobOut, "POST", "/v1/jobs", body=job)

    submit = submit_job

    def get_job(self, job_id: str) -> JobOut:
        return self._call(JobOut, "GET", f"/v1/jobs/{job_id}")

    def wait(
        self,
        job_id: str,
        *,
        progress: Callable[[JobOut], None] | None = None,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
    ) -> JobOut:
        """Poll the job until it is done, failed or cancelled, and return it. ``progress`` is
        called with the job whenever its progress or status changed (and once at the start).
        Raises WaitTimeout after ``timeout_s`` seconds."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        seen: tuple[Any, ...] | None = None
        while True:
            job = self.get_job(job_id)
            state = (job.status, job.progress.model_dump())
            if progress is not None and state != seen:
                progress(job)
            seen = state
            if job.status in FINISHED_STATUSES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(job_id, timeout_s or 0.0, job)
            self._sleep(poll_s)

    def list_jobs(
        self, *, status: str | None = None, op: str | None = None, limit: int | None = None
    ) -> list[JobSummary]:
        params = {"status": status, "op": op, "limit": limit}
        return self._call(JobList, "GET", "/v1/jobs", params=params).jobs

    def cancel_job(self, job_id: str) -> JobOut:
        return self._call(JobOut, "DELETE", f"/v1/jobs/{job_id}")

    # -- configs and measurements ---------------------------------------------------------

    def best_config(self, query: ConfigQuery) -> BestConfigOut:
        """GET /v1/configs/best; a shape nobody tuned raises ApiError with status 404.

        ``query.device`` is a device key (``backend:name:arch:sms``) or part of a device name."""
        return self.best(query).value

    def best(self, query: ConfigQuery) -> Cached[BestConfigOut]:
        """The best config through the cache (see :meth:`cached_get`): ApiError 404 when not
        tuned, ConnectionFailed when the service is unreachable and nothing is cached."""
        return self.cached_get(BestConfigOut, "/v1/configs/best", best_params(query))

    def best_from_cache(self, query: ConfigQuery) -> Cached[BestConfigOut] | None:
        """The answer :meth:`best` (or :meth:`query`) last stored on disk for ``query``,
        without asking the service (``stale`` is false: nothing failed); None when nothing is
        cached or the client has no ``cache_dir``. For callers that must not wait on the
        network once they hold an answer (the PyTorch ops)."""
        if self.cache is None:
            return None
        entry = self.cache.get(request_key("GET", "/v1/configs/best", best_params(query)))
        if entry is None:
            return None
        try:
            value = BestConfigOut.model_validate_json(entry.body)
        except ValidationError:
            log.warning("ignoring a cached answer that is not a BestConfigOut: %s", entry.key)
            return None
        return Cached(value, False, entry.confirmed_at)

    def query_configs(self, batch: ConfigQueryBatch) -> ConfigQueryResults:
        """POST /v1/configs/query: many problems in one request (read-only, so retried)."""
        return self._call(
            ConfigQueryResults, "POST", "/v1/configs/query", body=batch, idempotent=True
        )

    def query(self, queries: Sequence[ConfigQuery]) -> list[QueryAnswer]:
        """Many lookups in one request; each answer is cached as :meth:`best` caches it (with
        the ETag the service gives it, so the next :meth:`best` revalidates), and read back
        (``stale``) for every problem while the service cannot answer."""
        if not queries:
            return []
        if self.service_down.active:
            down = self._down_error()
            return [self._query_from_cache(query, down) for query in queries]
        try:
            results = self.query_configs(ConfigQueryBatch(queries=list(queries))).results
        except (ConnectionFailed, ApiError) as exc:
            if isinstance(exc, ApiError) and exc.status not in _UNAVAILABLE:
                raise
            if isinstance(exc, ConnectionFailed):
                self.service_down.mark()
            return [self._query_from_cache(query, exc) for query in queries]
        self.service_down.clear()
        now = datetime.now(UTC)
        answers = []
        for query, result in zip(queries, results, strict=True):
            if result.result is not None and self.cache is not None:
                key = request_key("GET", "/v1/configs/best", best_params(query))
                self.cache.put(key, result.result.model_dump_json(), result.etag)
            answers.append(QueryAnswer(query, result.result, result.error, False, now))
        return answers

    def _query_from_cache(self, query: ConfigQuery, error: Exception) -> QueryAnswer:
        key = request_key("GET", "/v1/configs/best", best_params(query))
        entry = self.cache.get(key) if self.cache is not None else None
        if entry is None:
            return QueryAnswer(query, None, f"{error}; no cached answer", unreachable=True)
        config = self._parse(BestConfigOut, entry.body, "GET", "/v1/configs/best")
        return QueryAnswer(query, config, None, True, entry.confirmed_at, unreachable=True)

    def client_best(
        self,
        op: str,
        key: dict[str, Any],
        device: str,
        toolchain: str | None = None,
    ) -> Cached[ClientBestOut]:
        """A client-measured winner (``op`` like ``triton:<kernel hash>``) through the cache:
        ApiError 404 when nobody uploaded one for this key and device."""
        params = {"op": op, "key": canonical_key(key), "device": device, "toolchain": toolchain}
        return self.cached_get(ClientBestOut, "/v1/client-configs/best", params)

    def upload_client_results(self, results: ClientResultsIn) -> ClientResultsOut:
        """POST /v1/client-results (a ``submit``-scope token): a client's own measurements."""
        return self._call(ClientResultsOut, "POST", "/v1/client-results", body=results)

    def measurements(self, **filters: Any) -> list[MeasurementOut]:
        """GET /v1/measurements, e.g. ``measurements(job_id=job.id)``."""
        return self._call(MeasurementList, "GET", "/v1/measurements", params=filters).measurements

    # -- built artifacts ------------------------------------------------------------------

    def fetch_artifact(self, ref: ArtifactRef, dest_dir: str | PathLike[str]) -> Path:
        """The artifact a best answer names, as ``<dest_dir>/<sha256>.so``: an existing file
        whose sha256 and size are the reference's is returned without a download; otherwise
        it is fetched from this service (``GET /v1/artifacts/<sha256>``, with this client's
        token) and checked before it is renamed into place. Raises ArtifactMismatch (nothing
        kept) when the bytes are not the reference's, ApiError 404 when the service has none."""
        path = artifact_path(ref, dest_dir)
        if verified_file(ref, path):
            return path
        url = artifact_url(ref.sha256)
        response = self._send("GET", url)
        return keep_verified(ref, response.content, path, f"{self.base_url}{url}")

    def variant_build(self, variant_id: str) -> VariantBuildOut:
        """GET /v1/variants/{id}/build: what rebuilds a variant's artifact (source, flags,
        compiler identity, template version, headers and libraries it needs)."""
        return self._call(VariantBuildOut, "GET", f"/v1/variants/{variant_id}/build")

    def upload_build(self, lease_id: str, build: VariantBuildIn) -> BuildUploadOut:
        """PUT a variant's build record for the lease that measured it (a worker token);
        ``stored`` is false when the service has one already (a retry is harmless)."""
        path = f"/v1/leases/{lease_id}/builds/{build.variant_id}"
        return self._call(BuildUploadOut, "PUT", path, body=build, idempotent=True)

    def upload_artifact(
        self, lease_id: str, build: VariantBuildIn, artifact: str | PathLike[str]
    ) -> ArtifactUploadOut:
        """Upload a variant's artifact (the file ``artifact``) for the lease that measured it
        with outcome ok: its build record first, then the bytes with their sha256 and size,
        which the service checks. ``stored`` is false when the same bytes were stored
        already; ApiError 409 when other bytes hold the key, 413 over the size limit."""
        self.upload_build(lease_id, build)
        data = Path(artifact).read_bytes()
        params = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        path = f"/v1/leases/{lease_id}/artifacts/{build.variant_id}"
        response = self._send("PUT", path, params=params, raw=data, idempotent=True)
        return self._parse(ArtifactUploadOut, response.content, "PUT", path)

    # -- tokens ---------------------------------------------------------------------------

    def create_token(self, token: TokenCreate) -> TokenOut:
        """POST /v1/tokens (admin): the plaintext is in the answer, and nowhere else."""
        return self._call(TokenOut, "POST", "/v1/tokens", body=token)

    # -- worker side ----------------------------------------------------------------------

    def register_worker(self, worker: WorkerRegister) -> WorkerOut:
        """POST /v1/workers; the answer carries the new worker's id."""
        return self._call(WorkerOut, "POST", "/v1/workers", body=worker)

    def lease(self, request: LeaseRequest) -> LeaseOut | None:
        """POST /v1/leases: a task to tune, or None when there is no work (204)."""
        response = self._send("POST", "/v1/leases", body=request)
        if response.status_code == 204:
            return None
        return self._parse(LeaseOut, response.content, "POST", "/v1/leases")

    def heartbeat(self, lease_id: str, progress: HeartbeatIn) -> HeartbeatOut:
        """Extend a lease and read the job's cancelled flag; LeaseLost when it is gone."""
        path = f"/v1/leases/{lease_id}/heartbeat"
        return self._call(HeartbeatOut, "POST", path, body=progress, lease_call=True)

    def upload_results(self, lease_id: str, results: ResultsIn) -> ResultsOut:
        """A batch of measurements for the lease; ``results.final`` ends the task. Retried
        like a read: the service keys an upload by lease and variant and answers the same
        body again as ``replayed`` (other content under a stored variant is a 409)."""
        path = f"/v1/leases/{lease_id}/results"
        return self._call(ResultsOut, "POST", path, body=results, lease_call=True, idempotent=True)
