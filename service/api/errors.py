"""How the service's errors (:mod:`service.errors`) and FastAPI's validation errors become HTTP
answers: one JSON body shape, ``{"detail": ...}``, never a traceback.

A body that is not JSON is a 422 at ``["body", ...]`` naming the problem: malformed JSON
(FastAPI's ``json_invalid``, with the decoder's reason), invalid UTF-8, nesting too deep, or a
JSON body sent under another Content-Type. A 422 lists at most MAX_ERRORS errors, string limits
are said in characters, and what it echoes (names, inputs) is cut to MAX_ECHO characters.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from service.api.openapi import allowed_methods
from service.errors import InvalidInput, RequestError
from service.schemas.messages import MAX_ECHO, cut, validation_message
from service.schemas.text import scrub

__all__ = ["SafeJSONResponse", "validation_detail", "install_error_handlers"]

log = logging.getLogger(__name__)


class SafeJSONResponse(JSONResponse):
    """FastAPI's JSON answer, always writable as UTF-8: a lone surrogate in a string (a body
    that echoes what a client sent, or text stored before the text rule) is sent as U+FFFD
    (:mod:`service.schemas.text`). The app's default response class."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return super().render(scrub(content))


#: a 422 lists at most this many errors, and says how many more there were (a body of
#: 100,000 unknown keys is answered in a few kB, not echoed back)
MAX_ERRORS = 20
#: the bodies FastAPI parses as JSON (anything else reaches validation as raw bytes)
_JSON_TYPES = re.compile(r"^application/([\w.+-]*\+)?json\b", re.IGNORECASE)


def _safe_input(value: Any) -> Any:
    """The offending input, echoed only when it is small, valid JSON (no NaN)."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return cut(repr(value))
    return value if len(text) <= MAX_ECHO else cut(text)


def validation_detail(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """FastAPI's validation errors made always serializable and bounded: at most MAX_ERRORS
    of them (then one saying how many more), names and echoed inputs cut to MAX_ECHO."""
    detail = []
    for error in errors[:MAX_ERRORS]:
        item = {
            "loc": [p if isinstance(p, int) else cut(str(p)) for p in error.get("loc", ())],
            "msg": validation_message(error),
            "type": str(error.get("type", "value_error")),
        }
        if "input" in error:
            item["input"] = _safe_input(error["input"])
        detail.append(item)
    if len(errors) > MAX_ERRORS:
        more = len(errors) - MAX_ERRORS
        detail.append({"loc": [], "msg": f"and {more} more errors", "type": "too_many_errors"})
    return detail


def _wrong_content_type(request: Request, errors: Sequence[Any]) -> InvalidInput | None:
    """A JSON body sent under another Content-Type reaches validation as bytes ("Input should
    be a valid dictionary"): say what to send instead."""
    sent = request.headers.get("content-type", "")
    if not sent or _JSON_TYPES.match(sent):
        return None
    for error in errors:
        if tuple(error.get("loc", ())) == ("body",) and isinstance(error.get("input"), bytes):
            return InvalidInput(
                ["body"],
                f"the body must be JSON sent with Content-Type: application/json (this request "
                f"said {cut(sent)!r})",
            )
    return None


def _unparsable_body(cause: BaseException) -> InvalidInput:
    """What was wrong with a body FastAPI could not parse (it says only "error parsing")."""
    if isinstance(cause, UnicodeDecodeError):
        return InvalidInput(["body"], f"not valid UTF-8: {cause.reason} at byte {cause.start}")
    if isinstance(cause, RecursionError):
        return InvalidInput(["body"], "JSON nested too deeply")
    return InvalidInput(["body"], f"not parsable as JSON ({type(cause).__name__})")


def _request_error(exc: RequestError) -> SafeJSONResponse:
    if isinstance(exc, InvalidInput):
        return SafeJSONResponse(exc.body(), status_code=exc.status_code)
    return SafeJSONResponse({"detail": exc.detail}, status_code=exc.status_code)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> SafeJSONResponse:
        wrong_type = _wrong_content_type(request, exc.errors())
        if wrong_type is not None:
            return _request_error(wrong_type)
        return SafeJSONResponse({"detail": validation_detail(exc.errors())}, status_code=422)

    @app.exception_handler(RequestError)
    async def _service_error(_request: Request, exc: RequestError) -> SafeJSONResponse:
        return _request_error(exc)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        # FastAPI turns anything raised while it parses a body into "400 error parsing the
        # body": a body over the limit (raised by the limit's receive) or one not UTF-8
        cause = exc.__cause__
        if isinstance(cause, RequestError):
            return _request_error(cause)
        if exc.status_code == 400 and cause is not None:
            return _request_error(_unparsable_body(cause))
        if exc.status_code == 405:
            # Starlette's Allow names the methods of one route; the path may have several
            allowed = ", ".join(allowed_methods(request.app, request.url.path))
            headers = {**(exc.headers or {}), "Allow": allowed}
            return SafeJSONResponse({"detail": exc.detail}, status_code=405, headers=headers)
        return await http_exception_handler(request, exc)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> SafeJSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return SafeJSONResponse({"detail": "internal error"}, status_code=500)
