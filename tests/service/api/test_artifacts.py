"""Built artifacts over the REST API (both databases): who may upload, the checks on the bytes
and the record, idempotency, limits, the reads, and best answers that name their artifact.

The variants are real renderings of the CPU reduce template (real ids, real records); the
bytes are arbitrary (the service stores code, it never runs it). The whole loop with a real
worker, g++ and ctypes is in test_artifacts_e2e.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.agent.wire import build_in
from service.api.app import create_app
from service.settings import Settings
from service.store.tokens import create_token
from tests.service.api.test_fastpath import _statements
from tests.tuner.cpu_helpers import RENDER_FLAGS
from tuner.backends.cpu_artifact import BUILD_FLAGS, standalone_source
from tuner.render import TEMPLATES_DIR, render_variant, template_version
from tuner.spaces.cpu_reduce import CpuReduceSpace
from tuner.types import BuildRecord, Variant

SPACE = CpuReduceSpace()
COMPILER = "g++ (test) 12.2.0 native=test/000000000000"
PROBLEM = {"m": 1024, "k": 4096, "kind": "sum"}
BYTES = b"\x7fELF not really a shared object, but bytes the service keeps as they are" * 4


def variant(pack: int = 4) -> Variant:
    params = {"pack": pack, "acc": 2, "unroll": 2}
    return render_variant(SPACE, params, "f32", "row", "x86_64-avx2", RENDER_FLAGS, COMPILER)


def record(v: Variant) -> dict[str, Any]:
    """The build record a worker would send for ``v`` (as JSON)."""
    built = BuildRecord(
        variant_id=v.id,
        name=v.name,
        op=v.op,
        source=standalone_source(v.name, v.id, v.source, TEMPLATES_DIR / "cpu"),
        flags=v.flags,
        build_flags=BUILD_FLAGS,
        compiler=COMPILER,
        compiler_name="g++",
        template_version=template_version(SPACE.template),
        variant_source=v.source,
    )
    return build_in(built).model_dump(mode="json")


def measured(api: Any, v: Variant, median: float, outcome: str = "ok") -> dict[str, Any]:
    item = api.measurement(v.name, median if outcome == "ok" else None, outcome)
    item.update(variant_id=v.id, params=dict(v.params))
    return item


def tuned_lease(
    api: Any, *variants: Variant, headers: dict[str, str] | None = None, outcome: str = "ok"
) -> str:
    """Submit a reduce job, lease it as a fresh worker (of ``headers``' token), upload the
    variants' measurements as final; the lease id."""
    headers = headers or api.harness.worker
    api.submit(problems=[PROBLEM])
    response = api.client.post(
        "/v1/workers", json={"name": "w", "devices": [api.CPU_DEVICE]}, headers=headers
    )
    worker_id = response.json()["id"]
    leased = api.client.post(
        "/v1/leases", json={"worker_id": worker_id, "backends": ["cpu"]}, headers=headers
    ).json()
    body = {
        "device": api.CPU_DEVICE,
        "toolchain": api.TOOLCHAIN,
        "measurements": [
            measured(api, v, 10.0 + i, outcome if i == 0 else "ok") for i, v in enumerate(variants)
        ],
        "final": True,
    }
    uploaded = api.client.post(
        f"/v1/leases/{leased['lease_id']}/results", json=body, headers=headers
    )
    assert uploaded.status_code == 200, uploaded.text
    return str(leased["lease_id"])


def put_build(client: TestClient, lease: str, v: Variant, headers: dict[str, str]) -> Any:
    return client.put(f"/v1/leases/{lease}/builds/{v.id}", json=record(v), headers=headers)


def put_artifact(
    client: TestClient,
    lease: str,
    v: Variant,
    headers: dict[str, str],
    data: bytes = BYTES,
    **declared: Any,
) -> Any:
    params = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), **declared}
    return client.put(
        f"/v1/leases/{lease}/artifacts/{v.id}",
        params=params,
        content=data,
        headers={**headers, "Content-Type": "application/octet-stream"},
    )


