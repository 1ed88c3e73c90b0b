"""The OpenAPI document, made to say what the routes really answer.

FastAPI documents a route's success status and its 422. Around that, every operation gets:

- 401 and 403 when it needs a token (its ``security``); reads are open by design and declare
  no security, unless the server sets ``read_token_required``, when they do. An open read
  still answers 401 to a token that is sent but unknown or revoked, so it documents that;
- 404 when its path names an id; 413 and 422 when it takes a body (the size limit and a body
  that is not JSON, :mod:`service.api.limits`, :mod:`service.api.errors`);
- error bodies in the one shape the service sends: ``{"detail": "..."}``;
- params and provenance objects (``JsonDict``) as the recursive JSON they may be: any JSON
  without NUL in a string.

Statuses only some routes answer (409 for a lost lease, 403 for another worker's lease) are
declared on the routes themselves.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any, get_args

from fastapi import FastAPI, routing
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from service.api.deps import require_read, require_read_async
from service.schemas.client_results import CLIENT_KEY_SCHEMA
from service.schemas.common import JSON_OBJECT_MARK, TEXT_PATTERN
from service.settings import Settings
from tuner.epilogues import EPILOGUES, EPILOGUES_OF_OP
from tuner.moe import MAX_EXPERTS, SKEWS
from tuner.problems import (
    MAX_DIM,
    PROBLEM_TYPES,
    SCALED_GEMM_OUT_DTYPES,
    SCALINGS,
    ReduceKind,
)

__all__ = [
    "install_openapi",
    "allowed_methods",
    "api_routes",
    "problem_schema",
    "ERROR_SCHEMA",
    "described",
    "conditional_get",
]

ERROR_SCHEMA: dict[str, Any] = {
    "title": "ErrorOut",
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}
_ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}
_BEARER = "HTTPBearer"
_DESCRIPTIONS = {
    "401": "missing, unknown or revoked token",
    "403": "the token lacks the scope this call needs",
    "404": "no such id",
    "413": "the request body is over the size limit",
}
_OPEN_READ_401 = "a token was sent and it is unknown or revoked (reads need none)"
#: the artifact upload, whose ``size`` may be at most this server's limit
_ARTIFACT_UPLOAD = "/v1/leases/{lease_id}/artifacts/{variant_id}"
#: the routes that take a problem as query dims (``m=&n=&k=``, ``kind=`` for reduce)
_DIM_QUERY_PATHS = ("/v1/configs/best", "/v1/measurements")


#: the problems of a job (``JobCreate.problems``): the schema's home is here, beside the
#: query dims, because the schemas import nothing of tuner (whose problems define the dims)
_JOB_PROBLEMS = ("JobCreate", "problems")


def described(answers: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses``: each status with the text that says when it is answered."""
    return {status: {"description": text} for status, text in answers.items()}


def conditional_get(not_found: str) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a lookup answered through :func:`service.api.caching.conditional`:
    the 304 of an unchanged answer, and the 404 that says what was not found."""
    return described({304: "unchanged since the ETag sent in If-None-Match", 404: not_found})


def _dim_schema(name: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0 if name == "pad" else 1, "maximum": MAX_DIM}


_KIND_SCHEMA: dict[str, Any] = {"type": "string", "enum": list(get_args(ReduceKind))}


def _dim_parameters() -> list[dict[str, Any]]:
    """Every problem dim of every op as an optional query parameter (which ones a query
    needs depends on its op: the 422 names a missing or unknown one)."""
    names = sorted({name for cls in PROBLEM_TYPES.values() for name in cls.dim_names})
    parameters = [
        {
            "name": name,
            "in": "query",
            "required": False,
            "description": "a problem dim of the ops that have it",
            "schema": _dim_schema(name),
        }
        for name in names
    ]
    parameters.append(
        {
            "name": "kind",
            "in": "query",
            "required": False,
            "description": "reduce only",
            "schema": dict(_KIND_SCHEMA),
        }
    )
    parameters.append(
        {
            "name": "epilogue",
            "in": "query",
            "required": False,
            "description": "gemm and conv2d: the fused epilogue (none when left out; "
            "gated_silu is gemm only)",
            "schema": {"type": "string", "enum": list(EPILOGUES)},
        }
    )
    return parameters


def problem_schema() -> dict[str, Any]:
    """JSON schema of a problem: the dims of one of the ops (which op is the request's; a
    product of dims over tuner.problems.MAX_ELEMENTS is refused too, which JSON Schema
    cannot say)."""
    shapes = []
    for op, cls in PROBLEM_TYPES.items():
        fields = {f.name: f for f in dataclasses.fields(cls)}
        properties: dict[str, Any] = {name: _dim_schema(name) for name in cls.dim_names}
        if op == "reduce":
            properties["kind"] = dict(_KIND_SCHEMA)
        if op in EPILOGUES_OF_OP:
            properties["epilogue"] = {"type": "string", "enum": list(EPILOGUES_OF_OP[op])}
        if op == "scaled_gemm":
            properties["out_dtype"] = {"type": "string", "enum": list(SCALED_GEMM_OUT_DTYPES)}
            properties["scaling"] = {"type": "string", "enum": list(SCALINGS)}
        if op == "grouped_gemm":  # tuner.problems.GroupedGemmProblem's rules, said in JSON
            properties["experts"]["maximum"] = MAX_EXPERTS
            properties["n"]["multipleOf"] = properties["k"]["multipleOf"] = 8
            properties["skew"] = {"type": "integer", "enum": list(SKEWS)}
        required = [name for name in properties if fields[name].default is dataclasses.MISSING]
        shapes.append(
            {
                "title": f"{op} problem",
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            }
        )
    return {"anyOf": shapes}


_JSON_OBJECT_REF = {"$ref": "#/components/schemas/JsonObject"}
_JSON_SCHEMAS: dict[str, Any] = {
    "JsonObject": {
        "type": "object",
        "propertyNames": {"pattern": TEXT_PATTERN},
        "additionalProperties": {"$ref": "#/components/schemas/JsonValue"},
    },
    "JsonValue": {
        "anyOf": [
            {"type": "null"},
            {"type": "boolean"},
            {"type": "number"},
            {"type": "string", "pattern": TEXT_PATTERN},
            {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
            _JSON_OBJECT_REF,
        ]
    },
}


def _json_objects(node: Any) -> Any:
    """Replace every schema marked as a JsonDict by a reference to JsonObject."""
    if isinstance(node, dict):
        if node.get(JSON_OBJECT_MARK):
            return dict(_JSON_OBJECT_REF)
        return {key: _json_objects(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_json_objects(item) for item in node]
    return node


def api_routes(app: FastAPI) -> Iterator[tuple[str, APIRoute]]:
    """(path as documented, route) of every API route, included routers too."""
    contexts = getattr(routing, "iter_route_contexts", None)
    if contexts is None:  # FastAPI before included-router contexts: routes are flat
        for route in app.routes:
            if isinstance(route, APIRoute):
                yield route.path_format, route
        return
    for context in contexts(app.routes):
        route = context.original_route
        if isinstance(route, APIRoute):
            yield context.path_format or route.path_format, route


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the document lists for the path a request named (the Allow of a 405)."""
    methods: set[str] = set()
    for template, item in app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            methods |= {method.upper() for method in item}
    return sorted(methods)


