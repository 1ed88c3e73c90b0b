"""The OpenAPI document tells the truth: a bounded schemathesis run with all checks, over the app
in-process (ASGI) on SQLite, as ``st run --checks all`` runs it (examples, coverage, fuzzing
and stateful phases), with a fixed seed and a bounded number of examples per operation.

Zero failures are allowed, with one documented tolerance: where a valid-by-schema request
can still be refused because of rules between fields that JSON Schema cannot state, a 422 is
an expected answer of the ``positive_data_acceptance`` check (and only of it):

- POST /v1/jobs, GET /v1/configs/best, GET /v1/measurements: a problem's dims depend on the
  op (gemm m/n/k, conv2d n/h/w/c/k/r/s..., reduce m/k/kind) and are bounded by the product of
  the dims (tuner.problems.MAX_ELEMENTS); /v1/measurements takes a job id or op + dtype + dims.
  The 422 names the dim or the missing parameter.
- PUT /v1/leases/{id}/builds/{variant_id}: the body's variant_id must be the path's, and the
  record (source, flags, compiler, template version) must hash to it.
- PUT /v1/leases/{id}/artifacts/{variant_id}: the body's sha256 and length must be the
  ``sha256`` and ``size`` parameters.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events, from_schema

from service.api.app import create_app
from service.api.openapi import api_routes
from service.settings import Settings
from service.store.tokens import create_token

SEED = 20261204
MAX_EXAMPLES = 5
#: positive_data_acceptance's default expected statuses, plus 422 (see the module doc)
SEMANTIC_422 = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]
CROSS_FIELD_RULES = [
    ("POST", "/v1/jobs"),
    ("GET", "/v1/configs/best"),
    ("GET", "/v1/measurements"),
    ("PUT", "/v1/leases/{lease_id}/builds/{variant_id}"),
    ("PUT", "/v1/leases/{lease_id}/artifacts/{variant_id}"),
]


@schemathesis.serializer("application/x-ndjson")
def _ndjson(_context: Any, value: Any) -> dict[str, bytes]:
    # /v1/import takes JSON lines; the document describes the body as a string
    return {"data": (value if isinstance(value, str) else str(value)).encode("utf-8")}


def _config(token: str) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "suppress-health-check": ["all"],
            "headers": {"Authorization": f"Bearer {token}"},
            # every check but use_after_free: DELETE /v1/jobs/{id} cancels a job, and a cancelled
            # job stays readable (its measurements are history), as the route documents
            "checks": {"enabled": True, "use_after_free": {"enabled": False}},
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True},
            "phases": {"stateful": {"max-steps": 8}},
            "operations": [
                {
                    "include-method": method,
                    "include-path": path,
                    "checks": {"positive_data_acceptance": {"expected-statuses": SEMANTIC_422}},
                }
                for method, path in CROSS_FIELD_RULES
            ],
        }
    )


def _failures(schema: Any) -> tuple[list[str], Counter[str]]:
    failures: list[str] = []
    checked: Counter[str] = Counter()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            for case_id, nodes in event.recorder.checks.items():
                for node in nodes:
                    checked[node.name] += 1
                    if node.status == Status.FAILURE and node.failure_info is not None:
                        interaction = event.recorder.interactions.get(case_id)
                        request = interaction.request if interaction else None
                        body = str(getattr(request, "body", ""))[:300]
                        failures.append(
                            f"{event.recorder.label}: {node.name}: "
                            f"{node.failure_info.failure.title}: "
                            f"{node.failure_info.failure.message[:300]} "
                            f"request: {getattr(request, 'method', '')} "
                            f"{getattr(request, 'uri', '')} {body}"
                        )
        elif isinstance(event, events.NonFatalError):
            failures.append(f"error: {event.label}: {str(event.info)[:500]}")
        elif isinstance(event, events.FatalError):
            failures.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            failures.extend(f"run: {failure.title}" for failure in event.failures)
    return failures, checked


def test_a_bounded_schemathesis_run_with_all_checks_finds_nothing(
    tmp_path: Path, _sqlite_template: Path
) -> None:
    database = tmp_path / "tunehub.db"
    shutil.copyfile(_sqlite_template, database)
    settings = Settings(
        database_url=f"sqlite:///{database}",
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        local_worker=False,
    )
    app = create_app(settings)
    with app.state.sessionmaker() as session:
        token = create_token(session, "contract", ["admin"])
        session.commit()
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=_config(token))
    failures, checked = _failures(schema)
    assert not failures, "\n".join(sorted(set(failures)))
    # the run did check: every kind of check, on every operation
    for name in (
        "not_a_server_error",
        "status_code_conformance",
        "response_schema_conformance",
        "positive_data_acceptance",
        "negative_data_rejection",
        "ignored_auth",
    ):
        assert checked[name] > 0, (name, checked)


def test_reads_declare_no_security_and_writes_do(api: Any) -> None:
    document = api.client.get("/openapi.json").json()
    paths = document["paths"]
    for path, method in (
        ("/v1/configs/best", "get"),
        ("/v1/configs/query", "post"),
        ("/v1/jobs", "get"),
        ("/v1/jobs/{job_id}", "get"),
        ("/v1/measurements", "get"),
        ("/v1/export", "get"),
        ("/healthz", "get"),
        ("/v1/artifacts/{sha256}", "get"),
        ("/v1/variants/{variant_id}/build", "get"),
    ):
        assert "security" not in paths[path][method], (path, method)
    for path, method in (
        ("/v1/jobs", "post"),
        ("/v1/jobs/{job_id}", "delete"),
        ("/v1/workers", "post"),
        ("/v1/leases", "post"),
        ("/v1/leases/{lease_id}/results", "post"),
        ("/v1/import", "post"),
        ("/v1/tokens", "post"),
        ("/v1/tokens/{token_id}", "delete"),
        ("/v1/leases/{lease_id}/builds/{variant_id}", "put"),
        ("/v1/leases/{lease_id}/artifacts/{variant_id}", "put"),
    ):
        operation = paths[path][method]
        assert operation["security"], (path, method)
        assert {"401", "403", "422"} <= set(operation["responses"]), (path, method)
        if "requestBody" in operation:
            assert "413" in operation["responses"], (path, method)
    assert {"401", "403"} <= set(paths["/v1/tokens"]["get"]["responses"])
    assert paths["/v1/tokens"]["get"]["security"]
    job = document["components"]["schemas"]["JobCreate"]["properties"]["problems"]["items"]
    assert [shape["title"] for shape in job["anyOf"]] == [
        "gemm problem",
        "conv2d problem",
        "reduce problem",
        "softmax problem",
        "rms_norm problem",
        "scaled_gemm problem",
        "grouped_gemm problem",
    ]
    grouped = job["anyOf"][6]["properties"]
    assert grouped["skew"]["enum"] == [1, 2, 4, 8] and grouped["experts"]["maximum"] == 256
    assert grouped["n"]["multipleOf"] == grouped["k"]["multipleOf"] == 8
    results = paths["/v1/leases/{lease_id}/results"]["post"]["responses"]
    assert {"403", "404", "409"} <= set(results)
    assert {"404"} <= set(paths["/v1/jobs/{job_id}"]["get"]["responses"])
    upload = paths["/v1/leases/{lease_id}/artifacts/{variant_id}"]["put"]
    assert {"200", "201", "401", "403", "404", "409", "413", "422"} <= set(upload["responses"])
    assert list(upload["requestBody"]["content"]) == ["application/octet-stream"]
    build = paths["/v1/leases/{lease_id}/builds/{variant_id}"]["put"]
    assert {"200", "201", "403", "404", "409", "413", "422"} <= set(build["responses"])
    artifact = paths["/v1/artifacts/{sha256}"]["get"]["responses"]
    assert {"200", "304", "401", "404", "422"} <= set(artifact)
    assert "application/octet-stream" in artifact["200"]["content"]
    assert {"401", "404", "422"} <= set(
        paths["/v1/variants/{variant_id}/build"]["get"]["responses"]
    )
    best = document["components"]["schemas"]["BestConfigOut"]["properties"]["artifact"]
    assert {"$ref": "#/components/schemas/ArtifactRef"} in best["anyOf"]


def test_reads_declare_security_when_the_server_requires_read_tokens(
    api: Any, settings: Settings
) -> None:
    closed = create_app(settings.model_copy(update={"read_token_required": True}))
    operation = closed.openapi()["paths"]["/v1/configs/best"]["get"]
    assert operation["security"] and "401" in operation["responses"]


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/jobs/abc"])
def test_a_405_lists_every_method_of_the_path(api: Any, path: str) -> None:
    response = api.client.request("PATCH", path)
    assert response.status_code == 405
    expected = "GET, POST" if path == "/v1/jobs" else "DELETE, GET"
    assert response.headers["allow"] == expected


def test_the_ui_routes_under_the_same_schemathesis_run(
    tmp_path: Path, _sqlite_template: Path
) -> None:
    """The UI's pages are left out of the document (they are pages, not API), so schemathesis
    would never see them: here they are put in, and the same run checks them (HTML pages:
    the JSON schema checks have nothing to say of them, the others do)."""
    database = tmp_path / "tunehub.db"
    shutil.copyfile(_sqlite_template, database)
    settings = Settings(
        database_url=f"sqlite:///{database}",
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        local_worker=False,
    )
    app = create_app(settings)
    with app.state.sessionmaker() as session:
        token = create_token(session, "contract", ["admin"])
        session.commit()
    # the same routes (endpoints, parameters, response classes) in a document of their own
    pages = [
        APIRoute(
            path,
            route.endpoint,
            methods=route.methods,
            response_class=route.response_class,
            responses=route.responses,
        )
        for path, route in api_routes(app)
        if path.startswith("/ui")
    ]
    document = get_openapi(title="tunehub ui", version="1", routes=pages)
    assert {
        "/ui/jobs",
        "/ui/jobs/{job_id}",
        "/ui/best",
        "/ui/measurements/{measurement_id}",
        "/ui/jobs/{job_id}/problems/{task_id}",
        "/ui/compare",
    } <= set(document["paths"])
    schema = schemathesis.openapi.from_dict(document, config=_config(token))
    schema.app = app
    failures, checked = _failures(schema)
    assert not failures, "\n".join(sorted(set(failures)))
    assert checked["not_a_server_error"] > 20, checked
