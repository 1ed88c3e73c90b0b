"""The client's cached lookups (a mixin of :class:`service.client.TunehubClient`): GETs
through the on-disk answer cache with ETags, the batch query, and the short "service down"
state that answers from the cache at once after a failed connection."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from service.client._answers import Answer, Cached, QueryAnswer, best_params
from service.client._cache import CacheEntry, request_key
from service.client._errors import ApiError, ConnectionFailed
from service.client._transport import Transport
from service.schemas.client_results import ClientBestOut, canonical_key
from service.schemas.configs import (
    BestConfigOut,
    ConfigQuery,
    ConfigQueryBatch,
    ConfigQueryResults,
)

__all__ = ["CachedLookups", "UNAVAILABLE"]

log = logging.getLogger(__name__)

#: answers that mean "the service is there but cannot answer now": a cached answer serves
UNAVAILABLE = frozenset({502, 503, 504})


class CachedLookups(Transport):
    """Lookup calls over the transport's ``_send`` and ``_parse``, its ``cache`` and
    ``service_down``."""

    def cached_get(
        self, answer: type[Answer], path: str, params: Mapping[str, Any] | None = None
    ) -> Cached[Answer]:
        """GET through the on-disk cache: revalidated with ``If-None-Match`` when an entry
        has an ETag; the entry answers (``stale=True``) while the service is unreachable or
        unavailable (502/503/504). Without ``cache_dir`` it is a plain GET."""
        key = request_key("GET", path, params)
        entry = self.cache.get(key) if self.cache is not None else None
        if self.service_down.active:
            return self._stale(answer, entry, path, self._down_error(), quiet=True)
        headers = {"If-None-Match": entry.etag} if entry is not None and entry.etag else None
        try:
            response = self._send("GET", path, params=params, headers=headers)
        except ConnectionFailed as exc:
            self.service_down.mark()
            return self._stale(answer, entry, path, exc)
        except ApiError as exc:
            if exc.status in UNAVAILABLE:
                return self._stale(answer, entry, path, exc)
            self.service_down.clear()
            if exc.status == 404 and self.cache is not None:
                self.cache.drop(key)  # the service no longer has this answer
            raise
        self.service_down.clear()
        if response.status_code == 304 and entry is not None:
            entry = self.cache.confirm(entry) if self.cache is not None else entry
            return Cached(self._parse(answer, entry.body, "GET", path), False, entry.confirmed_at)
        value = self._parse(answer, response.content, "GET", path)
        confirmed = datetime.now(UTC)
        if self.cache is not None:
            entry = self.cache.put(key, response.text, response.headers.get("ETag"))
            confirmed = entry.confirmed_at
        return Cached(value, False, confirmed)

    def _down_error(self) -> ConnectionFailed:
        return ConnectionFailed(
            self.base_url,
            f"unreachable less than {self.service_down.hold_s:g} s ago; not asked again yet",
        )

    def _stale(
        self,
        answer: type[Answer],
        entry: CacheEntry | None,
        path: str,
        error: Exception,
        quiet: bool = False,
    ) -> Cached[Answer]:
        if entry is None:
            raise error
        if not quiet:  # once per outage, not once per lookup
            log.warning("%s; answering %s from the cache of %s", error, path, entry.confirmed_at)
        return Cached(self._parse(answer, entry.body, "GET", path), True, entry.confirmed_at)

    def best_config(self, query: ConfigQuery) -> BestConfigOut:
        """GET /v1/configs/best; a shape nobody tuned raises ApiError with status 404.

        ``query.device`` is a device key (``backend:name:arch:sms``) or part of a device name."""
        return self.best(query).value

    def best(self, query: ConfigQuery) -> Cached[BestConfigOut]:
        """The best config through the cache (see :meth:`cached_get`): ApiError 404 when not
        tuned, ConnectionFailed when the service is unreachable and nothing is cached."""
        return self.cached_get(BestConfigOut, "/v1/configs/best", best_params(query))

    def best_from_cache(self, query: ConfigQuery) -> Cached[BestConfigOut] | None:
        """The answer :meth:`best` (or :meth:`query`) last stored on disk for ``query``,
        without asking the service (``stale`` is false: nothing failed); None when nothing is
        cached or the client has no ``cache_dir``. For callers that must not wait on the
        network once they hold an answer (the PyTorch ops)."""
        if self.cache is None:
            return None
        entry = self.cache.get(request_key("GET", "/v1/configs/best", best_params(query)))
        if entry is None:
            return None
        try:
            value = BestConfigOut.model_validate_json(entry.body)
        except ValidationError:
            log.warning("ignoring a cached answer that is not a BestConfigOut: %s", entry.key)
            return None
        return Cached(value, False, entry.confirmed_at)

    def query_configs(self, batch: ConfigQueryBatch) -> ConfigQueryResults:
        """POST /v1/configs/query: many problems in one request (read-only, so retried)."""
        return self._call(
            ConfigQueryResults, "POST", "/v1/configs/query", body=batch, idempotent=True
        )

    def query(self, queries: Sequence[ConfigQuery]) -> list[QueryAnswer]:
        """Many lookups in one request; each answer is cached as :meth:`best` caches it (with
        the ETag the service gives it, so the next :meth:`best` revalidates), and read back
        (``stale``) for every problem while the service cannot answer."""
        if not queries:
            return []
        if self.service_down.active:
            down = self._down_error()
            return [self._query_from_cache(query, down) for query in queries]
        try:
            results = self.query_configs(ConfigQueryBatch(queries=list(queries))).results
        except (ConnectionFailed, ApiError) as exc:
            if isinstance(exc, ApiError) and exc.status not in UNAVAILABLE:
                raise
            if isinstance(exc, ConnectionFailed):
                self.service_down.mark()
            return [self._query_from_cache(query, exc) for query in queries]
        self.service_down.clear()
        now = datetime.now(UTC)
        answers = []
        for query, result in zip(queries, results, strict=True):
            if result.result is not None and self.cache is not None:
                key = request_key("GET", "/v1/configs/best", best_params(query))
                self.cache.put(key, result.result.model_dump_json(), result.etag)
            answers.append(QueryAnswer(query, result.result, result.error, False, now))
        return answers

    def _query_from_cache(self, query: ConfigQuery, error: Exception) -> QueryAnswer:
        key = request_key("GET", "/v1/configs/best", best_params(query))
        entry = self.cache.get(key) if self.cache is not None else None
        if entry is None:
            return QueryAnswer(query, None, f"{error}; no cached answer", unreachable=True)
        config = self._parse(BestConfigOut, entry.body, "GET", "/v1/configs/best")
        return QueryAnswer(query, config, None, True, entry.confirmed_at, unreachable=True)

    def client_best(
        self,
        op: str,
        key: dict[str, Any],
        device: str,
        toolchain: str | None = None,
    ) -> Cached[ClientBestOut]:
        """A client-measured winner (``op`` like ``triton:<kernel hash>``) through the cache:
        ApiError 404 when nobody uploaded one for this key and device."""
        params = {"op": op, "key": canonical_key(key), "device": device, "toolchain": toolchain}
        return self.cached_get(ClientBestOut, "/v1/client-configs/best", params)
