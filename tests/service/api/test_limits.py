"""Limits with clear answers: body size (413), list and string lengths (422 naming the field),
bodies that are not JSON (422 naming the problem), integer-valued numbers, empty imports."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.settings import Settings

LIMIT = 4096
IMPORT_LIMIT = 16384


@pytest.fixture
def small(api: Any, settings: Settings) -> Iterator[Any]:
    """The API driver over an app with small body limits."""
    limited = settings.model_copy(
        update={"max_body_bytes": LIMIT, "max_import_bytes": IMPORT_LIMIT}
    )
    with TestClient(create_app(limited)) as client:
        api.client = client
        yield api


def _padded_job(api: Any, size: int) -> bytes:
    body = api.job_body(layout="row")
    text = json.dumps(body)
    return text[:-1].encode() + b" " * (size - len(text)) + b"}"


def _chunks(data: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_a_body_over_the_limit_is_413_with_a_json_answer(small: Any) -> None:
    headers = {**small.harness.submit, "Content-Type": "application/json"}
    fits = small.client.post("/v1/jobs", content=_padded_job(small, LIMIT), headers=headers)
    assert fits.status_code == 202, fits.text
    over = small.client.post("/v1/jobs", content=_padded_job(small, LIMIT + 1), headers=headers)
    assert over.status_code == 413
    assert over.json() == {"detail": f"request body larger than {LIMIT} bytes"}


def test_a_chunked_body_without_content_length_is_413_too(small: Any) -> None:
    headers = {**small.harness.submit, "Content-Type": "application/json"}
    body = _padded_job(small, 3 * LIMIT)
    response = small.client.post("/v1/jobs", content=_chunks(body), headers=headers)
    assert response.status_code == 413
    assert "larger than" in response.json()["detail"]
    fits = small.client.post(
        "/v1/jobs", content=_chunks(_padded_job(small, LIMIT)), headers=headers
    )
    assert fits.status_code == 202, fits.text


def test_import_has_its_own_larger_limit(small: Any) -> None:
    headers = {**small.harness.admin, "Content-Type": "application/x-ndjson"}
    between = b"\n" * (LIMIT * 2) + b"not json\n"
    response = small.client.post("/v1/import", content=between, headers=headers)
    assert response.status_code == 422  # read (under the import limit) and refused as bad
    over = small.client.post(
        "/v1/import", content=_chunks(b"\n" * (IMPORT_LIMIT + 1)), headers=headers
    )
    assert over.status_code == 413
    assert over.json() == {"detail": f"request body larger than {IMPORT_LIMIT} bytes"}


def test_a_chunked_body_over_real_http_is_413(settings: Settings, live_service: Any) -> None:
    service = live_service(settings.model_copy(update={"max_body_bytes": LIMIT}))
    url = urlsplit(service.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.request(
            "POST",
            "/v1/configs/query",
            body=_chunks(b"[" + b" " * (4 * LIMIT) + b"]"),
            headers={"Content-Type": "application/json"},
            encode_chunked=True,
        )
        response = connection.getresponse()
        assert response.status == 413
        assert json.loads(response.read()) == {"detail": f"request body larger than {LIMIT} bytes"}
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"op": "reduce",', "malformed JSON: "),
        (b"{'op': 1}", "malformed JSON: Expecting property name"),
        (b'{"name": "\xff\xfe"}', "not valid UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON nested too deeply"),
    ],
)
def test_a_body_that_is_not_json_is_one_422_naming_the_problem(
    api: Any, raw: bytes, says: str
) -> None:
    for path, headers in (("/v1/jobs", api.harness.submit), ("/v1/workers", api.harness.worker)):
        response = api.client.post(
            path, content=raw, headers={**headers, "Content-Type": "application/json"}
        )
        assert response.status_code == 422, response.text
        error = response.json()["detail"][0]
        assert error["loc"][0] == "body" and says in error["msg"], error


def test_list_and_string_lengths_are_422_naming_the_field(api: Any) -> None:
    too_many = [{"m": 8, "k": 8}] * 257
    response = api.client.post(
        "/v1/jobs", json=api.job_body(problems=too_many), headers=api.harness.submit
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "problems"]
    cases = [
        ({"name": "w" * 201, "devices": [api.CPU_DEVICE]}, ["body", "name"]),
        ({"name": "w", "devices": [api.CPU_DEVICE] * 65}, ["body", "devices"]),
        (
            {"name": "w", "devices": [{**api.CPU_DEVICE, "driver": "d" * 101}]},
            ["body", "devices", 0, "driver"],
        ),
    ]
    for body, loc in cases:
        response = api.client.post("/v1/workers", json=body, headers=api.harness.worker)
        assert response.status_code == 422, body
        assert response.json()["detail"][0]["loc"] == loc
    api.submit()
    leased = api.lease(api.register())
    toolchain = {**api.TOOLCHAIN, "libraries": {"x" * 201: "1"}}
    error = api.upload(
        leased["lease_id"], [api.measurement("a", 1.0)], toolchain=toolchain, expect=422
    )["detail"][0]
    assert error["loc"][:3] == ["body", "toolchain", "libraries"]


def test_integer_valued_numbers_are_integers(api: Any) -> None:
    job = api.submit(
        seed=134217729.0,
        budget={"max_variants": 8.0},
        confirm=1.0,
        problems=[{"m": 1024.0, "k": 4096, "kind": "sum"}],
    )
    assert job["seed"] == 134217729 and job["budget"]["max_variants"] == 8
    assert job["problems"][0]["problem"] == {"m": 1024, "k": 4096, "kind": "sum"}
    leased = api.lease(api.register())
    beat = api.heartbeat(leased["lease_id"], done=134217729.0, total=134217729.0)
    assert beat.status_code == 200, beat.text
    for bad in (1.5, "8", True):
        response = api.client.post(
            "/v1/jobs", json=api.job_body(seed=bad), headers=api.harness.submit
        )
        assert response.status_code == 422, bad
        assert response.json()["detail"][0]["loc"] == ["body", "seed"]


@pytest.mark.parametrize("body", [b"", b"\n\n  \n"])
def test_an_empty_import_is_422(api: Any, body: bytes) -> None:
    response = api.client.post(
        "/v1/import",
        content=body,
        headers={**api.harness.admin, "Content-Type": "application/x-ndjson"},
    )
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert error["loc"] == ["body"] and "no records" in error["msg"]