def share(api: Any, lease: str, v: Variant, data: bytes = BYTES) -> dict[str, Any]:
    assert put_build(api.client, lease, v, api.harness.worker).status_code == 201
    response = put_artifact(api.client, lease, v, api.harness.worker, data)
    assert response.status_code == 201, response.text
    return dict(response.json())


def best(api: Any) -> dict[str, Any]:
    response = api.best(op="reduce", dtype="f32", **PROBLEM)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_shared_artifact_is_named_by_the_best_answer_and_served(
    api: Any, settings: Settings
) -> None:
    v = variant()
    lease = tuned_lease(api, v)
    assert best(api)["artifact"] is None  # no artifact yet
    answer = share(api, lease, v)
    sha = hashlib.sha256(BYTES).hexdigest()
    assert answer["stored"] is True
    ref = best(api)["artifact"]
    assert ref == answer["artifact"]
    assert ref == {
        "sha256": sha,
        "size": len(BYTES),
        "variant_id": v.id,
        "arch": api.CPU_DEVICE["arch"],
        "toolchain": best(api)["toolchain"]["key"],
        "backend": "cpu",
        "url": f"/v1/artifacts/{sha}",
        "abi": "tunehub-1",
    }
    # content-addressed on disk, under the data dir by default
    assert (settings.data_dir / "artifacts" / sha[:2] / sha).read_bytes() == BYTES
    fetched = api.client.get(ref["url"])
    assert fetched.status_code == 200 and fetched.content == BYTES
    assert fetched.headers["etag"] == f'"{sha}"'
    assert fetched.headers["content-type"] == "application/octet-stream"
    again = api.client.get(ref["url"], headers={"If-None-Match": f'"{sha}"'})
    assert again.status_code == 304 and again.content == b""
    build = api.client.get(f"/v1/variants/{v.id}/build")
    assert build.status_code == 200
    sent = record(v)
    for field in ("source", "variant_source", "flags", "build_flags", "compiler", "needs"):
        assert build.json()[field] == sent[field], field
    assert build.json()["name"] == v.name and build.json()["op"] == "reduce"


def test_the_batch_and_the_nearest_answer_name_it_too(api: Any) -> None:
    v = variant()
    share(api, tuned_lease(api, v), v)
    nearest = api.best(op="reduce", dtype="f32", m=2048, k=4096, kind="sum").json()
    assert nearest["exact"] is False and nearest["artifact"]["variant_id"] == v.id
    batch = api.client.post(
        "/v1/configs/query",
        json={
            "queries": [
                {"op": "reduce", "dtype": "f32", "problem": PROBLEM},
                {"op": "reduce", "dtype": "f32", "problem": {**PROBLEM, "m": 512}},
                {"op": "softmax", "dtype": "f32", "problem": {"m": 4, "k": 8}},
            ]
        },
    ).json()["results"]
    assert [r["result"]["artifact"]["variant_id"] for r in batch[:2]] == [v.id, v.id]
    assert batch[2]["result"] is None


def test_a_retry_is_idempotent_and_other_bytes_are_a_conflict(api: Any) -> None:
    v = variant()
    lease = tuned_lease(api, v)
    share(api, lease, v)
    worker = api.harness.worker
    build_again = put_build(api.client, lease, v, worker)
    assert build_again.status_code == 200 and build_again.json()["stored"] is False
    again = put_artifact(api.client, lease, v, worker)
    assert again.status_code == 200, again.text
    assert again.json()["stored"] is False and "already" in again.json()["detail"]
    other = put_artifact(api.client, lease, v, worker, BYTES + b"!")
    assert other.status_code == 409 and "other bytes" in other.json()["detail"]
    assert best(api)["artifact"]["sha256"] == hashlib.sha256(BYTES).hexdigest()


def test_only_a_worker_token_uploads(api: Any) -> None:
    v = variant()
    lease = tuned_lease(api, v)
    for scope in ("read", "submit"):
        headers = getattr(api.harness, scope)
        assert put_build(api.client, lease, v, headers).status_code == 403
        refused = put_artifact(api.client, lease, v, headers)
        assert refused.status_code == 403 and "worker" in refused.json()["detail"]
    assert put_artifact(api.client, lease, v, {}).status_code == 401
    assert best(api)["artifact"] is None


