"""Writes nobody can forge: worker tokens bound to their workers, idempotent uploads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, inspect, select, update

from service.api.app import create_app
from service.settings import Settings
from service.store.db import current_revision, downgrade, head_revision, make_engine, upgrade
from service.store.models import Measurement, Task, Worker, utcnow
from service.store.tokens import SCOPES, create_token


def _worker_token(api: Any, name: str) -> dict[str, str]:
    """A second worker-scope token, as a second GPU host would hold."""
    with api.harness.sessionmaker() as session:
        token = create_token(session, name, ["worker"])
        session.commit()
    return {"Authorization": f"Bearer {token}"}


def _register(api: Any, headers: dict[str, str], name: str = "w") -> str:
    response = api.client.post(
        "/v1/workers", json={"name": name, "devices": [api.CPU_DEVICE]}, headers=headers
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _results(api: Any, lease_id: str, headers: dict[str, str], **body: Any) -> Any:
    payload = {"device": api.CPU_DEVICE, "toolchain": api.TOOLCHAIN, "final": True, **body}
    return api.client.post(f"/v1/leases/{lease_id}/results", json=payload, headers=headers)


def _count(api: Any) -> int:
    with api.harness.sessionmaker() as session:
        return session.scalar(select(func.count()).select_from(Measurement)) or 0


def test_the_worker_is_bound_to_the_token_that_registered_it(api: Any) -> None:
    worker_id = api.register()
    with api.harness.sessionmaker() as session:
        worker = session.get(Worker, worker_id)
        assert worker is not None and worker.token_id is not None


def test_another_token_cannot_lease_for_a_worker(api: Any) -> None:
    api.submit()
    worker_id = api.register()
    intruder = _worker_token(api, "intruder")
    response = api.client.post(
        "/v1/leases", json={"worker_id": worker_id, "backends": ["cpu"]}, headers=intruder
    )
    assert response.status_code == 403, response.text
    assert "another token" in response.json()["detail"]
    # nothing was leased: the owner still gets the task
    assert api.lease(worker_id) is not None


def test_another_worker_cannot_heartbeat_or_upload_to_a_lease(api: Any) -> None:
    job = api.submit()
    leased = api.lease(api.register())
    assert leased is not None
    lease_id = leased["lease_id"]
    intruder = _worker_token(api, "intruder")
    _register(api, intruder, "intruder-host")  # a registered worker of its own changes nothing

    beat = api.client.post(
        f"/v1/leases/{lease_id}/heartbeat", json={"done": 1, "total": 2}, headers=intruder
    )
    assert beat.status_code == 403, beat.text
    fake = _results(api, lease_id, intruder, measurements=[api.measurement("fake", 0.001)])
    assert fake.status_code == 403, fake.text
    assert "another token" in fake.json()["detail"]
    assert _count(api) == 0
    assert api.get_job(job["id"])["status"] == "running"
    # no fake winner is served
    best = api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum")
    assert best.status_code == 404
    # the holder carries on
    assert api.heartbeat(lease_id, 1, 2).status_code == 200
    api.upload(lease_id, [api.measurement("real", 5.0)])
    assert api.get_job(job["id"])["problems"][0]["winner"]["variant_name"] == "real"


def test_an_unknown_lease_is_still_404_for_any_worker_token(api: Any) -> None:
    intruder = _worker_token(api, "other")
    response = _results(api, "nope", intruder, measurements=[api.measurement("a", 1.0)])
    assert response.status_code == 404


def test_a_retried_upload_adds_no_rows_and_gets_the_same_answer(api: Any) -> None:
    api.submit()
    leased = api.lease(api.register())
    assert leased is not None
    lease_id = leased["lease_id"]
    partial = [api.measurement("a", 10.0), api.measurement("b", None, outcome="timeout")]
    first = api.upload(lease_id, partial, final=False)
    again = api.upload(lease_id, partial, final=False)
    assert first == {
        "stored": 2,
        "replayed": 0,
        "kept": 0,
        "winner": None,
        "task_status": "running",
    }
    assert again == {**first, "stored": 0, "replayed": 2}
    assert _count(api) == 2

    final = [api.measurement("c", 4.0), api.measurement("a", 10.0)]
    answer = api.upload(lease_id, final)
    assert answer["task_status"] == "done" and answer["winner"]["variant_name"] == "c"
    assert _count(api) == 3
    # the final upload retried (its answer was lost on the way): same winner, no rows
    assert api.upload(lease_id, final) == {**answer, "stored": 0, "replayed": 2}
    assert _count(api) == 3
    # but new measurements after the final one are refused
    api.upload(lease_id, [api.measurement("d", 1.0)], expect=409)
    assert _count(api) == 3


# -- uploaded variants must be ones the op's space accepts ----------------------------------

REAL = {"pack": 4, "acc": 2, "unroll": 2}


def _real(name: str = "reduce_f32_p4_a2_u2", params: dict[str, Any] | None = None, **kw: Any):
    item = {
        "variant_id": "f" * 64,
        "variant_name": name,
        "params": dict(REAL if params is None else params),
        "outcome": "ok",
        "median_us": 5.0,
    }
    return {**item, **kw}


@pytest.fixture
def strict_api(api: Any, settings: Settings) -> Iterator[Any]:
    """The API driver over an app that verifies uploaded variants (the default setting)."""
    app = create_app(settings.model_copy(update={"verify_variants": True}))
    with app.state.sessionmaker() as session:
        tokens = {scope: create_token(session, f"strict-{scope}", [scope]) for scope in SCOPES}
        session.commit()
    headers = {scope: {"Authorization": f"Bearer {t}"} for scope, t in tokens.items()}
    with TestClient(app) as client:
        harness = SimpleNamespace(
            client=client, sessionmaker=app.state.sessionmaker, tokens=tokens, **headers
        )
        yield type(api)(harness)


def _strict_lease(api: Any, **job: Any) -> str:
    api.submit(**job)
    leased = api.lease(api.register())
    assert leased is not None
    return leased["lease_id"]


def test_a_real_variant_of_the_space_is_accepted(strict_api: Any) -> None:
    lease_id = _strict_lease(strict_api)
    answer = strict_api.upload(lease_id, [_real()])
    assert answer["winner"]["variant_name"] == "reduce_f32_p4_a2_u2"


@pytest.mark.parametrize(
    ("measurement", "says"),
    [
        (_real(params={"pack": 3, "acc": 2, "unroll": 2}), "not in the cpu reduce space"),
        (_real(params={**REAL, "evil": 1}), "not in the cpu reduce space"),
        (_real(name="reduce_f32_p8_a8_u2"), "does not match its params"),
        (_real(name="fastest_ever"), "does not match its params"),
    ],
)
def test_an_invented_variant_is_422_naming_it(
    strict_api: Any, measurement: dict[str, Any], says: str
) -> None:
    lease_id = _strict_lease(strict_api)
    ok = _real(name="reduce_f32_p1_a1_u1", params={"pack": 1, "acc": 1, "unroll": 1})
    ok["variant_id"] = "e" * 64
    error = strict_api.upload(lease_id, [ok, measurement], expect=422)["detail"][0]
    assert error["loc"] == ["body", "measurements", 1, "variant_name"]
    assert says in error["msg"] and measurement["variant_name"] in error["msg"]
    assert _count(strict_api) == 0  # the whole batch is refused


def test_a_variant_pruned_for_the_problem_is_422(strict_api: Any) -> None:
    lease_id = _strict_lease(strict_api, problems=[{"m": 64, "k": 8, "kind": "sum"}])
    error = strict_api.upload(lease_id, [_real()], expect=422)["detail"][0]
    assert "pruned for" in error["msg"] and "exceeds the row length k=8" in error["msg"]
    # reported as pruned, it is accepted (it never ran, so it cannot win)
    answer = strict_api.upload(lease_id, [_real(outcome="pruned", median_us=None)])
    assert answer["stored"] == 1 and answer["winner"] is None


def test_the_device_must_be_one_the_worker_registered(strict_api: Any) -> None:
    lease_id = _strict_lease(strict_api)
    other = {**strict_api.CPU_DEVICE, "name": "Another CPU", "sm_count": 64}
    error = strict_api.upload(lease_id, [_real()], device=other, expect=422)["detail"][0]
    assert error["loc"] == ["body", "device"]
    assert "not one this worker registered" in error["msg"]


def test_a_known_variant_id_cannot_be_renamed(strict_api: Any) -> None:
    lease_id = _strict_lease(strict_api, problems=[{"m": 8, "k": 64}, {"m": 16, "k": 64}])
    strict_api.upload(lease_id, [_real()])
    worker = strict_api.register(name="w2")
    second = strict_api.lease(worker)
    assert second is not None
    slow = _real(name="reduce_f32_p1_a1_u1", params={"pack": 1, "acc": 1, "unroll": 1})
    error = strict_api.upload(second["lease_id"], [slow], expect=422)["detail"][0]
    assert error["loc"] == ["body", "measurements", 0, "variant_id"]
    assert "stored as reduce 'reduce_f32_p4_a2_u2'" in error["msg"]


def test_two_copies_of_one_final_upload_at_once_store_it_once(api: Any) -> None:
    job = api.submit(confirm=2)
    leased = api.lease(api.register())
    assert leased is not None
    body = {
        "device": api.CPU_DEVICE,
        "toolchain": api.TOOLCHAIN,
        "measurements": [api.measurement(name, 1.0 + i) for i, name in enumerate("abcdefgh")],
        "final": True,
    }
    url = f"/v1/leases/{leased['lease_id']}/results"
    barrier = threading.Barrier(2)

    def post() -> Any:
        barrier.wait()
        return api.client.post(url, json=body, headers=api.harness.worker)

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: post(), range(2))
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    # one stored the batch, the other was told it replayed it; both name the same winner
    answers = sorted((a.json() for a in (first, second)), key=lambda a: a["stored"])
    assert [(a["stored"], a["replayed"]) for a in answers] == [(0, 8), (8, 0)]
    assert answers[0]["winner"] == answers[1]["winner"]
    assert first.json()["winner"]["variant_name"] == "a"
    assert _count(api) == 8
    remeasuring = [p for p in api.get_job(job["id"])["problems"] if p["confirm_of"]]
    assert len(remeasuring) == 1


def test_migration_0004_keys_uploads_by_lease_and_variant(empty_database_url: str) -> None:
    upgrade(empty_database_url)
    engine = make_engine(empty_database_url)
    try:
        inspector = inspect(engine)
        uniques = [
            tuple(u["column_names"]) for u in inspector.get_unique_constraints("measurements")
        ]
        worker_columns = {c["name"] for c in inspector.get_columns("workers")}
        best_columns = {c["name"] for c in inspector.get_columns("best_configs")}
    finally:
        engine.dispose()
    assert ("lease_id", "variant_id") in uniques
    assert "token_id" in worker_columns and "confirmed" in best_columns
    downgrade(empty_database_url, "0003")
    assert current_revision(empty_database_url) == "0003"
    engine = make_engine(empty_database_url)
    try:
        assert "token_id" not in {c["name"] for c in inspect(engine).get_columns("workers")}
    finally:
        engine.dispose()
    upgrade(empty_database_url)
    assert current_revision(empty_database_url) == head_revision()


def test_a_task_leased_again_keeps_one_row_per_variant(api: Any) -> None:
    job = api.submit()
    first = api.lease(api.register(name="dies"))
    assert first is not None
    api.upload(
        first["lease_id"], [api.measurement("a", 5.0), api.measurement("b", 6.0)], final=False
    )
    with api.harness.sessionmaker() as session:  # the worker died: its lease runs out
        session.execute(update(Task).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
        session.commit()
    second = api.lease(api.register(name="takes over"))
    assert second is not None and second["task"]["task_id"] == first["task"]["task_id"]
    answer = api.upload(second["lease_id"], [api.measurement("a", 4.0), api.measurement("c", 7.0)])
    assert _count(api) == 3  # a, b, c: the second lease's "a" is not stored again
    assert answer["winner"]["variant_name"] == "a" and answer["winner"]["median_us"] == 5.0
    assert api.get_job(job["id"])["status"] == "done"


def test_a_worker_registered_before_the_binding_must_register_again(api: Any) -> None:
    worker_id = api.register()
    with api.harness.sessionmaker() as session:  # as migration 0004 leaves older workers
        session.execute(update(Worker).values(token_id=None))
        session.commit()
    response = api.client.post(
        "/v1/leases", json={"worker_id": worker_id, "backends": ["cpu"]}, headers=api.harness.worker
    )
    assert response.status_code == 403
    assert "register again" in response.json()["detail"]
