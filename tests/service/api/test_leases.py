"""Leasing as a worker would: matching devices, exclusive claims, expiry, heartbeats, cancel."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import update

from service.store.models import Task, utcnow


def _expire_leases(app_client: Any) -> None:
    """Move every running lease's expiry into the past (instead of waiting for it)."""
    with app_client.sessionmaker() as session:
        session.execute(
            update(Task)
            .where(Task.status == "running")
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
        session.commit()


def test_register_returns_201_with_the_devices(api: Any) -> None:
    response = api.client.post(
        "/v1/workers",
        json={"name": "gpu-host", "devices": [api.H200, api.CPU_DEVICE]},
        headers=api.harness.worker,
    )
    assert response.status_code == 201
    body = response.json()
    assert body["id"] and body["name"] == "gpu-host"
    assert [d["key"] for d in body["devices"]] == [
        "cuda:NVIDIA H200:sm_90:132",
        "cpu:Test CPU 9000:x86_64-avx2:8",
    ]


def test_lease_hands_out_the_task_contract(api: Any) -> None:
    job = api.submit(seed=5, budget={"max_variants": 3, "max_seconds": 10})
    leased = api.lease(api.register())
    assert leased is not None
    assert leased["lease_id"] and leased["expires_at"]
    task = leased["task"]
    assert task["job_id"] == job["id"]
    assert task["task_id"] == job["problems"][0]["task_id"]
    assert task["op"] == "reduce" and task["dtype"] == "f32" and task["layout"] == "row"
    assert task["problem"] == {"m": 1024, "k": 4096, "kind": "sum"}
    assert task["device"] == {"backend": "cpu", "name": None, "arch": None}
    assert task["budget"] == {"max_variants": 3, "max_seconds": 10.0}
    assert task["strategy"] == "exhaustive" and task["objective"] == "time" and task["seed"] == 5
    assert api.get_job(job["id"])["status"] == "running"


def test_no_work_is_204(api: Any) -> None:
    assert api.lease(api.register()) is None


def test_unknown_worker_is_404(api: Any) -> None:
    response = api.client.post(
        "/v1/leases", json={"worker_id": "nobody", "backends": ["cpu"]}, headers=api.harness.worker
    )
    assert response.status_code == 404


def test_only_matching_devices_get_the_task(api: Any) -> None:
    api.submit(device={"backend": "cuda", "name": "H200", "arch": "sm_90"})
    cpu_worker = api.register(api.CPU_DEVICE)
    assert api.lease(cpu_worker, ("cpu", "cuda")) is None
    h100 = dict(api.H200, name="NVIDIA H100 80GB HBM3")
    assert api.lease(api.register(h100), ("cuda",)) is None
    wrong_arch = dict(api.H200, arch="sm_100")
    assert api.lease(api.register(wrong_arch), ("cuda",)) is None
    h200_worker = api.register(api.H200)
    assert api.lease(h200_worker, ("cpu",)) is None  # asked only for cpu work
    assert api.lease(h200_worker, ("cuda",)) is not None


def test_two_workers_never_get_the_same_task(api: Any) -> None:
    job = api.submit(problems=[{"m": 8 * (i + 1), "k": 64} for i in range(5)])
    workers = [api.register(name=f"w{i}") for i in range(3)]
    seen: list[str] = []
    for _ in range(3):
        for worker in workers:
            leased = api.lease(worker)
            if leased is not None:
                seen.append(leased["task"]["task_id"])
    assert len(seen) == 5 and len(set(seen)) == 5
    assert set(seen) == {p["task_id"] for p in job["problems"]}


def test_tasks_are_leased_in_submission_order(api: Any) -> None:
    first = api.submit(problems=[{"m": 8, "k": 8}, {"m": 16, "k": 16}])
    second = api.submit()
    worker = api.register()
    order = [api.lease(worker)["task"]["task_id"] for _ in range(3)]
    expected = [p["task_id"] for p in first["problems"]] + [second["problems"][0]["task_id"]]
    assert order == expected


def test_heartbeat_extends_and_reports_progress(api: Any) -> None:
    job = api.submit()
    leased = api.lease(api.register())
    response = api.heartbeat(leased["lease_id"], done=3, total=10)
    assert response.status_code == 200
    assert response.json()["cancelled"] is False
    assert response.json()["expires_at"] >= leased["expires_at"]
    progress = api.get_job(job["id"])["progress"]
    assert progress["candidates_done"] == 3 and progress["candidates_total"] == 10


def test_heartbeat_unknown_lease_is_404(api: Any) -> None:
    assert api.heartbeat("nope").status_code == 404


def test_expired_lease_is_requeued_and_the_old_holder_gets_409(api: Any) -> None:
    job = api.submit()
    first = api.lease(api.register(name="slow"))
    _expire_leases(api.harness)
    second = api.lease(api.register(name="fast"))
    assert second is not None and second["task"]["task_id"] == first["task"]["task_id"]
    assert api.heartbeat(first["lease_id"]).status_code == 409
    api.upload(first["lease_id"], [api.measurement("a", 5.0)], expect=409)
    assert api.heartbeat(second["lease_id"]).status_code == 200
    api.upload(second["lease_id"], [api.measurement("a", 5.0)])
    assert api.get_job(job["id"])["status"] == "done"


def test_expired_but_untaken_lease_may_carry_on(api: Any) -> None:
    api.submit(device={"backend": "cuda"})
    leased = api.lease(api.register(api.H200), ("cuda",))
    _expire_leases(api.harness)
    assert api.lease(api.register(), ("cpu",)) is None  # requeues, but a cpu worker can't take it
    response = api.heartbeat(leased["lease_id"])
    assert response.status_code == 200 and response.json()["cancelled"] is False


def test_third_expiry_fails_the_task(api: Any) -> None:
    job = api.submit()
    worker = api.register()
    for _ in range(3):
        assert api.lease(worker) is not None
        _expire_leases(api.harness)
    assert api.lease(worker) is None
    shown = api.get_job(job["id"])
    assert shown["status"] == "failed"
    assert shown["problems"][0]["status"] == "failed"
    assert "expired 3 times" in shown["problems"][0]["error"]


def test_cancelled_job_is_not_leased_and_a_running_lease_learns_it(api: Any) -> None:
    running = api.submit()
    leased = api.lease(api.register())
    queued = api.submit()
    for job in (running, queued):
        api.client.delete(f"/v1/jobs/{job['id']}", headers=api.harness.submit)
    assert api.lease(api.register()) is None
    response = api.heartbeat(leased["lease_id"])
    assert response.status_code == 200 and response.json()["cancelled"] is True
    # its measurements still count as data; the task stays cancelled
    answer = api.upload(leased["lease_id"], [api.measurement("a", 5.0)])
    assert answer["stored"] == 1 and answer["task_status"] == "cancelled"
    assert api.get_job(running["id"])["status"] == "cancelled"


def test_concurrent_claims_never_share_a_task(api: Any) -> None:
    """Claims from several threads at once, each in its own session and transaction."""
    import threading

    from service.store.models import Worker
    from service.store.queue import claim_task

    api.submit(problems=[{"m": 8 * (i + 1), "k": 64} for i in range(12)])
    worker_ids = [api.register(name=f"t{i}") for i in range(4)]
    claimed: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(len(worker_ids))

    def run(worker_id: str) -> None:
        try:
            start.wait()
            while True:
                with api.harness.sessionmaker() as session:
                    worker = session.get(Worker, worker_id)
                    result = claim_task(session, worker, ["cpu"], 60)
                    session.commit()
                if result is None:
                    return
                with lock:
                    claimed.append(result[1].id)
        except BaseException as exc:  # reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in worker_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert len(claimed) == 12 and len(set(claimed)) == 12


def test_a_lease_names_the_stored_winner_so_the_engine_times_it_beside_the_new_candidates(
    api: Any,
) -> None:
    api.submit()
    fresh = api.lease(api.register(name="first"))
    assert fresh is not None and fresh["task"]["incumbents"] == []  # nothing stored yet
    api.upload(fresh["lease_id"], [api.measurement("a", 10.0), api.measurement("b", 12.0)])
    api.submit()
    again = api.lease(api.register(name="second"))
    assert again is not None and again["task"]["incumbents"] == ["a"]
    # another problem has no incumbent
    api.submit(problems=[{"m": 2048, "k": 4096, "kind": "sum"}])
    api.upload(again["lease_id"], [])
    other = api.lease(api.register(name="third"))
    assert other is not None and other["task"]["incumbents"] == []
