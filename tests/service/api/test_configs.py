"""Best-config lookups: exact, nearest shape, toolchains, devices, batches, export/import."""

from __future__ import annotations

import json
import math
from typing import Any

from sqlalchemy import update

from service.store.models import BestConfig

NEW_TOOLCHAIN = {"compiler": "nvcc 13.1", "template_version": "def456", "libraries": {}}
GEMM = {"op": "gemm", "dtype": "f16"}


def _tune_gemm(
    api: Any,
    shape: tuple[int, int, int],
    name: str,
    median: float,
    device: dict[str, Any] | None = None,
    toolchain: dict[str, Any] | None = None,
) -> None:
    m, n, k = shape
    api.tune(
        [api.measurement(name, median)],
        device=device or api.H200,
        toolchain=toolchain,
        problems=[{"m": m, "n": n, "k": k}],
        **GEMM,
    )


def test_exact_answer_carries_the_contract(api: Any) -> None:
    _tune_gemm(api, (4096, 4096, 4096), "gemm_f16_rcr_128x256x64", 200.0)
    response = api.best(**GEMM, layout="rcr", device="H200", m=4096, n=4096, k=4096)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["exact"] is True and body["distance"] == 0
    assert body["op"] == "gemm" and body["dtype"] == "f16" and body["layout"] == "rcr"
    assert body["problem"] == {"m": 4096, "n": 4096, "k": 4096}
    assert body["variant_id"] == "sha-gemm_f16_rcr_128x256x64"
    assert body["variant_name"] == "gemm_f16_rcr_128x256x64"
    assert body["params"] == {"pack": 4, "name": "gemm_f16_rcr_128x256x64"}
    assert body["median_us"] == 200.0 and body["p20_us"] < 200.0 < body["p80_us"]
    assert body["throughput_unit"] == "GB/s"
    assert body["device"]["key"] == "cuda:NVIDIA H200:sm_90:132"
    assert body["device"]["driver"] == "560.35"
    assert body["toolchain"]["compiler"] == "g++ 12.2.0"
    assert body["measured_at"]


def test_device_by_full_key_and_other_devices_do_not_answer(api: Any) -> None:
    _tune_gemm(api, (128, 128, 128), "a", 5.0)
    key = "cuda:NVIDIA H200:sm_90:132"
    assert api.best(**GEMM, device=key, m=128, n=128, k=128).status_code == 200
    assert api.best(**GEMM, device="h200", m=128, n=128, k=128).status_code == 200
    assert (
        api.best(**GEMM, device="cuda:NVIDIA H200:sm_90:114", m=128, n=128, k=128).status_code
        == 404
    )
    assert api.best(**GEMM, device="A100", m=128, n=128, k=128).status_code == 404
    assert api.best(**GEMM, backend="cpu", m=128, n=128, k=128).status_code == 404
    assert api.best(**GEMM, layout="rrr", m=128, n=128, k=128).status_code == 404
    assert api.best(op="gemm", dtype="bf16", m=128, n=128, k=128).status_code == 404


def test_a_backend_name_as_device_selects_that_backend(api: Any) -> None:
    _tune_gemm(api, (128, 128, 128), "a", 5.0)
    dims = {"m": 128, "n": 128, "k": 128}
    assert api.best(**GEMM, device="cuda", **dims).status_code == 200  # as --device cuda
    assert api.best(**GEMM, device="cuda", backend="cuda", **dims).status_code == 200
    assert api.best(**GEMM, device="cpu", **dims).status_code == 404  # tuned on cuda only
    assert api.best(**GEMM, device="cuda", backend="cpu", **dims).status_code == 404
    batch = {"queries": [{**GEMM, "problem": dims, "device": "cuda"}]}
    assert api.client.post("/v1/configs/query", json=batch).json()["results"][0]["result"]


def test_nearest_shape_in_log_space(api: Any) -> None:
    _tune_gemm(api, (128, 4096, 4096), "small_m", 50.0)
    _tune_gemm(api, (8192, 8192, 8192), "big", 1500.0)
    response = api.best(**GEMM, device="H200", m=256, n=4096, k=4096)
    assert response.status_code == 200
    body = response.json()
    assert body["exact"] is False
    assert body["variant_name"] == "small_m"
    assert body["tuned_problem"] == {"m": 128, "n": 4096, "k": 4096}
    assert body["problem"] == {"m": 256, "n": 4096, "k": 4096}
    assert math.isclose(body["distance"], 1.0)
    far = api.best(**GEMM, m=8192, n=8192, k=4096).json()
    assert far["variant_name"] == "big" and math.isclose(far["distance"], 1.0)


def test_nearest_needs_the_same_reduce_kind(api: Any) -> None:
    api.tune([api.measurement("r", 3.0)], problems=[{"m": 1024, "k": 4096, "kind": "max"}])
    near = api.best(op="reduce", dtype="f32", m=2048, k=4096, kind="max")
    assert near.status_code == 200 and near.json()["exact"] is False
    response = api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum")
    assert response.status_code == 404
    assert "not tuned yet" in response.json()["detail"]


