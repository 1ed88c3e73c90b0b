"""``/v1/configs``: best-config lookups (one or a batch), and export/import of best configs."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.api.caching import conditional, etag_of
from service.api.deps import (
    DeviceQuery,
    SessionDep,
    ToolchainQuery,
    require_read,
    require_read_async,
    require_scope,
)
from service.api.openapi import conditional_get
from service.errors import InvalidInput, RequestError
from service.schemas.common import BackendName, DType, Op, SafeStr
from service.schemas.configs import (
    BestConfigOut,
    ConfigQueryBatch,
    ConfigQueryResults,
    ImportSummary,
)
from service.store.imports import import_lines
from service.store.lookup import LookupQuery, find_best, find_best_many
from service.store.rows import columns
from service.store.transfer import export_lines
from service.store.validation import check_dtype, check_layout, parse_problem, query_dims

__all__ = ["router"]

router = APIRouter(tags=["configs"])

_KNOWN_QUERY = {"op", "dtype", "layout", "device", "backend", "toolchain"}


def _lookup(maker: sessionmaker[Session], query: LookupQuery) -> bytes:
    with maker() as session:
        asked = columns(query, "op", "dtype", "layout", "problem", "device", "backend", "toolchain")
        answer = find_best(session, **asked)
    return answer.model_dump_json().encode()


@router.get(
    "/v1/configs/best",
    response_model=BestConfigOut,
    dependencies=[Depends(require_read_async)],
    responses=conditional_get("not tuned yet, and no tuned problem near it"),
)
async def best_config(
    request: Request,
    op: Op,
    dtype: DType,
    layout: Annotated[SafeStr | None, Query(max_length=16)] = None,
    device: DeviceQuery = None,
    backend: BackendName | None = None,
    toolchain: ToolchainQuery = None,
) -> Response:
    """The winner for a problem given as query dims (``m=&n=&k=``, ``kind=`` for reduce).

    ``exact`` is false when the answer comes from the nearest tuned problem (``distance`` in
    log2 space of the dims). The answer carries an ETag; send it back in ``If-None-Match``
    to get a 304 while the answer is unchanged."""
    layout = check_layout(op, layout, ["query", "layout"])
    check_dtype(op, dtype, ["query", "dtype"])
    problem = parse_problem(op, query_dims(request.query_params, _KNOWN_QUERY), ["query"], dtype)
    query = LookupQuery(op, dtype, layout, problem, device, backend, toolchain)
    maker = request.app.state.sessionmaker
    if request.app.state.settings.is_sqlite:
        # a lookup is two indexed reads of a local file (WAL: never behind a writer), cheaper
        # than the hop to a worker thread and back; a network database keeps the threadpool
        body = _lookup(maker, query)
    else:
        body = await run_in_threadpool(_lookup, maker, query)
    return conditional(request, body)


@router.post(
    "/v1/configs/query", response_model=ConfigQueryResults, dependencies=[Depends(require_read)]
)
def query_configs(body: ConfigQueryBatch, session: SessionDep) -> Response:
    """Many lookups in one request; each answer is the best config or null with an error.
    The whole batch costs a constant number of database statements."""
    parsed: list[LookupQuery | str] = []
    for index, query in enumerate(body.queries):
        try:
            layout = check_layout(query.op, query.layout, ["body", "queries", index, "layout"])
            check_dtype(query.op, query.dtype, ["body", "queries", index, "dtype"])
            problem = parse_problem(
                query.op, query.problem, ["body", "queries", index, "problem"], query.dtype
            )
        except InvalidInput as exc:
            parsed.append(f"{'.'.join(map(str, exc.loc))}: {exc.detail}")
            continue
        parsed.append(
            LookupQuery(
                query.op, query.dtype, layout, problem, query.device, query.backend, query.toolchain
            )
        )
    valid = [q for q in parsed if isinstance(q, LookupQuery)]
    answers = iter(find_best_many(session, valid))
    parts: list[bytes] = []  # each result's JSON, written here: FastAPI's path took longer
    for item in parsed:
        answer = item if isinstance(item, str) else next(answers)
        if isinstance(answer, str | RequestError):
            error = answer if isinstance(answer, str) else answer.detail
            parts.append(json.dumps({"result": None, "error": error, "etag": None}).encode())
            continue
        # the bytes GET /v1/configs/best answers, so the ETag is the one it gives
        encoded = answer.model_dump_json().encode()
        etag = json.dumps(etag_of(encoded)).encode()  # the header's value, quotes and all
        parts.append(b'{"result":%s,"error":null,"etag":%s}' % (encoded, etag))
    return Response(b'{"results":[' + b",".join(parts) + b"]}", media_type="application/json")


@router.get(
    "/v1/export",
    dependencies=[Depends(require_read)],
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}}}},
)
def export_configs(session: SessionDep) -> StreamingResponse:
    """Every best config with its measurement, device, toolchain and variant, one per line."""
    lines = list(export_lines(session))
    return StreamingResponse(iter(lines), media_type="application/x-ndjson")


@router.post(
    "/v1/import",
    response_model=ImportSummary,
    dependencies=[Depends(require_scope("admin"))],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        }
    },
)
async def import_configs(request: Request) -> ImportSummary:
    """Merge JSON lines from ``/v1/export``, each checked as an upload is: per key the faster
    verified median wins (the stored row stays unless beaten with confidence); a line stored
    already is a duplicate (importing twice changes nothing); a bad line is refused and listed
    by number, field and reason, the others imported. A 422 when no line could be."""
    raw = await request.body()  # its size is capped by BodyLimitMiddleware (413)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            ["body"], f"must be UTF-8 JSON lines ({exc.reason} at byte {exc.start})"
        ) from None
    settings = request.app.state.settings
    return await run_in_threadpool(
        _import, request.app.state.sessionmaker, text, settings.verify_variants,
        settings.record_margin,
    )  # fmt: skip


def _import(
    sessionmaker: Any, text: str, verify: bool, record_margin: float | None
) -> ImportSummary:
    with sessionmaker() as session:
        answer = import_lines(session, text, verify=verify, record_margin=record_margin)
        session.commit()
        return answer