def test_a_worker_token_uploads_only_for_its_own_lease(api: Any) -> None:
    v = variant()
    lease = tuned_lease(api, v)
    with api.harness.sessionmaker() as session:
        other = create_token(session, "other-host", ["worker"])
        session.commit()
    stranger = {"Authorization": f"Bearer {other}"}
    refused = put_build(api.client, lease, v, stranger)
    assert refused.status_code == 403 and "another token" in refused.json()["detail"]
    assert put_artifact(api.client, lease, v, stranger).status_code == 403
    assert put_artifact(api.client, "0" * 32, v, api.harness.worker).status_code == 404


def test_only_a_variant_verified_on_the_lease(api: Any) -> None:
    measured_one, never, failed = variant(4), variant(8), variant(2)
    lease = tuned_lease(api, failed, measured_one, outcome="wrong_result")
    worker = api.harness.worker
    refused = put_build(api.client, lease, never, worker)
    assert refused.status_code == 403 and "not measured on lease" in refused.json()["detail"]
    assert put_artifact(api.client, lease, never, worker).status_code == 403
    unverified = put_build(api.client, lease, failed, worker)
    assert unverified.status_code == 409 and "wrong_result" in unverified.json()["detail"]
    # the artifact needs its build record first
    early = put_artifact(api.client, lease, measured_one, worker)
    assert early.status_code == 409 and "build record" in early.json()["detail"]
    share(api, lease, measured_one)


def test_the_server_hashes_the_body_and_refuses_a_mismatch(api: Any, settings: Settings) -> None:
    v = variant()
    lease = tuned_lease(api, v)
    worker = api.harness.worker
    assert put_build(api.client, lease, v, worker).status_code == 201
    wrong = put_artifact(api.client, lease, v, worker, sha256="0" * 64)
    assert wrong.status_code == 422
    assert wrong.json()["detail"][0]["loc"] == ["query", "sha256"]
    short = put_artifact(api.client, lease, v, worker, size=len(BYTES) + 1)
    assert short.status_code == 422 and short.json()["detail"][0]["loc"] == ["query", "size"]
    malformed = put_artifact(api.client, lease, v, worker, sha256="XYZ")
    assert malformed.status_code == 422 and malformed.json()["detail"][0]["loc"][:2] == [
        "query",
        "sha256",
    ]
    assert best(api)["artifact"] is None
    store = settings.data_dir / "artifacts"
    assert [p for p in store.rglob("*") if p.is_file()] == []  # nothing kept, nothing staged


def test_a_record_that_does_not_hash_to_its_id_is_refused(api: Any) -> None:
    v = variant()
    lease = tuned_lease(api, v)
    body = record(v)
    body["flags"] = [*body["flags"], "-fplugin=evil.so"]
    refused = api.client.put(
        f"/v1/leases/{lease}/builds/{v.id}", json=body, headers=api.harness.worker
    )
    assert refused.status_code == 422 and "hash to" in refused.json()["detail"][0]["msg"]
    body = record(v)
    body["source"] = body["source"].replace("return TUNEHUB_OK;", "abort();", 1)
    refused = api.client.put(
        f"/v1/leases/{lease}/builds/{v.id}", json=body, headers=api.harness.worker
    )
    assert refused.status_code == 422 and "translation unit" in refused.json()["detail"][0]["msg"]
    other = record(variant(8))
    mismatched = api.client.put(
        f"/v1/leases/{lease}/builds/{v.id}", json=other, headers=api.harness.worker
    )
    assert mismatched.status_code == 422
    assert mismatched.json()["detail"][0]["loc"] == ["body", "variant_id"]


def _app(settings: Settings, **overrides: Any) -> TestClient:
    return TestClient(create_app(settings.model_copy(update=overrides)))


def test_the_size_limit_is_413(api: Any, settings: Settings) -> None:
    v = variant()
    lease = tuned_lease(api, v)
    worker = api.harness.worker
    big = b"x" * 5000
    with _app(settings, max_artifact_bytes=4096) as client:
        assert put_build(client, lease, v, worker).status_code == 201
        declared = put_artifact(client, lease, v, worker, big)
        assert declared.status_code == 413 and "4096" in declared.json()["detail"]
        understated = put_artifact(client, lease, v, worker, big, size=100)
        assert understated.status_code == 413
        assert put_artifact(client, lease, v, worker, b"y" * 4096).status_code == 201


