"""Hostile text everywhere: NUL, lone UTF-16 surrogates and other odd code points in every
string field of every request body and in every query and path parameter (and ids past any
integer column in every path), UI routes included.

Every field is found from the routes themselves (their body models and parameters), so a new
field or route is fuzzed without this file changing; a body example must name every string
field (the test says which one it lacks). Refused text is a 422 naming the field; nothing is
a 500; and after all of it every read still answers.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from service.api.openapi import api_routes

#: refused wherever a client sends text
BAD_TEXT = ["\x00", "a\x00b", "\ud800", "x\udfffy", "\udfff\ud800", "\ud83d"]
#: odd but real characters: taken or refused, never a 500
ODD_TEXT = ["\ufffe", "\uffff", "\U0010ffff", "\x7f\x1b[2J", "\u202egnp.exe", "\ufeffbom"]
#: query and path text as a URL carries it: NUL, a UTF-8 encoded surrogate (not UTF-8 at all),
#: stray bytes, a noncharacter
BAD_QUERY = ["%00", "a%00b"]
ODD_QUERY = ["%ED%A0%80", "%FF%FE", "%EF%BF%BE", "%F4%8F%BF%BF", "%C0%80"]
#: ids no row can have: past int32 (PostgreSQL's integer) and int64 (SQLite's), negative, zero
HUGE_IDS = ["0", "-1", str(2**31), str(2**63), "9" * 30]

KEY = "<key>"  # a path step: a new key of the dict
VALUE = "<value>"  # a path step: the value of the dict's first key


def _string_paths(annotation: Any, prefix: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
    """Paths to every place a model takes text: fields, list items, dict keys and values."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        yield from _string_paths(get_args(annotation)[0], prefix)
    elif origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            if arg is not type(None):
                yield from _string_paths(arg, prefix)
    elif origin is list:
        yield from _string_paths(get_args(annotation)[0], (*prefix, 0))
    elif origin is dict:
        yield (*prefix, KEY)
        yield (*prefix, VALUE)
    elif origin is Literal:
        if any(isinstance(arg, str) for arg in get_args(annotation)):
            yield prefix
    elif annotation is str:
        yield prefix
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            yield from _string_paths(field.annotation, (*prefix, name))


def _present(body: Any, path: tuple[Any, ...]) -> bool:
    node = body
    for step in path:
        if step in (KEY, VALUE):
            return isinstance(node, dict) and bool(node)
        if isinstance(step, int):
            if not isinstance(node, list) or not node:
                return False
            node = node[0]
        elif isinstance(node, dict) and step in node:
            node = node[step]
        else:
            return False
    return True


def _mutated(body: dict[str, Any], path: tuple[Any, ...], text: str) -> dict[str, Any]:
    body = copy.deepcopy(body)
    node: Any = body
    for step in path[:-1]:
        node = node[step]
    last = path[-1]
    if last == KEY:
        node[text] = 1
    elif last == VALUE:
        node[next(iter(node))] = text
    else:
        node[last] = text
    return body


def _loc_prefix(path: tuple[Any, ...]) -> list[Any]:
    return ["body", *(step for step in path if step not in (KEY, VALUE))]


def _names_field(response: Any, prefix: list[Any]) -> bool:
    return any(item["loc"][: len(prefix)] == prefix for item in response.json()["detail"])


