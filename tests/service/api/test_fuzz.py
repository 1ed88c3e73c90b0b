"""Nothing a client can send is answered 500: weird bodies, paths and queries on every route."""

from __future__ import annotations

from typing import Any

from service.store.db import head_revision

WEIRD_BODIES: list[Any] = [
    None,
    [],
    "text",
    0,
    1e308,
    {"op": None},
    {
        "op": "reduce",
        "dtype": "f32",
        "problems": [{"m": 10**40, "k": 1}],
        "device": {"backend": "cpu"},
    },
    {
        "op": "reduce",
        "dtype": "f32",
        "problems": [{"m": 1, "k": 1, "kind": "s\x00um"}],
        "device": {"backend": "cpu"},
    },
    {"op": "reduce", "dtype": "f32", "problems": [[1, 2]], "device": {"backend": "cpu"}},
    {
        "op": "reduce",
        "dtype": "f32",
        "problems": [{"m": 1, "k": 1}],
        "device": {"backend": "cpu", "name": "x\x00y"},
    },
    {"op": "reduce", "dtype": "f32", "problems": [{"m": 1, "k": 1}], "device": "cpu"},
    {"op": "reduce", "dtype": "f32", "problems": {"m": 1}, "device": {"backend": "cpu"}},
    {
        "op": "gemm",
        "dtype": "f16",
        "problems": [{"m": 1, "n": 1, "k": 1, "\x00": 1}],
        "device": {"backend": "cpu"},
    },
    {"name": "w", "devices": [{"backend": "cpu", "name": "ü\x00", "arch": "x", "sm_count": 1}]},
    {"name": "w", "devices": [{"backend": "cpu", "name": "c", "arch": "x", "sm_count": 2**80}]},
    {"worker_id": "\x00", "backends": ["cpu"]},
    {"worker_id": "x" * 10_000},
    {"done": -1, "total": "many"},
    {"queries": [{"op": "gemm", "dtype": "f16", "problem": {"m": "x"}}]},
    {"queries": [{"op": "gemm", "dtype": "f16", "device": "\x00", "problem": {"m": 1}}]},
    {"a": {"b": {"c": {"d": {"e": [[[[[[[]]]]]]]}}}}},
]
RAW_BODIES = [b"{", b"\xff\xfe", b'{"op": NaN}', b'{"done": Infinity}', b"[" * 2000]


def _lease(api: Any) -> str:
    api.submit()
    leased = api.lease(api.register())
    assert leased is not None
    return leased["lease_id"]


def _result_bodies(api: Any) -> list[Any]:
    good = api.measurement("a", 1.0)
    base = {"device": api.CPU_DEVICE, "toolchain": api.TOOLCHAIN, "final": False}
    return [
        {**base, "measurements": [{**good, "median_us": -1}]},
        {**base, "measurements": [{**good, "median_us": None}]},
        {**base, "measurements": [{**good, "outcome": "great"}]},
        {**base, "measurements": [{**good, "params": {"x": "\x00"}}]},
        {**base, "measurements": [{**good, "log": "\x00" * 10}]},
        {**base, "measurements": [{**good, "reps": 2**70}]},
        {**base, "measurements": [{**good, "variant_id": "v" * 1000}]},
        {**base, "measurements": "all of them"},
        {**base, "toolchain": {"compiler": "x", "template_version": "y", "libraries": {"a": 1}}},
        {**base, "device": {**api.CPU_DEVICE, "memory_bytes": -5}},
        {**base, "error": "\x00"},
    ]


def test_no_body_is_a_500(api: Any) -> None:
    lease_id = _lease(api)
    admin = api.harness.admin
    posts = [
        "/v1/jobs",
        "/v1/workers",
        "/v1/leases",
        f"/v1/leases/{lease_id}/heartbeat",
        f"/v1/leases/{lease_id}/results",
        "/v1/configs/query",
        "/v1/tokens",
        "/v1/import",
    ]
    for path in posts:
        for body in WEIRD_BODIES:
            response = api.client.post(path, json=body, headers=admin)
            assert response.status_code < 500, (path, body, response.text)
        for raw in RAW_BODIES:
            response = api.client.post(
                path, content=raw, headers={**admin, "Content-Type": "application/json"}
            )
            assert response.status_code < 500, (path, raw, response.text)
    for body in _result_bodies(api):
        response = api.client.post(f"/v1/leases/{lease_id}/results", json=body, headers=admin)
        assert response.status_code == 422, (body, response.text)


def test_no_path_or_query_is_a_500(api: Any) -> None:
    admin = api.harness.admin
    for ident in ("%00", "x" * 3000, "%F0%9F%92%A9", "..%2F..", "1;DROP TABLE jobs"):
        for method, path in (
            ("GET", f"/v1/jobs/{ident}"),
            ("DELETE", f"/v1/jobs/{ident}"),
            ("POST", f"/v1/leases/{ident}/heartbeat"),
        ):
            response = api.client.request(method, path, headers=admin, json={})
            assert response.status_code in (404, 422), (method, path, response.text)
    queries = [
        "op=gemm&dtype=f16&m=%00&n=1&k=1",
        "op=gemm&dtype=f16&m=1&n=1&k=1&device=%00",
        "op=gemm&dtype=f16&m=1&n=1&k=1&toolchain=%00&layout=%00",
        "op=gemm&dtype=f16&m=99999999999999999999999999&n=1&k=1",
        "op=gemm&dtype=f16&m=1&m=2&n=1&k=1",
        "op=reduce&dtype=f16&m=1&k=1&kind=%00",
    ]
    for query in queries:
        for path in ("/v1/configs/best", "/v1/measurements"):
            response = api.client.get(f"{path}?{query}")
            assert response.status_code < 500, (path, query, response.text)
    for query in ("job_id=%00", "job_id=" + "x" * 100, "outcome=%00&job_id=x", "limit=-1"):
        response = api.client.get(f"/v1/measurements?{query}")
        assert response.status_code == 422, (query, response.text)
    assert api.client.get("/v1/jobs?limit=0").status_code == 422


def test_health_metrics_and_docs(api: Any) -> None:
    health = api.client.get("/healthz")
    assert health.json() == {"status": "ok", "database": "ok", "revision": head_revision()}
    api.tune([api.measurement("a", 2.0), api.measurement("b", None, outcome="timeout")])
    api.submit()
    text = api.client.get("/metrics").text
    assert 'tunehub_jobs{status="done"} 1' in text
    assert 'tunehub_jobs{status="queued"} 1' in text
    assert 'tunehub_tasks{status="queued"} 1' in text
    assert "tunehub_tasks_queued" not in text  # the line above says it once
    assert "tunehub_measurements_total 2" in text
    assert "tunehub_best_configs 1" in text  # a gauge: no _total
    assert "tunehub_best_configs_total" not in text
    assert api.client.get("/docs").status_code == 200
    paths = api.client.get("/openapi.json").json()["paths"]
    for path in ("/v1/jobs", "/v1/configs/best", "/v1/leases/{lease_id}/results", "/v1/import"):
        assert path in paths