def test_the_default_body_limit_does_not_apply_to_artifacts(api: Any, settings: Settings) -> None:
    v = variant()
    lease = tuned_lease(api, v)
    with _app(settings, max_body_bytes=1024) as client:
        assert put_build(client, lease, v, api.harness.worker).status_code == 413  # JSON: 1 kB
    assert put_build(api.client, lease, v, api.harness.worker).status_code == 201
    with _app(settings, max_body_bytes=1024) as client:
        stored = put_artifact(client, lease, v, api.harness.worker, b"z" * 50_000)
        assert stored.status_code == 201, stored.text


def test_a_lease_stores_at_most_the_count_limit(api: Any, settings: Settings) -> None:
    first, second = variant(4), variant(8)
    lease = tuned_lease(api, first, second)
    worker = api.harness.worker
    with _app(settings, max_artifacts_per_lease=1) as client:
        assert put_build(client, lease, first, worker).status_code == 201
        assert put_artifact(client, lease, first, worker).status_code == 201
        assert put_build(client, lease, second, worker).status_code == 201
        refused = put_artifact(client, lease, second, worker, b"other")
        assert refused.status_code == 409
        assert "TUNEHUB_MAX_ARTIFACTS_PER_LEASE" in refused.json()["detail"]
        assert put_artifact(client, lease, first, worker).status_code == 200  # a retry: no room


def test_reads_answer_404_and_422_clearly(api: Any) -> None:
    missing = api.client.get("/v1/artifacts/" + "a" * 64)
    assert missing.status_code == 404 and "no artifact" in missing.json()["detail"]
    assert api.client.get("/v1/artifacts/nothex").status_code == 422
    assert api.client.get("/v1/artifacts/" + "A" * 64).status_code == 422
    no_build = api.client.get(f"/v1/variants/{'b' * 64}/build")
    assert no_build.status_code == 404 and "no build record" in no_build.json()["detail"]
    bad = api.client.get("/v1/variants/sha-a/build")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["path", "variant_id"]


def test_reads_need_a_read_token_when_the_service_says_so(api: Any, settings: Settings) -> None:
    v = variant()
    share(api, tuned_lease(api, v), v)
    url = best(api)["artifact"]["url"]
    with _app(settings, read_token_required=True) as client:
        assert client.get(url).status_code == 401
        assert client.get(f"/v1/variants/{v.id}/build").status_code == 401
        fetched = client.get(url, headers=api.harness.read)
        assert fetched.status_code == 200 and fetched.content == BYTES


def test_a_cached_best_answer_names_the_artifact_once_uploaded(api: Any) -> None:
    v = variant()
    lease = tuned_lease(api, v)
    assert best(api)["artifact"] is None
    with _statements(api) as cached:
        assert best(api)["artifact"] is None
    assert cached == []  # answered by the lookup cache
    share(api, lease, v)  # moves the change signal (PostgreSQL: migration 0007's trigger)
    assert best(api)["artifact"]["variant_id"] == v.id


def test_an_artifact_dir_setting_moves_the_store(
    api: Any, settings: Settings, tmp_path: Path
) -> None:
    v = variant()
    lease = tuned_lease(api, v)
    shared = tmp_path / "shared-volume"
    with _app(settings, artifact_dir=shared) as client:
        assert put_build(client, lease, v, api.harness.worker).status_code == 201
        assert put_artifact(client, lease, v, api.harness.worker).status_code == 201
        sha = hashlib.sha256(BYTES).hexdigest()
        assert (shared / sha[:2] / sha).read_bytes() == BYTES
        assert client.get(f"/v1/artifacts/{sha}").content == BYTES


@pytest.mark.parametrize("value", ["", None])
def test_a_blank_artifact_dir_means_the_data_dir(tmp_path: Path, value: str | None) -> None:
    settings = Settings(data_dir=tmp_path, artifact_dir=value)
    assert settings.artifact_root == tmp_path / "artifacts"
