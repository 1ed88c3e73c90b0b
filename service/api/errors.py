"""How the service's errors (:mod:`service.errors`) and FastAPI's validation errors become HTTP
answers: one JSON body shape, ``{"detail": ...}``, never a traceback."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from service.errors import InvalidInput, RequestError

__all__ = ["validation_detail", "install_error_handlers"]

log = logging.getLogger(__name__)


def _safe_input(value: Any) -> Any:
    """The offending input, echoed only when it is small, valid JSON (no NaN)."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)[:200]
    return value if len(text) <= 200 else text[:200] + "..."


def validation_detail(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """FastAPI's validation errors made always serializable."""
    detail = []
    for error in errors:
        item = {
            "loc": [part if isinstance(part, int) else str(part) for part in error.get("loc", ())],
            "msg": str(error.get("msg", "")),
            "type": str(error.get("type", "value_error")),
        }
        if "input" in error:
            item["input"] = _safe_input(error["input"])
        detail.append(item)
    return detail


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_detail(exc.errors())}, status_code=422)

    @app.exception_handler(RequestError)
    async def _request_error(_request: Request, exc: RequestError) -> JSONResponse:
        if isinstance(exc, InvalidInput):
            return JSONResponse(exc.body(), status_code=exc.status_code)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error"}, status_code=500)
