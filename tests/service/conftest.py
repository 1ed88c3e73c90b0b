"""The ``api`` fixture: act as a submitter and as a worker over the REST API.

Helpers live on a fixture (not an importable module) so the tests run in any pytest
import mode.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.settings import Settings

CPU_DEVICE = {
    "backend": "cpu",
    "name": "Test CPU 9000",
    "arch": "x86_64-avx2",
    "sm_count": 8,
    "driver": "",
    "runtime": "",
    "memory_bytes": 1 << 34,
}
H200 = {
    "backend": "cuda",
    "name": "NVIDIA H200",
    "arch": "sm_90",
    "sm_count": 132,
    "driver": "560.35",
    "runtime": "13.0",
    "memory_bytes": 141 << 30,
}
TOOLCHAIN = {"compiler": "g++ 12.2.0", "template_version": "abc123", "libraries": {}}


def job_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "op": "reduce",
        "dtype": "f32",
        "problems": [{"m": 1024, "k": 4096, "kind": "sum"}],
        "device": {"backend": "cpu"},
        "strategy": "exhaustive",
        "budget": {"max_variants": 8},
    }
    body.update(overrides)
    return body


def measurement(name: str, median_us: float | None, outcome: str = "ok", **extra: Any) -> dict:
    item: dict[str, Any] = {
        "variant_id": f"sha-{name}",
        "variant_name": name,
        "params": {"pack": 4, "name": name},
        "outcome": outcome,
    }
    if median_us is not None:
        item.update(
            median_us=median_us,
            p20_us=median_us * 0.99,
            p80_us=median_us * 1.01,
            min_us=median_us * 0.98,
            reps=100,
            throughput=1000.0 / median_us,
            throughput_unit="GB/s",
            compile_seconds=0.5,
        )
    item.update(extra)
    return item


class ApiDriver:
    """Calls the API as the CLI and a worker would; asserts the expected status codes."""

    CPU_DEVICE = CPU_DEVICE
    H200 = H200
    TOOLCHAIN = TOOLCHAIN
    job_body = staticmethod(job_body)
    measurement = staticmethod(measurement)

    def __init__(self, harness: Any) -> None:
        self.harness = harness
        self.client: TestClient = harness.client

    def submit(self, **overrides: Any) -> dict[str, Any]:
        response = self.client.post(
            "/v1/jobs", json=job_body(**overrides), headers=self.harness.submit
        )
        assert response.status_code == 202, response.text
        return response.json()

    def register(self, *devices: dict[str, Any], name: str = "w") -> str:
        response = self.client.post(
            "/v1/workers",
            json={"name": name, "devices": list(devices or [CPU_DEVICE])},
            headers=self.harness.worker,
        )
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def lease(self, worker_id: str, backends: tuple[str, ...] = ("cpu",)) -> dict[str, Any] | None:
        response = self.client.post(
            "/v1/leases",
            json={"worker_id": worker_id, "backends": list(backends)},
            headers=self.harness.worker,
        )
        if response.status_code == 204:
            return None
        assert response.status_code == 200, response.text
        return response.json()

    def heartbeat(self, lease_id: str, done: int = 0, total: int = 0) -> Any:
        return self.client.post(
            f"/v1/leases/{lease_id}/heartbeat",
            json={"done": done, "total": total},
            headers=self.harness.worker,
        )

    def upload(
        self,
        lease_id: str,
        measurements: list[dict[str, Any]],
        *,
        final: bool = True,
        device: dict[str, Any] | None = None,
        toolchain: dict[str, Any] | None = None,
        error: str | None = None,
        expect: int = 200,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "device": device or CPU_DEVICE,
            "toolchain": toolchain or TOOLCHAIN,
            "measurements": measurements,
            "final": final,
        }
        if error is not None:
            body["error"] = error
        response = self.client.post(
            f"/v1/leases/{lease_id}/results", json=body, headers=self.harness.worker
        )
        assert response.status_code == expect, response.text
        return response.json()

    def tune(
        self,
        measurements: list[dict[str, Any]],
        *,
        device: dict[str, Any] | None = None,
        toolchain: dict[str, Any] | None = None,
        **job: Any,
    ) -> dict[str, Any]:
        """Submit a one-problem job, lease it as a fresh worker, upload as final; the job."""
        device = device or CPU_DEVICE
        job.setdefault("device", {"backend": device["backend"]})
        created = self.submit(**job)
        worker_id = self.register(device)
        leased = self.lease(worker_id, (device["backend"],))
        assert leased is not None and leased["task"]["job_id"] == created["id"]
        self.upload(leased["lease_id"], measurements, device=device, toolchain=toolchain)
        return self.get_job(created["id"])

    def get_job(self, job_id: str) -> dict[str, Any]:
        response = self.client.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def best(self, **params: Any) -> Any:
        return self.client.get("/v1/configs/best", params=params)


@pytest.fixture
def api(app_client: Any) -> ApiDriver:
    return ApiDriver(app_client)


# -- a real server over HTTP that a test can stop and start again ---------------------------

LIVE_START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveService:
    """A real tunehub server: uvicorn in a thread on a fixed local port, so a test can stop it
    (the service is down) and start it again on the same address (``url``)."""

    def __init__(self, settings: Settings, port: int | None = None) -> None:
        self.settings = settings
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> LiveService:
        config = uvicorn.Config(
            create_app(self.settings), host="127.0.0.1", port=self.port, log_level="warning"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="live-service", daemon=True)
        thread.start()
        deadline = time.monotonic() + LIVE_START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the live service did not start on {self.url}")
            time.sleep(0.02)
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10.0)
        self._server = self._thread = None


@pytest.fixture
def live_service() -> Iterator[Callable[[Settings], LiveService]]:
    """``live_service(settings)`` starts a LiveService; all are stopped after the test."""
    started: list[LiveService] = []

    def start(settings: Settings) -> LiveService:
        service = LiveService(settings).start()
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()
