"""Errors a user can act on: the field's name, limits in characters, what Content-Type to send,
a bounded answer to a huge bad body, and a toolchain that has no results said as such."""

from __future__ import annotations

import json
from typing import Any


def _detail(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 422, response.text
    detail: list[dict[str, Any]] = response.json()["detail"]
    return detail


def test_a_missing_dim_is_named(api: Any) -> None:
    body = api.job_body(problems=[{"m": 4, "kind": "sum"}])
    detail = _detail(api.client.post("/v1/jobs", json=body, headers=api.harness.submit))
    assert detail[0]["loc"] == ["body", "problems", 0, "k"]
    assert detail[0]["msg"] == "required for op reduce"
    lookup = _detail(api.best(op="gemm", dtype="f16", m=4, k=4))
    assert lookup[0]["loc"] == ["query", "n"] and "required" in lookup[0]["msg"]
    batch = api.client.post(
        "/v1/configs/query",
        json={"queries": [{"op": "gemm", "dtype": "f16", "problem": {"m": 1, "n": 1}}]},
    )
    assert batch.json()["results"][0]["error"] == "body.queries.0.problem.k: required for op gemm"


def test_string_limits_are_said_in_characters(api: Any) -> None:
    response = api.client.post(
        "/v1/tokens", json={"name": "x" * 201, "scopes": ["read"]}, headers=api.harness.admin
    )
    item = _detail(response)[0]
    assert item["loc"] == ["body", "name"]
    assert item["msg"] == "must have at most 200 characters, not 201"
    long_query = _detail(api.client.get("/v1/measurements", params={"job_id": "j" * 65}))[0]
    assert long_query["msg"] == "must have at most 64 characters, not 65"
    empty = _detail(
        api.client.post(
            "/v1/tokens", json={"name": "", "scopes": ["read"]}, headers=api.harness.admin
        )
    )[0]
    assert empty["msg"] == "must have at least 1 characters, not 0"


def test_a_json_body_under_another_content_type_says_what_to_send(api: Any) -> None:
    response = api.client.post(
        "/v1/jobs",
        content=json.dumps(api.job_body()).encode(),
        headers={**api.harness.submit, "Content-Type": "text/plain"},
    )
    detail = _detail(response)
    assert detail == [
        {
            "loc": ["body"],
            "msg": "the body must be JSON sent with Content-Type: application/json (this "
            "request said 'text/plain')",
            "type": "value_error",
        }
    ]
    # a JSON type with a suffix or parameters is JSON
    fine = api.client.post(
        "/v1/jobs",
        content=json.dumps(api.job_body()).encode(),
        headers={**api.harness.submit, "Content-Type": "application/json; charset=utf-8"},
    )
    assert fine.status_code == 202, fine.text


def test_a_huge_bad_body_gets_a_small_answer(api: Any) -> None:
    body = api.job_body()
    body.update({f"unknown_{i}_" + "x" * 500: "y" * 500 for i in range(6_000)})
    body["z" * 100_000] = 1
    raw = json.dumps(body).encode()
    assert len(raw) > 5_000_000
    response = api.client.post(
        "/v1/jobs", content=raw, headers={**api.harness.submit, "Content-Type": "application/json"}
    )
    detail = _detail(response)
    assert len(response.content) < 20_000
    assert detail[-1] == {"loc": [], "msg": "and 5981 more errors", "type": "too_many_errors"}
    assert all(len(str(part)) <= 203 for item in detail for part in item["loc"])


def test_an_unknown_toolchain_is_not_called_untuned(api: Any) -> None:
    api.tune([api.measurement("a", 2.0)])
    query = {"op": "reduce", "dtype": "f32", "m": 1024, "k": 4096, "kind": "sum"}
    assert api.best(**query).status_code == 200
    response = api.best(**query, toolchain="g++ 99")
    assert response.status_code == 404
    message = response.json()["detail"]
    assert "not tuned yet" not in message
    assert "toolchain 'g++ 99'" in message and "'g++ 12.2.0|tpl=abc123'" in message
    batch = api.client.post(
        "/v1/configs/query",
        json={
            "queries": [
                {
                    "op": "reduce",
                    "dtype": "f32",
                    "toolchain": "g++ 99",
                    "problem": {"m": 1024, "k": 4096, "kind": "sum"},
                }
            ]
        },
    )
    assert batch.json()["results"][0]["error"] == message
