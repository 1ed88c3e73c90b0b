"""Request body size limits, applied before anything reads the body.

A body over its limit is answered 413 with the one JSON error shape (``{"detail": ...}``):
at once when ``Content-Length`` says so, and while reading when a chunked body (no
``Content-Length``) grows past it, so that nothing larger than the limit is ever buffered.
``/v1/import`` has its own, larger limit (``TUNEHUB_MAX_IMPORT_BYTES``), and so has an
artifact upload (``TUNEHUB_MAX_ARTIFACT_BYTES``, a path pattern: its path names a lease).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import BodyTooLarge

__all__ = ["BodyLimitMiddleware", "IMPORT_PATH"]

IMPORT_PATH = "/v1/import"


def _too_large(limit: int) -> BodyTooLarge:
    return BodyTooLarge(f"request body larger than {limit} bytes")


class BodyLimitMiddleware:
    """Pure ASGI middleware: ``default`` bytes for every body; ``per_path`` overrides for exact
    paths, ``per_pattern`` for paths a pattern matches in full (the first that matches)."""

    def __init__(
        self,
        app: ASGIApp,
        default: int,
        per_path: dict[str, int],
        per_pattern: Sequence[tuple[re.Pattern[str], int]] = (),
    ) -> None:
        self.app = app
        self.default = default
        self.per_path = per_path
        self.per_pattern = tuple(per_pattern)

    def limit(self, path: str) -> int:
        """The body limit of a request to ``path``."""
        if path in self.per_path:
            return self.per_path[path]
        for pattern, limit in self.per_pattern:
            if pattern.fullmatch(path):
                return limit
        return self.default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _answer(send, _too_large(limit))
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _too_large(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as exc:
            # the app's handlers answer it when it passes through them; this is for the rest
            if started:
                raise
            await _answer(send, exc)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _answer(send: Send, exc: BodyTooLarge) -> None:
    body = json.dumps({"detail": exc.detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": exc.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