def test_newest_toolchain_answers_unless_one_is_asked_for(api: Any) -> None:
    _tune_gemm(api, (512, 512, 512), "old_winner", 10.0)
    _tune_gemm(api, (512, 512, 512), "new_winner", 30.0, toolchain=NEW_TOOLCHAIN)
    current = api.best(**GEMM, m=512, n=512, k=512).json()
    assert current["variant_name"] == "new_winner"
    assert current["toolchain"]["template_version"] == "def456"
    old = api.best(**GEMM, toolchain="abc123", m=512, n=512, k=512).json()
    assert old["variant_name"] == "old_winner"
    # a shape tuned only with the old toolchain is history: the nearest current one answers
    _tune_gemm(api, (64, 64, 64), "old_only", 1.0)
    answer = api.best(**GEMM, m=64, n=64, k=64).json()
    assert answer["exact"] is False and answer["variant_name"] == "new_winner"


def test_bad_queries_are_422(api: Any) -> None:
    cases = [
        ({"op": "gemm", "dtype": "f16", "m": 0, "n": 1, "k": 1}, ["query", "m"]),
        ({"op": "gemm", "dtype": "f16", "m": "1.5", "n": 1, "k": 1}, ["query", "m"]),
        ({"op": "gemm", "dtype": "f16", "m": 1, "n": 1, "k": 1, "q": 2}, ["query", "q"]),
        ({"op": "gemm", "dtype": "f16", "m": 1, "n": 1}, ["query", "k"]),
        (
            {"op": "gemm", "dtype": "f16", "layout": "row", "m": 1, "n": 1, "k": 1},
            ["query", "layout"],
        ),
        ({"op": "fft", "dtype": "f16"}, ["query", "op"]),
        ({"op": "gemm", "dtype": "f8"}, ["query", "dtype"]),
        ({"op": "reduce", "dtype": "f16", "m": 1, "k": 1, "kind": "prod"}, ["query", "kind"]),
    ]
    for params, loc in cases:
        response = api.best(**params)
        assert response.status_code == 422, (params, response.text)
        assert loc in [e["loc"] for e in response.json()["detail"]], (params, response.json())


def test_batch_query_answers_in_order(api: Any) -> None:
    _tune_gemm(api, (128, 128, 128), "a", 5.0)
    queries = [
        {**GEMM, "device": "H200", "problem": {"m": 128, "n": 128, "k": 128}},
        {**GEMM, "problem": {"m": 256, "n": 128, "k": 128}},
        {"op": "softmax", "dtype": "f16", "problem": {"m": 8, "k": 8}},
        {**GEMM, "problem": {"m": -1, "n": 128, "k": 128}},
        {**GEMM, "layout": "nhwc", "problem": {"m": 1, "n": 1, "k": 1}},
    ]
    response = api.client.post("/v1/configs/query", json={"queries": queries})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == 5
    assert results[0]["result"]["exact"] is True and results[0]["error"] is None
    assert results[1]["result"]["exact"] is False
    assert results[2]["result"] is None and "not tuned yet" in results[2]["error"]
    assert results[3]["result"] is None and "problem.m" in results[3]["error"]
    assert results[4]["result"] is None and "layout" in results[4]["error"]
    # each answer carries the ETag its GET gives, so a client can revalidate it later
    single = api.best(**GEMM, device="H200", m=128, n=128, k=128)
    assert results[0]["etag"] == single.headers["etag"] and results[2]["etag"] is None


def test_batch_query_answers_repeated_queries_like_single_ones(api: Any) -> None:
    _tune_gemm(api, (128, 128, 128), "a", 5.0)
    exact = {**GEMM, "problem": {"m": 128, "n": 128, "k": 128}}
    near = {**GEMM, "problem": {"m": 256, "n": 128, "k": 128}}
    missing = {"op": "softmax", "dtype": "f16", "problem": {"m": 8, "k": 8}}
    queries = [exact, near, missing, exact, near, missing, exact]
    response = api.client.post("/v1/configs/query", json={"queries": queries})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    alone = [
        api.client.post("/v1/configs/query", json={"queries": [q]}).json()["results"][0]
        for q in queries
    ]
    assert results == alone
    assert [r["result"] and r["result"]["exact"] for r in results] == [
        True, False, None, True, False, None, True
    ]  # fmt: skip


def test_batch_query_limits(api: Any) -> None:
    one = {**GEMM, "problem": {"m": 1, "n": 1, "k": 1}}
    for body in ({"queries": []}, {"queries": [one] * 1025}, {"queries": [{**one, "x": 1}]}):
        assert api.client.post("/v1/configs/query", json=body).status_code == 422


