"""Conditional GET answers: an ETag over the body, revalidated with ``If-None-Match``."""

from __future__ import annotations

import hashlib

from fastapi import Request, Response

__all__ = ["conditional", "conditional_answer", "etag_of", "CACHE_CONTROL"]

#: answers may be kept but must be revalidated (a 304 costs the client nothing to read)
CACHE_CONTROL = "no-cache"


def etag_of(body: bytes) -> str:
    return '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


def conditional(request: Request, body: bytes, media_type: str = "application/json") -> Response:
    """``body`` with an ETag and ``Cache-Control: no-cache`` (keep it, but revalidate), or a
    bodiless 304 when the client's ``If-None-Match`` names the same ETag."""
    return conditional_answer(request.headers.get("if-none-match"), body, etag_of(body), media_type)


def conditional_answer(
    if_none_match: str | None, body: bytes, etag: str, media_type: str = "application/json"
) -> Response:
    """:func:`conditional` from its parts: the one place both the FastAPI route and the
    cached lookup path (:mod:`service.api.fastpath`) build their answers, so they match."""
    headers = {"ETag": etag, "Cache-Control": CACHE_CONTROL}
    if if_none_match is not None:
        tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
        if etag in tags or "*" in tags:
            return Response(status_code=304, headers=headers)
    return Response(body, media_type=media_type, headers=headers)