def _examples(api: Any, worker_id: str) -> dict[tuple[str, str], dict[str, Any]]:
    """A complete body per route: every string field given (so each can be spoiled)."""
    device = {**api.CPU_DEVICE, "driver": "drv", "runtime": "rt"}
    toolchain = {**api.TOOLCHAIN, "libraries": {"cutlass": "3.5"}}
    measurement = api.measurement("a", 2.0, log="built", provenance={"clock": "1980 MHz"})
    problem = {"m": 4, "k": 4, "kind": "sum"}
    return {
        ("POST", "/v1/jobs"): api.job_body(
            layout="row",
            objective="time",
            problems=[problem],
            device={"backend": "cpu", "name": "CPU", "arch": "x86_64-avx2"},
        ),
        ("POST", "/v1/workers"): {
            "name": "w",
            "devices": [device],
            "host": {"fingerprint": "ab" * 16, "device_uids": ["uid-1"]},
        },
        ("POST", "/v1/leases"): {"worker_id": worker_id, "backends": ["cpu"], "device": device},
        ("POST", "/v1/leases/{lease_id}/heartbeat"): {"done": 0, "total": 0},
        ("POST", "/v1/leases/{lease_id}/results"): {
            "device": device,
            "toolchain": toolchain,
            "measurements": [measurement],
            "error": "it failed",
        },
        ("POST", "/v1/configs/query"): {
            "queries": [
                {
                    "op": "reduce",
                    "dtype": "f32",
                    "layout": "row",
                    "device": "cpu",
                    "backend": "cpu",
                    "toolchain": "t",
                    "problem": problem,
                }
            ]
        },
        ("POST", "/v1/tokens"): {"name": "t", "scopes": ["read"]},
        ("POST", "/v1/client-results"): {
            "op": "triton:" + "a" * 16,
            "kernel_name": "k",
            "key": {"M": "x"},
            "device": device,
            "toolchain": toolchain,
            "measurements": [
                {
                    "config_name": "c",
                    "params": {"a": "b"},
                    "outcome": "ok",
                    "median_us": 1.0,
                    "log": "l",
                }
            ],
            "provenance": {"timer": "events"},
        },
        ("PUT", "/v1/tokens/{token_id}/devices"): {"devices": ["cuda:NVIDIA H200:sm_90:132"]},
        ("PUT", "/v1/devices/{device_id}/rates"): {
            "copy_gbps": 4000.0,
            "peak_tflops": {"f16": 989.0},
        },
        ("PUT", "/v1/leases/{lease_id}/builds/{variant_id}"): {
            "variant_id": "a" * 64,
            "source": "int x;",
            "variant_source": "int x;",
            "flags": ["-O2"],
            "build_flags": ["-shared"],
            "compiler": "g++ 12",
            "compiler_name": "g++",
            "template_version": "abc",
            "needs": ["cutlass"],
            "link": ["libx.so"],
        },
    }


#: a valid value for each required query parameter and path parameter
_QUERY_BASE = {
    "/v1/configs/best": "op=reduce&dtype=f32&m=4&k=4&kind=sum",
    "/v1/measurements": "op=reduce&dtype=f32&m=4&k=4&kind=sum",
    "/v1/client-configs/best": "op=triton:" + "a" * 16 + "&key=%7B%22M%22%3A1%7D",
    "/v1/leases/{lease_id}/artifacts/{variant_id}": "sha256=" + "b" * 64 + "&size=1",
}
#: the problem dims a route takes as undeclared query parameters
_DIM_ROUTES = ("/v1/configs/best", "/v1/measurements")


def _url(path: str, ids: dict[str, str], query: str) -> str:
    for name, value in ids.items():
        path = path.replace("{" + name + "}", value)
    return f"{path}?{query}" if query else path


def _send(api: Any, method: str, url: str, body: Any = None) -> Any:
    headers = {**api.harness.admin}
    content = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        content = json.dumps(body).encode()  # ensure_ascii: a surrogate travels as \udxxx
    elif method in ("PUT", "POST"):
        content = b"x"
        headers["Content-Type"] = "application/octet-stream"
    return api.client.request(method, url, content=content, headers=headers)


def _setup(api: Any) -> dict[str, Any]:
    """A tuned job (winner, measurements) to read back, and a lease to upload to."""
    job = api.tune([api.measurement("a", 2.0), api.measurement("b", 3.0)])
    worker_id = api.register()
    api.submit()
    leased = api.lease(worker_id)
    assert leased is not None
    rows = api.client.get("/v1/measurements", params={"job_id": job["id"]}).json()
    return {
        "job_id": job["id"],
        "worker_id": worker_id,
        "lease_id": leased["lease_id"],
        "measurement_id": str(rows["measurements"][0]["id"]),
    }