def test_export_then_import_merges_with_the_tie_band(api: Any) -> None:
    _tune_gemm(api, (128, 128, 128), "a", 10.0)
    api.tune([api.measurement("r", 3.0)])
    exported = api.client.get("/v1/export")
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert len(lines) == 2
    gemm = next(line for line in lines if line["op"] == "gemm")
    assert gemm["variant"]["name"] == "a" and gemm["measurement"]["median_us"] == 10.0
    assert gemm["device"]["name"] == "NVIDIA H200"

    def post(records: list[dict[str, Any]]) -> Any:
        text = "".join(json.dumps(r) + "\n" for r in records)
        return api.client.post("/v1/import", content=text, headers=api.harness.admin)

    # same data again: stored already, nothing added
    assert post(lines).json() == {
        "records": 2,
        "inserted": 0,
        "replaced": 0,
        "kept": 0,
        "held": 0,
        "duplicates": 2,
        "refused": 0,
        "errors": [],
    }
    noise = json.loads(json.dumps(gemm))
    noise["variant"] = {"id": "sha-b", "name": "b", "params": {}}
    noise["measurement"]["median_us"] = 9.9
    assert post([noise]).json()["kept"] == 1
    faster = json.loads(json.dumps(noise))
    faster["measurement"].update(median_us=5.0, p20_us=4.95, p80_us=5.05, min_us=4.9)
    assert post([faster]).json()["replaced"] == 1
    assert api.best(**GEMM, m=128, n=128, k=128).json()["variant_name"] == "b"
    other_device = json.loads(json.dumps(gemm))
    other_device["device"]["name"] = "NVIDIA H100"
    assert post([other_device]).json()["inserted"] == 1
    assert api.best(**GEMM, device="H100", m=128, n=128, k=128).json()["variant_name"] == "a"


def test_import_needs_admin_and_reports_bad_lines(api: Any) -> None:
    _tune_gemm(api, (128, 128, 128), "a", 10.0)
    line = json.loads(api.client.get("/v1/export").text.splitlines()[0])
    line["device"]["name"] = "Imported GPU"
    bad = json.loads(json.dumps(line))
    bad["problem"] = {"m": 0, "n": 1, "k": 1}
    text = json.dumps(line) + "\n" + json.dumps(bad) + "\n"
    response = api.client.post("/v1/import", content=text, headers=api.harness.admin)
    assert response.status_code == 200, response.text
    assert response.json()["inserted"] == 1 and response.json()["refused"] == 1
    assert response.json()["errors"][0]["loc"] == ["body", 2, "problem", "m"]
    assert api.best(**GEMM, device="Imported", m=128, n=128, k=128).status_code == 200
    only_bad = api.client.post(
        "/v1/import", content=json.dumps(bad) + "\n", headers=api.harness.admin
    )
    assert only_bad.status_code == 422
    assert only_bad.json()["detail"][0]["loc"] == ["body", 1, "problem", "m"]
    garbage = api.client.post("/v1/import", content="{not json\n", headers=api.harness.admin)
    assert garbage.status_code == 422
    forbidden = api.client.post("/v1/import", content=text, headers=api.harness.worker)
    assert forbidden.status_code == 403


def test_export_and_import_carry_confirmed(api: Any) -> None:
    _tune_gemm(api, (128, 128, 128), "a", 10.0)
    with api.harness.sessionmaker() as session:  # as if a second worker had re-measured it
        session.execute(update(BestConfig).values(confirmed=True))
        session.commit()
    line = json.loads(api.client.get("/v1/export").text.splitlines()[0])
    assert line["confirmed"] is True

    def post(record: dict[str, Any]) -> Any:
        response = api.client.post(
            "/v1/import", content=json.dumps(record) + "\n", headers=api.harness.admin
        )
        assert response.status_code == 200, response.text
        return response.json()

    def best(device: str) -> dict[str, Any]:
        answer = api.best(**GEMM, device=device, m=128, n=128, k=128)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    elsewhere = json.loads(json.dumps(line))  # a new key: stored confirmed, as exported
    elsewhere["device"]["name"] = "NVIDIA H100"
    assert post(elsewhere)["inserted"] == 1 and best("H100")["confirmed"] is True
    unconfirmed = json.loads(json.dumps(line))  # a faster winner the exporter never confirmed
    unconfirmed["variant"] = {"id": "sha-b", "name": "b", "params": {}}
    unconfirmed["measurement"].update(median_us=5.0, p20_us=4.95, p80_us=5.05, min_us=4.9)
    unconfirmed["confirmed"] = False
    assert post(unconfirmed)["replaced"] == 1
    assert best("H200")["variant_name"] == "b" and best("H200")["confirmed"] is False
    old = json.loads(json.dumps(line))  # an older export has no field: not confirmed
    del old["confirmed"]
    old["device"]["name"] = "NVIDIA B200"
    assert post(old)["inserted"] == 1 and best("B200")["confirmed"] is False
    slower = json.loads(json.dumps(line))  # a confirmed record that does not win: no change
    slower["variant"] = {"id": "sha-c", "name": "c", "params": {}}
    slower["measurement"].update(median_us=50.0, p20_us=49.5, p80_us=50.5, min_us=49.0)
    assert post(slower)["kept"] == 1
    assert best("H200")["variant_name"] == "b" and best("H200")["confirmed"] is False
