"""Typed HTTP client of the tunehub REST API (v1), used by the CLI, the worker agent and
build scripts. It imports nothing from the service but :mod:`service.schemas`: requests and
answers are the same pydantic models the routes use.

    client = TunehubClient("http://127.0.0.1:8765", token="...")
    job = client.submit_job(JobCreate(op="reduce", dtype="f32", problems=[{"m": 4096, "k": 4096}],
                                      device=DeviceSelector(backend="cpu")))
    client.get_job(job.id).status

A method returns the answer's model, or ``None`` where the server answers 204 (no task to
lease). A request model is validated when it is built, so a bad field fails before sending.

Errors, all raised from this module and nothing else::

    ClientError             base of everything the client raises
    ├── ApiError            the server answered with an HTTP error; ``status`` and ``detail``
    │   └── LeaseLost       409 on a lease call: the lease expired or was given to another worker
    └── ConnectionFailed    the server could not be reached (refused, DNS, timeout), or its
                            reply was not the answer the API promises
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from service.schemas.common import HealthOut
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

__all__ = [
    "ClientError",
    "ApiError",
    "LeaseLost",
    "ConnectionFailed",
    "TunehubClient",
    "DEFAULT_TIMEOUT_S",
]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
Answer = TypeVar("Answer", bound=BaseModel)


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
    """The server could not be reached or did not answer in time."""

    def __init__(self, base_url: str, reason: str) -> None:
        super().__init__(f"cannot reach tunehub at {base_url}: {reason}")
        self.base_url = base_url
        self.reason = reason


def _detail_text(detail: Any) -> str:
    """FastAPI details are strings or lists of {loc, msg}; turn either into one line."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict) and "msg" in item:
                loc = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                parts.append(f"{loc}: {item['msg']}" if loc else str(item["msg"]))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


class TunehubClient:
    """Typed calls of the v1 API over one ``httpx.Client`` (safe to share between threads)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
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
        lease_call: bool = False,
    ) -> httpx.Response:
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        content = body.model_dump_json().encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if body is not None else None
        try:
            response = self._http.request(
                method, path, content=content, headers=headers, params=clean or None
            )
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(self.base_url, f"timed out ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from None
        if response.status_code >= 400:
            try:
                detail = _detail_text(response.json().get("detail", response.text))
            except (ValueError, AttributeError):
                detail = response.text.strip()[:500] or response.reason_phrase
            error = LeaseLost if lease_call and response.status_code == 409 else ApiError
            raise error(response.status_code, detail, method, path)
        return response

    def _call(
        self,
        answer: type[Answer],
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        params: Mapping[str, Any] | None = None,
        lease_call: bool = False,
    ) -> Answer:
        response = self._send(method, path, body=body, params=params, lease_call=lease_call)
        return self._parse(answer, response, method, path)

    def _parse(
        self, answer: type[Answer], response: httpx.Response, method: str, path: str
    ) -> Answer:
        try:
            return answer.model_validate_json(response.content)
        except ValidationError as exc:
            errors = exc.error_count()
            reason = f"{method} {path}: the reply is not a {answer.__name__} ({errors} errors)"
            raise ConnectionFailed(self.base_url, reason) from None

    # -- health ---------------------------------------------------------------------------

    def healthz(self) -> HealthOut:
        return self._call(HealthOut, "GET", "/healthz")

    # -- jobs -----------------------------------------------------------------------------

    def submit_job(self, job: JobCreate) -> JobOut:
        """POST /v1/jobs; the 202 answer is the stored job."""
        return self._call(JobOut, "POST", "/v1/jobs", body=job)

    def get_job(self, job_id: str) -> JobOut:
        return self._call(JobOut, "GET", f"/v1/jobs/{job_id}")

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
        params = query.model_dump(exclude={"problem"}, exclude_none=True)
        return self._call(
            BestConfigOut, "GET", "/v1/configs/best", params={**params, **query.problem}
        )

    def query_configs(self, batch: ConfigQueryBatch) -> ConfigQueryResults:
        """POST /v1/configs/query: many problems in one request."""
        return self._call(ConfigQueryResults, "POST", "/v1/configs/query", body=batch)

    def measurements(self, **filters: Any) -> list[MeasurementOut]:
        """GET /v1/measurements, e.g. ``measurements(job_id=job.id)``."""
        return self._call(MeasurementList, "GET", "/v1/measurements", params=filters).measurements

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
        return self._parse(LeaseOut, response, "POST", "/v1/leases")

    def heartbeat(self, lease_id: str, progress: HeartbeatIn) -> HeartbeatOut:
        """Extend a lease and read the job's cancelled flag; LeaseLost when it is gone."""
        path = f"/v1/leases/{lease_id}/heartbeat"
        return self._call(HeartbeatOut, "POST", path, body=progress, lease_call=True)

    def upload_results(self, lease_id: str, results: ResultsIn) -> ResultsOut:
        """A batch of measurements for the lease; ``results.final`` ends the task."""
        path = f"/v1/leases/{lease_id}/results"
        return self._call(ResultsOut, "POST", path, body=results, lease_call=True)
