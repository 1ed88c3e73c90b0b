"""The service's exception tree, and how each maps to an HTTP answer.

    ServiceError                 base of what the service raises on purpose
    ├── DatabaseNotMigrated      the database is empty or at an older revision (startup refuses)
    └── ApiError                 an answer to a client, with a status code and a detail
        ├── NotFound             404: unknown id, or nothing tuned for a query
        ├── Conflict             409: the lease is no longer held, or the state forbids the call
        └── InvalidInput         422: a bad field, named by ``loc`` like FastAPI's own errors

Everything a client can send ends in one of these or in FastAPI's 422; an unexpected exception
is a bug and is answered 500 with a generic message (and logged).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

__all__ = [
    "ServiceError",
    "DatabaseNotMigrated",
    "ApiError",
    "NotFound",
    "Conflict",
    "InvalidInput",
    "validation_detail",
    "install_error_handlers",
]

log = logging.getLogger(__name__)


class ServiceError(Exception):
    """Base class of the service's errors."""


class DatabaseNotMigrated(ServiceError):
    """The database schema is not at the revision this code needs."""


class ApiError(ServiceError):
    status_code = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotFound(ApiError):
    status_code = 404


class Conflict(ApiError):
    status_code = 409


class InvalidInput(ApiError):
    """A 422 shaped like FastAPI's validation errors: ``{"detail": [{loc, msg, type}]}``."""

    status_code = 422

    def __init__(self, loc: Sequence[str | int], msg: str) -> None:
        super().__init__(msg)
        self.loc = list(loc)

    def body(self) -> dict[str, object]:
        return {"detail": [{"loc": self.loc, "msg": self.detail, "type": "value_error"}]}


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

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        if isinstance(exc, InvalidInput):
            return JSONResponse(exc.body(), status_code=exc.status_code)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error"}, status_code=500)
