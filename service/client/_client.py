"""The client class: typed calls of the v1 API, retries, and the on-disk answer cache."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from os import PathLike
from pathlib import Path
from typing import Any

from service.client._artifacts import artifact_path, keep_verified, verified_file
from service.client._errors import (
    WaitTimeout,
)
from service.client._lookups import CachedLookups
from service.schemas.artifacts import (
    ArtifactRef,
    ArtifactUploadOut,
    BuildUploadOut,
    VariantBuildIn,
    VariantBuildOut,
    artifact_url,
)
from service.schemas.client_results import (
    ClientResultsIn,
    ClientResultsOut,
)
from service.schemas.common import FINISHED_STATUSES, HealthOut
from service.schemas.configs import (
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

__all__ = ["TunehubClient"]


class TunehubClient(CachedLookups):
    """Typed calls of the v1 API over one ``httpx.Client`` (safe to share between threads).

    ``retry`` says how often a failed request is tried again (see :class:`RetryPolicy`);
    ``cache_dir`` turns on the on-disk cache of lookups (:meth:`best`, :meth:`query`). After
    a lookup could not reach the service, lookups answer from that cache at once (stale), or
    fail at once when nothing is cached, for ``down_s`` seconds (``service_down``) instead of
    paying the retry backoff again; any answer of the service ends that state."""

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
