"""``/v1/client-results`` and ``/v1/client-configs/best``: configs of a client's own kernels
(the Triton autotune drop-in) measured by the client, shared through the service.

Uploads need a ``submit``-scope token and are stored as client-measured under their op
family (``triton:<kernel hash>``), apart from worker-verified results, which they can never
replace. Lookups answer with an ``ETag`` and honour ``If-None-Match`` (304).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import TypeAdapter, ValidationError

from service.api.caching import conditional
from service.api.deps import DeviceQuery, SessionDep, ToolchainQuery, require_read, require_scope
from service.api.openapi import conditional_get
from service.errors import InvalidInput
from service.schemas.client_results import (
    CLIENT_OP_PATTERN,
    ClientBestOut,
    ClientKey,
    ClientResultsIn,
    ClientResultsOut,
)
from service.schemas.common import BackendName, SafeStr
from service.store.client_results import find_client_best, store_client_results
from service.store.models import ApiToken

__all__ = ["router"]

router = APIRouter(tags=["client results"])

_KEY_ADAPTER: TypeAdapter[dict[str, Any]] = TypeAdapter(ClientKey)


@router.post("/v1/client-results", response_model=ClientResultsOut)
def upload_client_results(
    body: ClientResultsIn,
    session: SessionDep,
    token: Annotated[ApiToken, Depends(require_scope("submit"))],
) -> ClientResultsOut:
    """Store a client's measurements of its kernel's configs for one key and keep the winner
    (verified ``ok`` only; a stored winner stays unless the new one is > 2% faster)."""
    answer = store_client_results(session, body, token.id)
    session.commit()
    return answer


def _parse_key(text: str) -> dict[str, Any]:
    try:
        return _KEY_ADAPTER.validate_python(json.loads(text))
    except (ValueError, ValidationError) as exc:
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise InvalidInput(
            ["query", "key"], f"must be a JSON object of scalars: {reason}"
        ) from None


@router.get(
    "/v1/client-configs/best",
    response_model=ClientBestOut,
    dependencies=[Depends(require_read)],
    responses=conditional_get("no client-measured config for this key"),
)
def client_best(
    request: Request,
    session: SessionDep,
    op: Annotated[str, Query(pattern=CLIENT_OP_PATTERN, max_length=80)],
    key: Annotated[
        SafeStr, Query(max_length=8192, description="the autotune key as a JSON object")
    ],
    device: DeviceQuery = None,
    backend: BackendName | None = None,
    toolchain: ToolchainQuery = None,
) -> Response:
    """The winner for ``key`` on ``device`` (a device key or part of a name)."""
    answer = find_client_best(session, op, _parse_key(key), device, toolchain, backend)
    return conditional(request, answer.model_dump_json().encode())