def _uses(route: APIRoute, dependency: Any) -> bool:
    stack = list(route.dependant.dependencies)
    while stack:
        item = stack.pop()
        if item.call is dependency:
            return True
        stack.extend(item.dependencies)
    return False


def _error(operation: dict[str, Any], status: str, description: str) -> None:
    responses = operation.setdefault("responses", {})
    if status in responses:
        responses[status].setdefault("content", {"application/json": {"schema": _ERROR_REF}})
        return
    responses[status] = {
        "description": description,
        "content": {"application/json": {"schema": _ERROR_REF}},
    }


def _validation_error(operation: dict[str, Any]) -> None:
    operation.setdefault("responses", {}).setdefault(
        "422",
        {
            "description": "Validation Error",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}
            },
        },
    )


def _document(schema: dict[str, Any], app: FastAPI, settings: Settings) -> None:
    components = schema.setdefault("components", {})
    components["schemas"] = _json_objects(components.get("schemas", {}))
    components["schemas"].update({"ErrorOut": ERROR_SCHEMA, **_JSON_SCHEMAS})
    model, field = _JOB_PROBLEMS
    components["schemas"][model]["properties"][field]["items"] = problem_schema()
    components.setdefault("securitySchemes", {}).setdefault(
        _BEARER, {"type": "http", "scheme": "bearer", "description": "an API token: th_..."}
    )
    reads = {
        (path, method.lower())
        for path, route in api_routes(app)
        if _uses(route, require_read) or _uses(route, require_read_async)
        for method in route.methods or ()
    }
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            if (path, method) in reads:
                if settings.read_token_required:
                    operation["security"] = [{_BEARER: []}]
                else:
                    operation.pop("security", None)
                    _error(operation, "401", _OPEN_READ_401)
            if operation.get("security"):
                _error(operation, "401", _DESCRIPTIONS["401"])
                _error(operation, "403", _DESCRIPTIONS["403"])
            if any(p.get("in") == "path" for p in operation.get("parameters", ())):
                _error(operation, "404", _DESCRIPTIONS["404"])
            if "requestBody" in operation:
                _error(operation, "413", _DESCRIPTIONS["413"])
                _validation_error(operation)
            if path in _DIM_QUERY_PATHS and method == "get":
                named = {p["name"] for p in operation.get("parameters", ())}
                operation.setdefault("parameters", []).extend(
                    p for p in _dim_parameters() if p["name"] not in named
                )
            for parameter in operation.get("parameters", ()):
                if path == "/v1/client-configs/best" and parameter["name"] == "key":
                    parameter.pop("schema", None)
                    parameter["content"] = {"application/json": {"schema": CLIENT_KEY_SCHEMA}}
                if path == _ARTIFACT_UPLOAD and parameter["name"] == "size":
                    # this server's limit (TUNEHUB_MAX_ARTIFACT_BYTES): above it, 413
                    parameter["schema"]["maximum"] = settings.max_artifact_bytes
            for status, response in operation.get("responses", {}).items():
                if status.startswith(("4", "5")) and "content" not in response:
                    response["content"] = {"application/json": {"schema": _ERROR_REF}}


def install_openapi(app: FastAPI, settings: Settings) -> None:
    """Replace ``app.openapi`` with one that documents what the routes answer."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            _document(schema, app, settings)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
