"""A job whose device no connected worker has says so (``waiting_for``), and ``tunehub tune``
prints it instead of waiting silently."""

from __future__ import annotations

import io
import threading
import time
from datetime import timedelta
from typing import Any

from rich.console import Console
from sqlalchemy import update

from service.cli.ops import run_tune
from service.client import TunehubClient
from service.settings import Settings
from service.store.models import Worker, utcnow


def test_a_cuda_job_without_any_worker_says_what_it_waits_for(api: Any) -> None:
    job = api.submit(device={"backend": "cuda", "name": "H200", "arch": "sm_90"})
    expected = (
        "waiting for a worker with a cuda device named like 'H200' of arch sm_90; "
        "no worker is connected"
    )
    assert job["waiting_for"] == expected
    assert api.get_job(job["id"])["waiting_for"] == expected
    listed = api.client.get("/v1/jobs").json()["jobs"]
    assert [j["waiting_for"] for j in listed] == [expected]


def test_connected_workers_are_named_and_a_matching_one_clears_it(api: Any) -> None:
    cuda_job = api.submit(device={"backend": "cuda", "name": "H200"})
    cpu_job = api.submit(device={"backend": "cpu"})
    api.register(api.CPU_DEVICE)
    waiting = api.get_job(cuda_job["id"])["waiting_for"]
    assert waiting.startswith("waiting for a worker with a cuda device named like 'H200';")
    assert "connected workers have cpu:Test CPU 9000:x86_64-avx2:8" in waiting
    assert api.get_job(cpu_job["id"])["waiting_for"] is None
    api.register(api.H200)
    assert api.get_job(cuda_job["id"])["waiting_for"] is None


def test_another_product_or_arch_still_waits(api: Any) -> None:
    api.register(api.H200)
    other_name = api.submit(device={"backend": "cuda", "name": "H100"})
    other_arch = api.submit(device={"backend": "cuda", "arch": "sm_100"})
    assert "named like 'H100'" in api.get_job(other_name["id"])["waiting_for"]
    assert "cuda:NVIDIA H200:sm_90:132" in api.get_job(other_name["id"])["waiting_for"]
    assert "of arch sm_100" in api.get_job(other_arch["id"])["waiting_for"]


def test_a_worker_unseen_for_a_lease_length_is_not_connected(api: Any) -> None:
    job = api.submit(device={"backend": "cpu"})
    worker_id = api.register(api.CPU_DEVICE)
    assert api.get_job(job["id"])["waiting_for"] is None
    with api.harness.sessionmaker() as session:
        old = utcnow() - timedelta(seconds=3600)
        session.execute(update(Worker).where(Worker.id == worker_id).values(last_seen_at=old))
        session.commit()
    assert "no worker is connected" in api.get_job(job["id"])["waiting_for"]
    # polling for work (even with nothing to lease) shows the worker is alive again
    assert api.lease(worker_id, ("cuda",)) is None
    assert api.get_job(job["id"])["waiting_for"] is None


def test_leased_and_finished_jobs_wait_for_nothing(api: Any) -> None:
    worker_id = api.register(api.CPU_DEVICE)
    job = api.submit()
    leased = api.lease(worker_id)
    with api.harness.sessionmaker() as session:
        old = utcnow() - timedelta(seconds=3600)
        session.execute(update(Worker).where(Worker.id == worker_id).values(last_seen_at=old))
        session.commit()
    # the only task is leased: its expiry, not a missing device, decides what happens next
    assert api.get_job(job["id"])["waiting_for"] is None
    api.upload(leased["lease_id"], [api.measurement("a", 10.0)])
    assert api.get_job(job["id"])["status"] == "done"
    assert api.get_job(job["id"])["waiting_for"] is None


def test_tune_prints_what_the_job_waits_for(
    settings: Settings, live_service: Any, app_client: Any
) -> None:
    service = live_service(settings)
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    client = TunehubClient(service.url, app_client.tokens["admin"])

    def cancel_once_printed() -> None:
        deadline = time.monotonic() + 30.0
        while "waiting for a worker" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        for job in client.list_jobs():
            client.cancel_job(job.id)

    canceller = threading.Thread(target=cancel_once_printed, daemon=True)
    canceller.start()
    try:
        code = run_tune(
            client,
            op="reduce",
            dims={"m": 64, "k": 256, "kind": "sum"},
            dtype="f32",
            backend="cuda",
            console=console,
        )
    finally:
        canceller.join(timeout=35.0)
        client.close()
    text = out.getvalue()
    assert code == 1
    assert ": waiting for a worker with a cuda device; no worker is connected" in text
    assert text.count("waiting for a worker") == 1  # once, not on every poll
    assert "cancelled" in text
