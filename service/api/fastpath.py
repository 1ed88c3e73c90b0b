"""The lookup hot path: ``GET /v1/configs/best`` answered from an in-process response cache.

    app.add_middleware(CachedLookupMiddleware, app_ref=app, signal=ChangeSignal(url))

A build farm asks the same few thousand shapes all day; FastAPI's parameter solving, the
session and SQLAlchemy's execution cost about 1 ms of CPU per lookup (docs/benchmarks/
load.md), while replaying a known answer costs a fraction of that. So this pure ASGI
middleware, in front of FastAPI:

- passes everything to FastAPI on a miss: the route validates, looks up and answers as
  always (422s, 404s, 401s and their bodies are FastAPI's own, never cached), and its 200
  answer (body and ETag) is kept, keyed by the query string with its parameters sorted
  (a 200 answer does not depend on their order; anything else is never kept);
- replays a kept answer on a hit through :func:`service.api.caching.conditional_answer`,
  the function the route itself answers with, so bodies, statuses and headers (304 too)
  are the same bytes;
- drops every kept answer when the database's change signal moves
  (:class:`service.store.freshness.ChangeSignal`: one PRAGMA or one cheap query per
  lookup), so a write committed by any process is seen by the next lookup;
- tokens stay the route's to check: a request that needs one (``read_token_required``)
  and sends none, or sends an ``Authorization`` that is not a bearer token, always goes to
  the route; a bearer token is answered from the cache only once the route has answered a
  read with it since the last commit (a revocation is a commit, so it empties what the
  route accepted with the rest).

On PostgreSQL the route's nearest-shape index may miss rows committed out of id order until
its recount (at most best_index.RECOUNT_SECONDS after the last one), so an answer kept within
RECOUNT_SECONDS of the signal's change expires RECOUNT_SECONDS after it was kept; one kept
later was derived from an index recounted after every commit the signal reflects, and stays.
The signal there counts writes to this database's tunehub tables only (migration 0006), and
keeps nothing while one of them is in flight.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.caching import conditional_answer
from service.api.deps import bearer_credentials
from service.store.best_index import RECOUNT_SECONDS
from service.store.freshness import ChangeSignal

__all__ = ["LOOKUP_PATH", "MAX_CACHED", "CachedLookupMiddleware"]

LOOKUP_PATH = "/v1/configs/best"
#: kept answers (about 1 kB each); past this the cache starts over rather than track ages
MAX_CACHED = 50_000


def _normalised(query_string: bytes) -> bytes:
    return b"&".join(sorted(query_string.split(b"&")))


class _Answers:
    """Kept answers valid for one value of the change signal."""

    def __init__(self) -> None:
        self.version: object = None
        self.since = 0.0  # monotonic time the signal was first seen at this version
        # normalised query string -> (body, etag, monotonic time kept)
        self.entries: dict[bytes, tuple[bytes, str, float]] = {}
        # Authorization header values the route accepted for a read at this version
        self.readers: set[str] = set()

    def at(self, version: object) -> None:
        if version != self.version:
            self.entries = {}
            self.readers = set()
            self.version = version
            self.since = time.monotonic()


class CachedLookupMiddleware:
    """Pure ASGI: the cached answer of ``GET /v1/configs/best`` or the app's own answer."""

    def __init__(self, app: ASGIApp, app_ref: Any, signal: ChangeSignal) -> None:
        self.app = app
        self.app_ref = app_ref  # the FastAPI app: its settings may change at run time
        self.signal = signal
        self.max_age = None if signal.is_sqlite else RECOUNT_SECONDS
        self.answers = _Answers()
        self.route: Any = None  # the route object, for the metrics' route label on a hit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != LOOKUP_PATH or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        if_none_match: str | None = None
        authorization: str | None = None
        for name, value in scope["headers"]:
            if name == b"if-none-match" and if_none_match is None:
                if_none_match = value.decode("latin-1")
            elif name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
        if (
            bearer_credentials(authorization) is None
            if authorization is not None
            else self.app_ref.state.settings.read_token_required
        ):
            await self.app(scope, receive, send)  # the route answers 401 (or an open read)
            return
        try:
            version = self.signal.current()
        except Exception:  # the database is unreachable: the route answers that as always
            await self.app(scope, receive, send)
            return
        answers = self.answers
        answers.at(version)
        key = _normalised(scope["query_string"])
        kept = answers.entries.get(key)
        trusted = authorization is None or authorization in answers.readers
        if kept is not None and trusted and self.route is not None:
            body, etag, kept_at = kept
            if self._valid(kept_at):
                scope["route"] = self.route
                response = conditional_answer(if_none_match, body, etag)
                await response(scope, receive, send)
                return
        await self._miss(scope, receive, send, key, version, authorization)

    def _valid(self, kept_at: float) -> bool:
        if self.max_age is None:  # SQLite commits in id order: the index is never behind
            return True
        settled = kept_at - self.answers.since >= self.max_age
        return settled or time.monotonic() - kept_at < self.max_age

    async def _miss(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        key: bytes,
        version: object,
        authorization: str | None,
    ) -> None:
        status = 0
        etag: str | None = None
        chunks: list[bytes] = []

        async def keep(message: Message) -> None:
            nonlocal status, etag
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for name, value in message.get("headers", ()):
                    if name == b"etag":
                        etag = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, keep)
        # only a full 200 answer is kept, and only under the version read before the lookup
        # (a write committed meanwhile moved the signal: the next lookup starts over)
        if status != 200 or etag is None or self.answers.version != version:
            return
        if authorization is not None:  # the route checked this token and answered
            if len(self.answers.readers) >= MAX_CACHED:
                self.answers.readers = set()
            self.answers.readers.add(authorization)
        self.route = scope.get("route", self.route)
        if len(self.answers.entries) >= MAX_CACHED:
            self.answers.entries = {}
        self.answers.entries[key] = (b"".join(chunks), etag, time.monotonic())