def _reads(state: dict[str, Any]) -> list[str]:
    job, measurement = state["job_id"], state["measurement_id"]
    return [
        "/v1/jobs",
        f"/v1/jobs/{job}",
        f"/v1/measurements?job_id={job}",
        "/v1/measurements?op=reduce&dtype=f32&m=1024&k=4096&kind=sum",
        "/v1/configs/best?op=reduce&dtype=f32&m=1024&k=4096&kind=sum",
        "/v1/export",
        "/metrics",
        "/ui/jobs",
        f"/ui/jobs/{job}",
        "/ui/best",
        f"/ui/measurements/{measurement}",
    ]


def _assert_reads(api: Any, state: dict[str, Any]) -> None:
    for url in _reads(state):
        response = api.client.get(url)
        assert response.status_code == 200, (url, response.text[:300])


def test_every_string_field_refuses_bad_text_by_name(api: Any) -> None:
    state = _setup(api)
    ids = {"lease_id": state["lease_id"], "variant_id": "a" * 64, "token_id": "1", "device_id": "1"}
    examples = _examples(api, state["worker_id"])
    fuzzed = 0
    for path, route in api_routes(api.client.app):
        if route.body_field is None:
            continue
        model = route.body_field.field_info.annotation
        for method in route.methods:
            example = examples.get((method, path))
            assert example is not None, f"no example body for {method} {path}"
            model.model_validate(example)  # the example itself is valid
            for where in _string_paths(model, ()):
                assert _present(example, where), f"{method} {path}: example lacks {where}"
                for text in BAD_TEXT:
                    body = _mutated(example, where, text)
                    response = _send(api, method, _url(path, ids, ""), body)
                    assert response.status_code == 422, (method, path, where, text, response.text)
                    assert _names_field(response, _loc_prefix(where)), (where, response.text)
                    fuzzed += 1
                for text in ODD_TEXT:
                    body = _mutated(example, where, text)
                    response = _send(api, method, _url(path, ids, ""), body)
                    assert response.status_code < 500, (method, path, where, text, response.text)
    assert fuzzed > 400  # the walk found the fields
    _assert_reads(api, state)


def test_every_query_and_path_parameter_refuses_bad_text(api: Any) -> None:
    state = _setup(api)
    ids = {
        "lease_id": state["lease_id"],
        "variant_id": "a" * 64,
        "job_id": state["job_id"],
        "measurement_id": state["measurement_id"],
        "sha256": "b" * 64,
        "token_id": "1",
        "device_id": "1",
    }
    checked = 0
    for path, route in api_routes(api.client.app):
        base = _QUERY_BASE.get(path, "")
        names = [param.name for param in route.dependant.query_params]
        if path in _DIM_ROUTES:
            names += ["m", "kind"]
        for method in route.methods:
            for name in names:
                kept = "&".join(p for p in base.split("&") if p and not p.startswith(f"{name}="))
                for text in BAD_QUERY:
                    url = _url(path, ids, f"{kept}&{name}={text}".lstrip("&"))
                    response = _send(api, method, url)
                    assert response.status_code == 422, (method, url, response.text)
                    assert ["query", name] in [item["loc"] for item in response.json()["detail"]], (
                        url,
                        response.text,
                    )
                    checked += 1
                for text in ODD_QUERY:
                    url = _url(path, ids, f"{kept}&{name}={text}".lstrip("&"))
                    response = _send(api, method, url)
                    assert response.status_code < 500, (method, url, response.text)
            for param in route.dependant.path_params:
                for text in BAD_QUERY + ODD_QUERY + HUGE_IDS:
                    url = _url(path, {**ids, param.name: text}, base)
                    response = _send(api, method, url)
                    assert response.status_code in (404, 422), (method, url, response.text)
                    checked += 1
    assert checked > 100
    _assert_reads(api, state)
