"""HTTP client of the tunehub REST API (v1), used by the CLI and the worker agent.

    client = TunehubClient("http://127.0.0.1:8765", token="...")
    job = client.submit_job(op="reduce", dtype="f32", problems=[{"m": 4096, "k": 4096}])
    client.get_job(job["id"])

Every method returns the decoded JSON body (a ``dict`` or ``list``), or ``None`` where the
server answers 204 (no content, e.g. no task to lease).

Errors, all raised from this module and nothing else::

    ClientError             base of everything the client raises
    ├── ApiError            the server answered with an HTTP error; ``status`` and ``detail``
    │   └── LeaseLost       409 on a lease call: the lease expired or was given to another worker
    └── ConnectionFailed    the server could not be reached (refused, DNS, timeout, broken reply)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

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

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        lease_call: bool = False,
    ) -> Any:
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(method, path, json=json, params=clean or None)
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(self.base_url, f"timed out ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from None
        if response.status_code == 204:
            return None
        if response.status_code >= 400:
            try:
                detail = _detail_text(response.json().get("detail", response.text))
            except (ValueError, AttributeError):
                detail = response.text.strip()[:500] or response.reason_phrase
            error = LeaseLost if lease_call and response.status_code == 409 else ApiError
            raise error(response.status_code, detail, method, path)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ConnectionFailed(self.base_url, f"{method} {path}: reply is not JSON") from None

    # -- health ---------------------------------------------------------------------------

    def healthz(self) -> dict[str, Any]:
        return self._request("GET", "/healthz")

    # -- jobs -----------------------------------------------------------------------------

    def submit_job(
        self,
        *,
        op: str,
        dtype: str,
        problems: Sequence[Mapping[str, Any]],
        device: Mapping[str, Any] | None = None,
        layout: str | None = None,
        strategy: str = "exhaustive",
        max_variants: int | None = None,
        max_seconds: float | None = None,
        objective: str = "time",
        seed: int = 0,
    ) -> dict[str, Any]:
        """POST /v1/jobs; returns the 202 body ``{id, status, ...}``."""
        body: dict[str, Any] = {
            "op": op,
            "dtype": dtype,
            "problems": [dict(p) for p in problems],
            "device": dict(device or {"backend": "cpu"}),
            "strategy": strategy,
            "budget": {"max_variants": max_variants, "max_seconds": max_seconds},
            "objective": objective,
            "seed": seed,
        }
        if layout is not None:
            body["layout"] = layout
        return self._request("POST", "/v1/jobs", json=body)

    def get_job(self, job_id: int | str) -> dict[str, Any]:
        return self._request("GET", f"/v1/jobs/{job_id}")

    def list_jobs(self, **filters: Any) -> list[dict[str, Any]]:
        return _items(self._request("GET", "/v1/jobs", params=filters))

    def cancel_job(self, job_id: int | str) -> dict[str, Any] | None:
        return self._request("DELETE", f"/v1/jobs/{job_id}")

    # -- configs and measurements ---------------------------------------------------------

    def best_config(
        self,
        *,
        op: str,
        dtype: str,
        dims: Mapping[str, Any],
        layout: str | None = None,
        device: str | None = None,
        backend: str | None = None,
        toolchain: str | None = None,
    ) -> dict[str, Any]:
        """GET /v1/configs/best; a shape nobody tuned raises ApiError with status 404.

        ``device`` is a device key (``backend:name:arch:sms``) or part of a device name."""
        params = {"op": op, "dtype": dtype, "layout": layout, "device": device,
                  "backend": backend, "toolchain": toolchain, **dims}
        return self._request("GET", "/v1/configs/best", params=params)

    def query_configs(self, queries: Sequence[Mapping[str, Any]]) -> Any:
        """POST /v1/configs/query: many problems in one request."""
        body = {"queries": [dict(q) for q in queries]}
        return self._request("POST", "/v1/configs/query", json=body)

    def measurements(self, **filters: Any) -> list[dict[str, Any]]:
        """GET /v1/measurements, e.g. ``measurements(job_id=3)``."""
        return _items(self._request("GET", "/v1/measurements", params=filters))

    # -- worker side ----------------------------------------------------------------------

    def register_worker(self, name: str, devices: Sequence[Mapping[str, Any]]) -> Any:
        """POST /v1/workers; returns the new worker's id."""
        body = {"name": name, "devices": [dict(d) for d in devices]}
        return self._request("POST", "/v1/workers", json=body)["id"]

    def lease(self, worker_id: Any, backends: Sequence[str]) -> dict[str, Any] | None:
        """POST /v1/leases: ``{lease_id, expires_at, task}``, or None when there is no work."""
        body = {"worker_id": worker_id, "backends": list(backends)}
        return self._request("POST", "/v1/leases", json=body)

    def heartbeat(self, lease_id: Any, done: int, total: int) -> dict[str, Any]:
        """Extend a lease: ``{expires_at, cancelled}``; LeaseLost when it is gone."""
        return self._request(
            "POST", f"/v1/leases/{lease_id}/heartbeat",
            json={"done": done, "total": total}, lease_call=True,
        )

    def upload_results(
        self,
        lease_id: Any,
        *,
        device: Mapping[str, Any],
        toolchain: Mapping[str, Any],
        measurements: Sequence[Mapping[str, Any]],
        final: bool,
        error: str | None = None,
    ) -> Any:
        """A batch of measurements for the lease; ``final=True`` ends the task."""
        body: dict[str, Any] = {
            "device": dict(device),
            "toolchain": dict(toolchain),
            "measurements": [dict(m) for m in measurements],
            "final": final,
        }
        if error is not None:
            body["error"] = error
        return self._request("POST", f"/v1/leases/{lease_id}/results", json=body, lease_call=True)


def _items(body: Any) -> list[dict[str, Any]]:
    """Lists come bare or wrapped (``{"items": [...]}``); callers always get the list."""
    if body is None:
        return []
    if isinstance(body, dict):
        for key in ("items", "jobs", "measurements", "results"):
            if isinstance(body.get(key), list):
                return body[key]
    return list(body)
