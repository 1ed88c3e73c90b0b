"""The client's plumbing: one ``httpx.Client``, retries, error mapping and answer parsing.
:class:`service.client._lookups.CachedLookups` and :class:`service.client.TunehubClient` build
their calls on it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from os import PathLike
from typing import Any, Self

import httpx
from pydantic import BaseModel, ValidationError

from service.client._answers import Answer
from service.client._cache import ResponseCache
from service.client._down import SERVICE_DOWN_S, ServiceDown
from service.client._errors import ApiError, ConnectionFailed, LeaseLost
from service.client._retry import RetryPolicy

__all__ = ["Transport", "DEFAULT_TIMEOUT_S"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0


class Transport:
    """Sends one call with retries and parses its answer; holds the on-disk answer cache and
    the "service down" state the lookups use (see :class:`service.client.TunehubClient`)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        *,
        retry: RetryPolicy | None = None,
        cache_dir: str | PathLike[str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        down_s: float = SERVICE_DOWN_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.service_down = ServiceDown(down_s)
        self.retry = retry or RetryPolicy()
        self.cache = ResponseCache(cache_dir) if cache_dir is not None else None
        self._sleep = sleep
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        lease_call: bool = False,
        idempotent: bool | None = None,
        raw: bytes | None = None,
    ) -> httpx.Response:
        """One call with retries; raises ApiError for an error status, ConnectionFailed when
        the server cannot be reached. ``idempotent`` defaults to "the method is GET". The
        body is ``body`` as JSON, or ``raw`` bytes (application/octet-stream)."""
        safe = method == "GET" if idempotent is None else idempotent
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        content = body.model_dump_json().encode() if body is not None else raw
        sent = dict(headers or {})
        if body is not None:
            sent["Content-Type"] = "application/json"
        elif raw is not None:
            sent["Content-Type"] = "application/octet-stream"
        for attempt in range(self.retry.attempts):
            last = attempt == self.retry.attempts - 1
            try:
                response = self._http.request(
                    method, path, content=content, headers=sent or None, params=clean or None
                )
            except httpx.TransportError as exc:
                if last or not self.retry.retry_error(exc, safe):
                    reason = (
                        f"timed out ({type(exc).__name__})"
                        if isinstance(exc, httpx.TimeoutException)
                        else str(exc) or type(exc).__name__
                    )
                    raise ConnectionFailed(self.base_url, reason) from None
                wait = self.retry.delay(attempt)
                log.debug("%s %s: %s; retrying in %.2f s", method, path, exc, wait)
                self._sleep(wait)
                continue
            if not last and self.retry.retry_status(response.status_code, safe):
                wait = self.retry.delay(attempt, response.headers.get("Retry-After"))
                log.debug("%s %s: HTTP %d; retrying in %.2f s", method, path,
                          response.status_code, wait)  # fmt: skip
                self._sleep(wait)
                continue
            if response.status_code >= 400:
                try:
                    detail = _detail_text(response.json().get("detail", response.text))
                except (ValueError, AttributeError):
                    detail = response.text.strip()[:500] or response.reason_phrase
                error = LeaseLost if lease_call and response.status_code == 409 else ApiError
                raise error(response.status_code, detail, method, path)
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _call(
        self,
        answer: type[Answer],
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        params: Mapping[str, Any] | None = None,
        lease_call: bool = False,
        idempotent: bool | None = None,
    ) -> Answer:
        response = self._send(
            method, path, body=body, params=params, lease_call=lease_call, idempotent=idempotent
        )
        return self._parse(answer, response.content, method, path)

    def _parse(self, answer: type[Answer], content: bytes | str, method: str, path: str) -> Answer:
        try:
            return answer.model_validate_json(content)
        except ValidationError as exc:
            errors = exc.error_count()
            reason = f"{method} {path}: the reply is not a {answer.__name__} ({errors} errors)"
            raise ConnectionFailed(self.base_url, reason) from None


def _detail_text(detail: Any) -> str:
    """FastAPI details are strings or lists of {loc, msg}; turn either into one line."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict) and "msg" in item:
                loc = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                parts.append(f"{loc}: {item['msg']}" if loc else str(item["msg"]))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)
