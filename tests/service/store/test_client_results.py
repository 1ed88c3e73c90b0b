"""Client-measured results (the Triton drop-in's uploads): scopes, validation, the winner rule,
ETag lookups, the 0003 migration, and that they never touch a built-in op's winner."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import inspect

from service.store.db import current_revision, downgrade, head_revision, make_engine, upgrade

OP = "triton:" + "ab" * 16
KEY = {"n_cols": 1024, "dtypes": "torch.float16"}
H200 = {"backend": "cuda", "name": "NVIDIA H200", "arch": "sm_90", "sm_count": 132}
TOOLCHAIN = {"compiler": "triton 3.6.0", "template_version": "ab" * 32, "libraries": {}}


def upload(api: Any, medians: dict[str, float | None], headers: Any = None, **extra: Any) -> Any:
    body: dict[str, Any] = {
        "op": OP,
        "kernel_name": "softmax_kernel",
        "key": KEY,
        "device": H200,
        "toolchain": TOOLCHAIN,
        "measurements": [
            {
                "config_name": name,
                "params": {"num_warps": int(name[1:]), "kwargs": {"BLOCK": 1024}},
                "outcome": "ok" if median is not None else "runtime_error",
                "median_us": median,
            }
            for name, median in medians.items()
        ],
        "provenance": {"timer": "triton.testing.do_bench", "sm_clock_mhz": 1980},
    }
    body.update(extra)
    return api.client.post(
        "/v1/client-results", json=body, headers=api.harness.submit if headers is None else headers
    )


def best(api: Any, headers: dict[str, str] | None = None, **params: Any) -> Any:
    query = {"op": OP, "key": json.dumps(KEY), "device": "NVIDIA H200", **params}
    return api.client.get("/v1/client-configs/best", params=query, headers=headers or {})


def test_upload_keeps_the_fastest_verified_config_and_answers_with_an_etag(api: Any) -> None:
    answer = upload(api, {"w4": 12.0, "w8": 10.0, "w2": None})
    assert answer.status_code == 200, answer.text
    assert answer.json()["stored"] == 3 and answer.json()["outcome"] == "inserted"
    found = best(api)
    assert found.status_code == 200
    assert found.json()["config_name"] == "w8"
    assert found.json()["source"] == "client"
    assert found.json()["device"]["key"] == "cuda:NVIDIA H200:sm_90:132"
    etag = found.headers["etag"]
    again = best(api, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.headers["etag"] == etag
    assert best(api, headers={"If-None-Match": '"other"'}).status_code == 200


def test_a_new_winner_must_be_more_than_the_tie_band_faster(api: Any) -> None:
    upload(api, {"w8": 10.0})
    etag = best(api).headers["etag"]
    assert upload(api, {"w4": 9.9}).json()["outcome"] == "kept"
    assert best(api).json()["config_name"] == "w8"
    assert upload(api, {"w4": 9.0}).json()["outcome"] == "replaced"
    changed = best(api, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.json()["config_name"] == "w4"


def test_lookup_misses_are_404_and_bad_keys_422(api: Any) -> None:
    assert best(api).status_code == 404
    upload(api, {"w8": 10.0})
    assert best(api, key=json.dumps({"n_cols": 2048})).status_code == 404
    assert best(api, device="NVIDIA A100").status_code == 404
    assert best(api, toolchain="triton 9.9").status_code == 404
    nested = best(api, key='{"a": {"b": 1}}')
    assert nested.status_code == 422 and nested.json()["detail"][0]["loc"] == ["query", "key"]
    assert best(api, key="not json").status_code == 422
    assert best(api, op="reduce").status_code == 422


def test_uploads_need_a_submit_token_and_a_client_op_family(api: Any) -> None:
    assert upload(api, {"w8": 10.0}, headers={}).status_code == 401
    assert upload(api, {"w8": 10.0}, headers=api.harness.worker).status_code == 403
    refused = upload(api, {"w8": 10.0}, op="reduce")
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "op"]
    no_time = upload(api, {"w8": 10.0}, measurements=[{"config_name": "x", "params": {}}])
    assert no_time.status_code == 422


def test_client_uploads_never_touch_a_worker_verified_winner(api: Any) -> None:
    api.tune([api.measurement("reduce_f32_p4", 50.0)])
    built_in = api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").json()
    upload(api, {"w8": 1.0})
    after = api.best(op="reduce", dtype="f32", m=1024, k=4096, kind="sum").json()
    assert after == built_in
    assert after["variant_name"] == "reduce_f32_p4"


def test_migration_0003_downgrades_to_the_previous_revision(empty_database_url: str) -> None:
    upgrade(empty_database_url)
    downgrade(empty_database_url, "0003")  # later revisions first
    downgrade(empty_database_url, "-1")
    engine = make_engine(empty_database_url)
    try:
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert "client_measurements" not in tables and "client_best_configs" not in tables
    assert "best_configs" in tables
    assert current_revision(empty_database_url) != "0003"
    upgrade(empty_database_url)
    assert current_revision(empty_database_url) == head_revision()
