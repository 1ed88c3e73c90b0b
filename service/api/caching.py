"""Conditional GET answers: an ETag over the body, revalidated with ``If-None-Match``."""

from __future__ import annotations

import hashlib

from fastapi import Request, Response

__all__ = ["conditional", "etag_of", "CACHE_CONTROL"]

#: answers may be kept but must be revalidated (a 304 costs the client nothing to read)
CACHE_CONTROL = "no-cache"


def etag_of(body: bytes) -> str:
    return '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


def conditional(request: Request, body: bytes, media_type: str = "application/json") -> Response:
    """``body`` with an ETag and ``Cache-Control: no-cache`` (keep it, but revalidate), or a
    bodiless 304 when the client's ``If-None-Match`` names the same ETag."""
    etag = etag_of(body)
    headers = {"ETag": etag, "Cache-Control": CACHE_CONTROL}
    wanted = request.headers.get("if-none-match")
    if wanted is not None:
        tags = {t.strip().removeprefix("W/") for t in wanted.split(",")}
        if etag in tags or "*" in tags:
            return Response(status_code=304, headers=headers)
    return Response(body, media_type=media_type, headers=headers)
