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
  (:class:`service.store.freshness.ChangeSignal`: one PRAGMA per lookup, or on PostgreSQL
  one query shared by the lookups that arrived before it was sent, awaited without holding
  the loop: :meth:`service.store.read_model.ReadModel.check_async`), so a write committed by
  any process is seen by the next lookup;
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

import re
import time
from typing import Any, get_args
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.caching import conditional_answer, etag_of
from service.api.deps import bearer_credentials
from service.errors import ServiceError
from service.store.best_index import RECOUNT_SECONDS
from service.store.lookup import LookupQuery
from service.store.read_model import ReadModel
from service.store.validation import check_layout, parse_problem
from tuner.problems import DType, Op
from tuner.registry import BackendName

__all__ = ["LOOKUP_PATH", "MAX_CACHED", "CachedLookupMiddleware"]

LOOKUP_PATH = "/v1/configs/best"
#: kept answers (about 1 kB each); past this the cache starts over rather than track ages
MAX_CACHED = 50_000


def _normalised(query_string: bytes) -> bytes:
    return b"&".join(sorted(query_string.split(b"&")))


_OPS = frozenset(get_args(Op))
_DTYPES = frozenset(get_args(DType))
_BACKENDS = frozenset(get_args(BackendName))
#: text the read model takes as it is; anything else (escapes of odd characters, over the
#: route's length limits) goes to the route, which answers or refuses it
_PLAIN = {
    "layout": re.compile(r"[A-Za-z0-9_]{1,16}"),
    "device": re.compile(r"[A-Za-z0-9_.:\- ]{1,300}"),
    "toolchain": re.compile(r"[A-Za-z0-9_.:=+,/\- ]{1,1000}"),
}
_INT = re.compile(r"[0-9]{1,12}")


def parse_lookup(query_string: bytes) -> LookupQuery | None:
    """The lookup a plain query string asks for, validated as the route validates it, or None
    for anything unusual (a repeated or empty parameter, odd text, an invalid value): the
    route then answers, with its 422s."""
    text_qs = query_string.decode("latin-1")
    if "%" in text_qs or "+" in text_qs or ";" in text_qs:  # escapes: the standard parser
        try:
            pairs = parse_qsl(text_qs, keep_blank_values=True)
        except ValueError:
            return None
    else:  # plain names and values (what build scripts send): split, as parse_qsl would
        pairs = [tuple(p.split("=", 1)) if "=" in p else (p, "") for p in text_qs.split("&") if p]  # type: ignore[misc]
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params or not value:
            return None
        params[name] = value
    op, dtype, backend = params.pop("op", ""), params.pop("dtype", ""), params.pop("backend", None)
    if op not in _OPS or dtype not in _DTYPES or (backend is not None and backend not in _BACKENDS):
        return None
    text: dict[str, str | None] = {}
    for name, pattern in _PLAIN.items():
        given = params.pop(name, None)
        if given is not None and not pattern.fullmatch(given):
            return None
        text[name] = given
    dims: dict[str, Any] = {k: int(v) if _INT.fullmatch(v) else v for k, v in params.items()}
    try:
        layout = check_layout(op, text["layout"], ["query", "layout"])
        problem = parse_problem(op, dims, ["query"], dtype)
    except ServiceError:
        return None
    return LookupQuery(op, dtype, layout, problem, text["device"], backend, text["toolchain"])


def _find_route(routes: Any, path: str) -> Any:
    """The route serving ``path`` among ``routes`` and the routers they include (FastAPI
    0.165 keeps an included router as one entry holding the router's own routes), or None."""
    for route in routes:
        if getattr(route, "path", None) == path:
            return route
        router = getattr(route, "original_router", route)
        inner = getattr(router, "routes", None)
        if inner is not None and inner is not routes:
            found = _find_route(inner, path)
            if found is not None:
                return found
    return None


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

    def __init__(self, app: ASGIApp, app_ref: Any, model: ReadModel) -> None:
        self.app = app
        self.app_ref = app_ref  # the FastAPI app: its settings may change at run time
        self.model = model
        self.max_age = None if model.is_sqlite else RECOUNT_SECONDS
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
            version = await self.model.check_async()
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
        if trusted and (route := self._route()) is not None:
            query = parse_lookup(scope["query_string"])
            answer = self.model.answer(query) if query is not None else None
            if answer is not None:
                scope["route"] = route
                response = conditional_answer(if_none_match, answer, etag_of(answer))
                await response(scope, receive, send)
                return
        await self._miss(scope, receive, send, key, version, authorization)

    def _route(self) -> Any:
        """The lookup route object (the metrics label it), found once."""
        if self.route is None:
            self.route = _find_route(getattr(self.app_ref, "routes", ()), LOOKUP_PATH)
        return self.route

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
